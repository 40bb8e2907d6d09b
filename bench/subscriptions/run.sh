#!/usr/bin/env bash
# Subscription load test for gatehouse (issue 8):
#
#   bench/subscriptions/run.sh
#
# Builds gatehouse in release (from a `git archive` of HEAD, see ../lib.sh)
# unless GATEHOUSE_BIN is given, serves the example on a fresh SQLite file,
# takes a token for the example user, then runs load.mjs: N WebSocket
# subscribers (graphql-transport-ws, `bookCreated`), one mutation per second,
# and prints delivery latency p50/p99 (mutation sent -> each subscriber's
# `next`, and -> the last subscriber) plus the server's RSS growth per idle
# subscriber. The result line is also written to bench/subscriptions/work/.
#
# Environment (all optional):
#   SUBSCRIBERS   sockets to open          (default 10000)
#   MUTATIONS     mutations, one a second   (default 30)
#   PORT          gatehouse's port          (default 18090)
#   CLIENT_THREADS  load generator threads, each with its own share of the
#                   sockets and its own event loop (default 2)
#   GATEHOUSE_BIN, GATEHOUSE_SRC=tree, CARGO_TARGET_DIR (see ../lib.sh)
#
# Needs: cargo, node + npm, curl, python3, and a file-descriptor limit above
# SUBSCRIBERS (raised here with `ulimit -n` when the hard limit allows).
# The machine should be otherwise idle: the figures include the load
# generator (one Node process, CLIENT_THREADS event loops) sharing the CPU
# with the server.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="$HERE/work"
SUBSCRIBERS="${SUBSCRIBERS:-10000}"
MUTATIONS="${MUTATIONS:-30}"
PORT="${PORT:-18090}"

source "$HERE/../lib.sh"
for tool in cargo node npm curl python3; do
  command -v "$tool" >/dev/null || die "$tool is required"
done
rm -rf "$WORK" && mkdir -p "$WORK"
ulimit -n "$(( SUBSCRIBERS * 2 + 1024 ))" 2>/dev/null || ulimit -n "$(ulimit -Hn)"

(cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error)
build_gatehouse
log "gatehouse: $GATEHOUSE_DESC"
start_gatehouse gatehouse "$PORT" "sqlite://$WORK/subs.db"
server_pid="${PIDS[-1]}"
base="http://127.0.0.1:$PORT"

token="$(curl -sS --fail -u demo-app:demo-secret-change-me \
  -d grant_type=password -d username=alice -d password=alice-password \
  -d 'scope=read write' "$base/oauth/token" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')"

log "$SUBSCRIBERS subscribers, $MUTATIONS mutations (one a second)"
node "$HERE/load.mjs" "$base" "$token" "$server_pid" "$SUBSCRIBERS" "$MUTATIONS" | tee "$WORK/result.json"
