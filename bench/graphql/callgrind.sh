#!/usr/bin/env bash
# Instructions per request (GraphQL flat, nested, lookup, connection, the
# owner-filtered and the membership-filtered lists; the
# REST list, all fields and the flat query's two; and two writes: atomic,
# two createBooks in one transaction, and create, one createBook) of one
# gatehouse binary, under callgrind: deterministic, so two
# builds compare exactly where wrk's req/s move by a few percent between
# runs. The writes also print instructions per written row, to compare
# with a lookup.
#
#   bench/graphql/callgrind.sh BIN [PORT]
#   DB=postgres bench/graphql/callgrind.sh BIN [PORT]
#
# Needs a finished bench/graphql/run.sh (its SQLite file, key and ids in
# bench/graphql/work/, copied, never changed; with DB=postgres its database,
# BENCH_DB (default gh_bench) on BENCH_POSTGRES_URL's server, to which the
# writes add LOST books after the seeded ones in id order, as the run's own
# atomic and create cases do, so the read cases keep their answers) and
# valgrind. For each query:
# 200 warm-up requests, then 2,000 on one keep-alive connection with
# instrumentation on; prints total instructions (every thread of gatehouse,
# not PostgreSQL's) / 2,000. KEEP=DIR keeps the callgrind files there, for
# callgrind_annotate.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BENCH=$ROOT/bench/graphql/work
BIN=$1 PORT=${2:-19101}
DB=${DB:-sqlite}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cp "$BENCH"/bench.db* "$W/"
# The key files, when the run made them (it sets GATEHOUSE_SECRET instead
# when it compares with a baseline build: export the same value here).
for f in data gatehouse.key; do
  if [[ -e "$BENCH/$f" ]]; then cp -r "$BENCH/$f" "$W/"; fi
done
cd "$W"
case $DB in
  sqlite) URL="sqlite://$W/bench.db" ;;
  postgres)
    PG_SERVER_URL="${BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
    # Its key file is data/gatehouse.key, copied above.
    URL="$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$PG_SERVER_URL" "${BENCH_DB:-gh_bench}")" ;;
  *) echo "DB is sqlite or postgres" >&2; exit 2 ;;
esac
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$W/cg.out" \
  "$BIN" serve --config "$ROOT/examples/library/gatehouse.toml" \
  --database "$URL" --listen "127.0.0.1:$PORT" > "$W/server.log" 2>&1 &
PID=$!
for i in $(seq 1 300); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 1; done
TOKEN=$(curl -sf -u demo-app:demo-secret-change-me -d grant_type=password -d username=alice \
  -d password=alice-password -d 'scope=read write' "http://127.0.0.1:$PORT/oauth/token" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
python3 - "$PORT" "$TOKEN" "$PID" "$BENCH/ids-$DB.txt" "$BENCH/authors-$DB.txt" <<'PY'
import http.client, json, subprocess, sys
port, token, pid, ids_file, authors_file = sys.argv[1:6]
ids = [l.strip() for l in open(ids_file) if l.strip()]
authors = [l.strip() for l in open(authors_file) if l.strip()]
# The writes of run.sh's atomic and create cases: LOST books, a different
# author per request.
ATOMIC = 'mutation($id: ID!) { a: createBook(input: {title: "bench a", status: LOST, author: $id}) { title } b: createBook(input: {title: "bench b", status: LOST, author: $id}) { title } }'
CREATE = 'mutation($id: ID!) { createBook(input: {title: "bench c", status: LOST, author: $id}) { title } }'
c = http.client.HTTPConnection('127.0.0.1', int(port))
cases = {
  'flat': lambda i: {"query": "{ books(first: 10) { title year } }"},
  'nested': lambda i: {"query": "{ books(first: 10) { title year author { name } } }"},
  'lookup': lambda i: {"query": "query($id: ID!) { book(id: $id) { title year author { name } } }", "variables": {"id": ids[i % len(ids)]}},
  'connection': lambda i: {"query": "{ booksConnection(first: 10) { edges { node { title year } } } }"},
  'owned': lambda i: {"query": "{ notes(first: 10) { text } }"},
  'membership': lambda i: {"query": "{ groupBooks(first: 10) { id } }"},
  'rest': lambda i: '/v1/books?per_page=10',
  'rest_fields': lambda i: '/v1/books?per_page=10&fields=title,year',
  'atomic': lambda i: {"query": ATOMIC, "variables": {"id": authors[i % len(authors)]}},
  'create': lambda i: {"query": CREATE, "variables": {"id": authors[i % len(authors)]}},
}
def send(body):
    headers = {'Authorization': 'Bearer ' + token}
    if isinstance(body, str):
        c.request('GET', body, headers=headers)
    else:
        headers['Content-Type'] = 'application/json'
        c.request('POST', '/graphql', json.dumps(body), headers)
    r = c.getresponse(); data = r.read()
    assert r.status == 200 and b'"errors"' not in data, data[:300]
for name, make in cases.items():
    for i in range(200): send(make(i))
    subprocess.run(['callgrind_control', '-z', pid], check=True, capture_output=True)
    subprocess.run(['callgrind_control', '-i', 'on', pid], check=True, capture_output=True)
    for i in range(2000): send(make(i + 200))
    subprocess.run(['callgrind_control', '-i', 'off', pid], check=True, capture_output=True)
    subprocess.run(['callgrind_control', '-d', name, pid], check=True, capture_output=True)
PY
kill $PID; wait $PID 2>/dev/null || true
[[ -n "${KEEP:-}" ]] && mkdir -p "$KEEP" && cp "$W"/cg.out.* "$KEEP/"
# In the order of the dumps (cg.out.10 after cg.out.9).
for f in $(printf '%s\n' "$W"/cg.out.* | sort -V); do
  query=$(sed -n 's/^desc: Trigger: dump //p' "$f")
  # Rows written per request, for the writes.
  case $query in atomic) rows=2 ;; create) rows=1 ;; *) rows=0 ;; esac
  echo "$query: $(awk -v rows=$rows '/^totals:/ {
    printf "%.1fk instructions per request", $2 / 2000 / 1000
    if (rows) printf " (%.1fk per written row)", $2 / 2000 / rows / 1000 }' "$f")"
done
