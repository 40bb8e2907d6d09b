#!/usr/bin/env bash
# Memory and start-up of the example server:
#
#   bench/memory/run.sh
#
# 1. builds gatehouse in release (from a `git archive` of HEAD, as
#    bench/graphql does; GATEHOUSE_BIN skips the build);
# 2. starts the example config on a fresh SQLite file and reports the time
#    from spawn to the first 200 of /healthz and the resident set (VmRSS,
#    and its anonymous part) after IDLE seconds;
# 3. restarts it on the same file (the usual start: keys and bootstrap
#    records exist) and reports the same;
# 4. loads the bench dataset (bench/graphql/load.py: 1,000 authors,
#    10,000 books, 2x1,000 notes), sends REQUESTS requests of each case of
#    bench/graphql (flat, nested, owned, lookup, REST list, count) over
#    keep-alive connections, and reports the resident set after each case
#    and after IDLE seconds at rest.
# Prints a table and writes it to bench/memory/work/results.md.
#
# Environment (all optional): REQUESTS (default 10000), IDLE (default 3),
# DATABASE (default a SQLite file in the work directory; a postgres:// URL
# measures that backend, its database is used as is), GATEHOUSE_BIN,
# CARGO_TARGET_DIR, PORT (default 18190). Needs: cargo, python3, curl.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="$HERE/work"
source "$HERE/../lib.sh"
REQUESTS="${REQUESTS:-10000}"
IDLE="${IDLE:-3}"
PORT="${PORT:-18190}"
URL="http://127.0.0.1:$PORT"

build_gatehouse
rm -rf "$WORK"
mkdir -p "$WORK"
DATABASE="${DATABASE:-sqlite://$WORK/memory.db}"

rss() { # PID -> "VmRSS_kB RssAnon_kB"
  awk '/^VmRSS:/ { r = $2 } /^RssAnon:/ { a = $2 } END { print r, a }' "/proc/$1/status"
}
mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

ROWS=()
row() { ROWS+=("| $1 | $2 | $3 | $4 |"); }

# Starts the server, returns when /healthz answers 200; sets PID and
# START_MS (spawn to first 200, polled every 2 ms).
start() {
  local t0 t1
  t0=$(date +%s%N)
  (cd "$WORK" && exec "$GATEHOUSE_BIN" serve --config "$CONFIG" \
    --database "$DATABASE" --listen "127.0.0.1:$PORT") >>"$WORK/gatehouse.log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  for _ in $(seq 30000); do
    if [[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/healthz")" == 200 ]]; then break; fi
    kill -0 "$PID" 2>/dev/null || die "gatehouse exited during start-up; see $WORK/gatehouse.log"
    sleep 0.002
  done
  t1=$(date +%s%N)
  START_MS=$(((t1 - t0) / 1000000))
}
stop() {
  kill -TERM "$PID"
  wait "$PID" 2>/dev/null || true
}
at_rest() { # LABEL
  sleep "$IDLE"
  read -r r a < <(rss "$PID")
  row "$1" "$(mb "$r")" "$(mb "$a")" "${2:-}"
}

log "first start (fresh database)"
start
at_rest "first start, idle ${IDLE}s" "start to /healthz: ${START_MS} ms"
stop
log "restart (same database)"
start
at_rest "restart, idle ${IDLE}s" "start to /healthz: ${START_MS} ms"

log "loading the bench dataset"
token() { # USER PASSWORD
  curl -sf -u demo-app:demo-secret-change-me -d grant_type=password -d "username=$1" \
    -d "password=$2" -d 'scope=read write' "$URL/oauth/token" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["access_token"])'
}
TOKEN=$(token alice alice-password)
OTHER=$(token bob bob-password)
python3 "$ROOT/bench/graphql/load.py" "$URL/graphql" --token "$TOKEN" \
  --notes 2000 --other-token "$OTHER" >"$WORK/load.log" 2>&1
read -r r a < <(rss "$PID")
row "after loading the dataset" "$(mb "$r")" "$(mb "$a")" ""

log "$REQUESTS requests of each case"
python3 - "$URL" "$TOKEN" "$REQUESTS" "$PID" >"$WORK/cases.tsv" <<'PY'
import http.client, json, random, sys, urllib.parse
url, token, n, pid = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
host = urllib.parse.urlsplit(url)
conn = http.client.HTTPConnection(host.hostname, host.port)
auth = {"Authorization": "Bearer " + token}
def call(method, path, body=None):
    headers = dict(auth)
    if body is not None:
        headers["Content-Type"] = "application/json"
        body = json.dumps(body)
    conn.request(method, path, body=body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        sys.exit(f"{method} {path} answered {r.status}: {data[:300]!r}")
    return data
ids = [b["id"] for b in json.loads(call("POST", "/graphql", {"query": "{ books(first: 500) { id } }"}))["data"]["books"]]
cases = [
    ("flat", lambda: call("POST", "/graphql", {"query": "{ books(first: 10) { title year } }"})),
    ("nested", lambda: call("POST", "/graphql", {"query": "{ books(first: 10) { title year author { name } } }"})),
    ("owned", lambda: call("POST", "/graphql", {"query": "{ notes(first: 10) { text } }"})),
    ("lookup", lambda: call("POST", "/graphql", {"query": "query($id: ID!) { book(id: $id) { title year author { name } } }",
                                                 "variables": {"id": random.choice(ids)}})),
    ("rest", lambda: call("GET", "/v1/books?per_page=10")),
    ("count", lambda: call("POST", "/graphql", {"query": "{ booksCount(status: AVAILABLE) }"})),
]
def rss():
    with open(f"/proc/{pid}/status") as f:
        v = dict(l.split(":", 1) for l in f)
    return v["VmRSS"].split()[0], v["RssAnon"].split()[0]
for name, run in cases:
    for _ in range(n):
        run()
    print(name, *rss(), sep="\t", flush=True)
PY
while IFS=$'\t' read -r name r a; do
  row "after $REQUESTS x $name" "$(mb "$r")" "$(mb "$a")" ""
done <"$WORK/cases.tsv"
at_rest "after the load, idle ${IDLE}s"
stop

{
  echo "gatehouse: $GATEHOUSE_DESC; database: ${DATABASE%%:*}; $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "| moment | VmRSS MB | anonymous MB | note |"
  echo "|---|---:|---:|---|"
  printf '%s\n' "${ROWS[@]}"
} | tee "$WORK/results.md"
