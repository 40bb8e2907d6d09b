# Shared by the benchmark scripts: logging, cleanup of started processes,
# the release build of gatehouse and starting servers. Source it after
# setting HERE (the script's directory) and WORK (its scratch directory).
# shellcheck shell=bash
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/work/target-bench}"
CONFIG="${CONFIG:-$ROOT/examples/library/gatehouse.toml}"

log() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }

# --- cleanup -----------------------------------------------------------------
PIDS=()
cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

build_gatehouse() {
  # gatehouse is built from a snapshot of the committed HEAD (`git archive`), so
  # the figures belong to a commit even while the working tree is being edited;
  # GATEHOUSE_SRC=tree builds the working tree as it is instead.
  if [[ -z "${GATEHOUSE_BIN:-}" ]]; then
    if [[ "${GATEHOUSE_SRC:-head}" == head ]]; then
      SRC="$CARGO_TARGET_DIR/bench-src"
      COMMIT="$(git -C "$ROOT" rev-parse HEAD)"
      # Re-extract (and so rebuild) only when what gatehouse is built from changed.
      STAMP="$(git -C "$ROOT" ls-tree HEAD .cargo Cargo.toml Cargo.lock crates examples | sha256sum | cut -c1-16)"
      if [[ "$(cat "$SRC/.bench-stamp" 2>/dev/null)" != "$STAMP" ]]; then
        rm -rf "$SRC" && mkdir -p "$SRC"
        # -m: the files get the extraction time, not the commit's. cargo
        # rebuilds what is older than its last build of this path, so with
        # the commit's times an earlier commit's snapshot would reuse a later
        # build's artifacts.
        git -C "$ROOT" archive "$COMMIT" | tar -x -m -C "$SRC"
        echo "$STAMP" >"$SRC/.bench-stamp"
      fi
      GATEHOUSE_DESC="$(git -C "$ROOT" rev-parse --short HEAD) (committed HEAD, built from a git archive)"
    else
      SRC="$ROOT"
      GATEHOUSE_DESC="$(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- crates Cargo.lock || echo ' + uncommitted changes in crates/')"
    fi
    log "building gatehouse from $SRC (release, CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
    (cd "$SRC" && cargo build --release --bin gatehouse)
    GATEHOUSE_BIN="$CARGO_TARGET_DIR/release/gatehouse"
    CONFIG="$SRC/examples/library/gatehouse.toml"
  fi
  GATEHOUSE_DESC="${GATEHOUSE_DESC:-$GATEHOUSE_BIN (given)}"
}

wait_http() { # URL NAME PID
  for _ in $(seq 600); do
    if curl -s -o /dev/null "$1"; then return 0; fi
    kill -0 "$3" 2>/dev/null || die "$2 exited during start-up; see $WORK/$2.log"
    sleep 0.1
  done
  die "$2 did not answer $1 within 60 s; see $WORK/$2.log"
}

start_gatehouse() { # NAME PORT DATABASE [ENV=VALUE...]
  local name=$1 port=$2 db=$3
  shift 3
  # cwd = $WORK so a PostgreSQL run's ./data/gatehouse.key lands there.
  (cd "$WORK" && exec env "$@" "$GATEHOUSE_BIN" serve --config "$CONFIG" \
    --database "$db" --listen "127.0.0.1:$port") >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  wait_http "http://127.0.0.1:$port/healthz" "$name" "$!"
}

# Runs wrk with bench/request.lua (BENCH_* variables set by the caller):
# a warm-up, then one measured run; prints the BENCH_RESULT line.
measure() { # NAME URL
  wrk -t"$THREADS" -c"$CONNS" -d"$WARMUP" -s "$ROOT/bench/request.lua" "$2" >/dev/null
  wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$ROOT/bench/request.lua" "$2" >"$WORK/wrk-$1.txt"
  grep '^BENCH_RESULT' "$WORK/wrk-$1.txt" || die "no result from wrk; see $WORK/wrk-$1.txt"
}

machine_info() {
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(nproc) CPUs; $(lscpu | sed -n 's/^Model name: *//p')"
  echo "gatehouse: $GATEHOUSE_DESC"
  echo "binary: $GATEHOUSE_BIN ($(stat -c %y "$GATEHOUSE_BIN" | cut -d. -f1))"
  echo "wrk: -t$THREADS -c$CONNS, warm-up $WARMUP, measure $DURATION"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
}
