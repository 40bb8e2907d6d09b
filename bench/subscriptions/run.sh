#!/usr/bin/env bash
# Subscription load test for gatehouse:
#
#   bench/subscriptions/run.sh
#
# Builds gatehouse in release (from a `git archive` of HEAD, see ../lib.sh)
# unless GATEHOUSE_BIN is given, serves the example on a fresh SQLite file,
# takes a token for the example user, then runs the load generator: N
# WebSocket subscribers (graphql-transport-ws, `bookCreated`), one mutation a
# second, and prints delivery latency p50/p99 (from just before the mutation
# request is sent to each subscriber's `next` as read by the client, and to
# the last subscriber of each mutation) plus the server's RSS growth per idle
# subscriber. The result line is also written to bench/subscriptions/work/.
#
# Two load generators print the same JSON line:
#   rust (default)  loadgen/: tokio + tokio-tungstenite, its own Cargo project
#                   (not a workspace member), built here in release. Cheap
#                   per message, so less of the shared CPU goes to the client.
#   node            load.mjs: the `ws` package on CLIENT_THREADS worker
#                   threads (the generator the first figures were taken with).
# Protocol compatibility with a real graphql-ws client is proven separately,
# by tests/external (CI).
#
# Environment (all optional):
#   SUBSCRIBERS   sockets to open          (default 10000)
#   MUTATIONS     mutations, one a second   (default 30)
#   PORT          gatehouse's port          (default 18090)
#   LOADGEN       rust | node               (default rust)
#   CLIENT_THREADS  load generator threads: tokio worker threads (rust,
#                   default 1: see loadgen/src/main.rs) or worker threads
#                   each with its own share of the sockets and event loop
#                   (node, default 2)
#   GATEHOUSE_BIN, GATEHOUSE_SRC=tree, CARGO_TARGET_DIR (see ../lib.sh)
#
# Needs: cargo, curl, python3 (and node + npm for LOADGEN=node), and a hard
# file-descriptor limit (`ulimit -Hn`) of about 1.5 x SUBSCRIBERS: all the
# subscribers come from one address, which may hold three quarters of the
# server's default connection cap (a hard limit of 20,000 gives 13,500). The machine should be otherwise idle: the figures
# include the load generator sharing the CPU with the server.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="$HERE/work"
SUBSCRIBERS="${SUBSCRIBERS:-10000}"
MUTATIONS="${MUTATIONS:-30}"
PORT="${PORT:-18090}"
LOADGEN="${LOADGEN:-rust}"

source "$HERE/../lib.sh"
case "$LOADGEN" in
  rust) tools=(cargo curl python3) ;;
  node) tools=(cargo node npm curl python3) ;;
  *) die "LOADGEN must be rust or node, not $LOADGEN" ;;
esac
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null || die "$tool is required"
done
rm -rf "$WORK" && mkdir -p "$WORK"
# The soft open-files limit up to the hard one, for the load generator;
# gatehouse raises its own and derives its default connection caps from it
# (`limits.max_connections`, three quarters of it per address:
# docs/configuration.md).
ulimit -Sn "$(ulimit -Hn)" 2>/dev/null || true

if [[ "$LOADGEN" == node ]]; then
  (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error)
  loadgen=(node "$HERE/load.mjs")
else
  log "building the load generator (release, CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
  cargo build --release --locked --manifest-path "$HERE/loadgen/Cargo.toml"
  loadgen=("$CARGO_TARGET_DIR/release/subs-loadgen")
fi
build_gatehouse
log "gatehouse: $GATEHOUSE_DESC"
start_gatehouse gatehouse "$PORT" "sqlite://$WORK/subs.db"
server_pid="${PIDS[-1]}"
base="http://127.0.0.1:$PORT"

token="$(curl -sS --fail -u demo-app:demo-secret-change-me \
  -d grant_type=password -d username=alice -d password=alice-password \
  -d 'scope=read write' "$base/oauth/token" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')"

log "$SUBSCRIBERS subscribers, $MUTATIONS mutations (one a second), $LOADGEN load generator"
"${loadgen[@]}" "$base" "$token" "$server_pid" "$SUBSCRIBERS" "$MUTATIONS" | tee "$WORK/result.json"
