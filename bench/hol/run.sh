#!/usr/bin/env bash
# Head-of-line blocking on PostgreSQL: do other callers' simple reads keep
# their throughput while one caller runs a slow scan or waits on a lock?
#
#   bench/hol/run.sh
#
# It builds gatehouse in release (see bench/lib.sh; GATEHOUSE_BIN to use a
# given binary), creates the database `gh_hol` (dropped first), serves it
# with `workers = 2` and anonymous reads, loads ROWS books through SQL,
# then measures (load.py) READERS clients' reads of one book by id for
# EACH seconds each: quiet, beside a client looping over a sequential scan
# (`title_contains` matching nothing), and beside LOCKERS clients whose
# updates wait on a row lock held from outside. Prints the table and the
# ratio to the quiet run.
#
# Environment: BENCH_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/postgres),
# ROWS (default 1500000), EACH (seconds per case, default 10; not SECONDS, which bash sets to its own uptime), READERS (8), LOCKERS (2),
# STATEMENT_TIMEOUT (unset: the build's default), PORT (18380), GATEHOUSE_BIN.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="$HERE/work"
mkdir -p "$WORK"
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"

PG_SERVER_URL="${BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
DB_URL="${PG_SERVER_URL%/*}/gh_hol"
ROWS="${ROWS:-1500000}"
SECONDS_EACH="${EACH:-10}"
PORT="${PORT:-18380}"
# machine_info (bench/lib.sh) reports wrk settings; this client is load.py.
THREADS="${READERS:-8}" CONNS="${READERS:-8}" WARMUP=0 DURATION="${SECONDS_EACH}s"

build_gatehouse
psql -q "$PG_SERVER_URL" -c "DROP DATABASE IF EXISTS gh_hol WITH (FORCE)" -c "CREATE DATABASE gh_hol"
# STATEMENT_TIMEOUT only when given: builds before `[database]` refuse the variable.
start_gatehouse hol "$PORT" "$DB_URL" GATEHOUSE_WORKERS=2 GATEHOUSE_AUTH_ANONYMOUS_READ=true \
  ${STATEMENT_TIMEOUT:+GATEHOUSE_DATABASE_STATEMENT_TIMEOUT="$STATEMENT_TIMEOUT"}
log "loading $ROWS books"
psql -q "$DB_URL" <<SQL
INSERT INTO author (id, name) VALUES ('hol-author', 'An author');
INSERT INTO book (id, title, status, author_id)
SELECT 'hol-' || n, 'Title ' || n, 'AVAILABLE', 'hol-author' FROM generate_series(1, $ROWS) n;
ANALYZE;
SQL
{
  machine_info
  echo "rows: $ROWS books; readers: ${READERS:-8}; lockers: ${LOCKERS:-2}; ${SECONDS_EACH}s per case"
  echo
  echo "| case | reads/s | p99 ms | disturbing requests | reads vs quiet |"
  echo "|---|---|---|---|---|"
  quiet=""
  for mode in quiet scan lock; do
    read -r _ rps p99 n < <(python3 "$HERE/load.py" "http://127.0.0.1:$PORT" "$DB_URL" "$SECONDS_EACH" "$mode")
    quiet="${quiet:-$rps}"
    echo "| $mode | $rps | $p99 | $n | $(python3 -c "print(f'{$rps / $quiet:.2f}')") |"
  done
} | tee "$WORK/results.md"
