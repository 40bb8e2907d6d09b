#!/usr/bin/env bash
# What a webhook costs a write (targets: at most 15% more
# gatehouse CPU per write with one webhook, and a receiver that hangs moves
# write throughput by less than 10%).
#
#   bench/webhooks/run.sh BIN
#
# The example (examples/library) on a fresh SQLite file, the atomic write
# of bench/graphql (two books in one mutation), three ways:
#   none     no webhook;
#   answers  one webhook on Book.* to a local receiver answering 204;
#   hangs    the same webhook to a receiver that accepts and never answers.
# 1. Instructions per write under callgrind (every thread of gatehouse, the
#    delivery worker's signing and HTTP included): 100 warm-up writes, then
#    N (default 1,000) measured, after which the process keeps running until
#    every delivery was made, so the deliveries' cost is counted. With the
#    receiver that hangs, no delivery ends within the run: what is counted
#    is the writes with their outbox INSERTs, the cost a write itself pays.
# 2. Writes per second without callgrind: N writes on one keep-alive
#    connection, wall clock, per configuration, ROUNDS (3) rounds
#    interleaved.
# Needs valgrind and python3. Prints a table; writes nothing else, but with
# KEEP=DIR the callgrind files go there (callgrind_annotate; a build with
# CARGO_PROFILE_RELEASE_DEBUG=line-tables-only names the functions).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$1
N=${N:-1000}
ROUNDS=${ROUNDS:-3}
PORT=${PORT:-19301}
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$W"' EXIT
export GATEHOUSE_SECRET=bench-webhooks-secret-0123456789

python3 - "$W" <<'PY' &
# The receivers: 204 on RECV_OK, nothing ever on RECV_HANG.
import http.server, socket, sys, threading, time
w = sys.argv[1]
class Ok(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        with open(f"{w}/delivered", "a") as f:
            f.write(self.headers["webhook-id"] + "\n")
        self.send_response(204); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a): pass
ok = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ok)
hang = socket.socket(); hang.bind(("127.0.0.1", 0)); hang.listen(1024)
held = []
def accept():
    while True:
        c, _ = hang.accept(); held.append(c)
threading.Thread(target=accept, daemon=True).start()
with open(f"{w}/ports", "w") as f:
    f.write(f"{ok.server_address[1]} {hang.getsockname()[1]}\n")
ok.serve_forever()
PY
for _ in $(seq 1 50); do [[ -s "$W/ports" ]] && break; sleep 0.1; done
read -r OK_PORT HANG_PORT <"$W/ports"

config() { # NAME [URL]
  local dir="$W/$1"
  mkdir -p "$dir"
  sed -e "s#^schema = .*#schema = [\"$ROOT/examples/library/schema\"]#" \
      -e "s#^database = .*#database = \"sqlite://$dir/bench.db\"#" \
      "$ROOT/examples/library/gatehouse.toml" >"$dir/gatehouse.toml"
  if [[ -n "${2:-}" ]]; then
    cat >>"$dir/gatehouse.toml" <<EOF

[[webhooks]]
id = "books"
url = "$2"
events = ["Book.*"]
secret = "whsec_$(printf 'bench-webhook-secret-0123456789' | base64 -w0)"
timeout = "30s"
EOF
  fi
  echo "$dir/gatehouse.toml"
}

drive() { # PORT MODE(callgrind PID | time) -> prints writes/s or nothing
  python3 - "$@" <<'PY'
import http.client, json, subprocess, sys, time, urllib.parse
port, mode, pid, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def call(c, method, path, body=None, headers={}):
    c.request(method, path, body, headers)
    r = c.getresponse(); data = r.read()
    assert r.status == 200, (r.status, data[:300])
    return json.loads(data)
c = http.client.HTTPConnection("127.0.0.1", int(port))
tok = call(c, "POST", "/oauth/token", urllib.parse.urlencode({"grant_type": "password", "username": "alice",
    "password": "alice-password", "scope": "read write"}),
    {"Content-Type": "application/x-www-form-urlencoded",
     "Authorization": "Basic " + __import__("base64").b64encode(b"demo-app:demo-secret-change-me").decode()})["access_token"]
h = {"Authorization": "Bearer " + tok, "Content-Type": "application/json"}
# A new author per run: its name is unique.
author = call(c, "POST", "/graphql", json.dumps({"query": "mutation($n: String!) { createAuthor(name: $n) { id } }",
    "variables": {"n": f"bench {time.time_ns()}"}}), h)
assert "errors" not in author, author
author = author["data"]["createAuthor"]["id"]
q = 'mutation($id: ID!) { a: createBook(input: {title: "bench a", status: LOST, author: $id}) { title } b: createBook(input: {title: "bench b", status: LOST, author: $id}) { title } }'
body = json.dumps({"query": q, "variables": {"id": author}})
def write():
    d = call(c, "POST", "/graphql", body, h)
    assert "errors" not in d, d
for _ in range(100): write()
if mode == "callgrind":
    subprocess.run(["callgrind_control", "-z", pid], check=True, capture_output=True)
    subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
t = time.perf_counter()
for _ in range(n): write()
t = time.perf_counter() - t
if mode == "time":
    print(f"{n / t:.0f}")
PY
}

wait_up() {
  for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$1/healthz" >/dev/null && return; sleep 0.2; done
  echo "gatehouse did not start" >&2; exit 1
}

declare -A URLS=([none]="" [answers]="http://127.0.0.1:$OK_PORT/hook" [hangs]="http://127.0.0.1:$HANG_PORT/hook")

echo "== instructions per write (callgrind, $N writes; two rows each)"
for name in none answers hangs; do
  cfg=$(config "cg-$name" "${URLS[$name]}")
  : >"$W/delivered"
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$W/cg-$name.out" \
    "$BIN" serve --config "$cfg" --listen "127.0.0.1:$PORT" >"$W/cg-$name.log" 2>&1 &
  PID=$!
  wait_up "$PORT"
  drive "$PORT" callgrind "$PID" "$N"
  if [[ $name == answers ]]; then
    # Every write's two deliveries (warm-up included) made before stopping.
    want=$(( (N + 100) * 2 ))
    for _ in $(seq 1 600); do
      [[ $(wc -l <"$W/delivered") -ge $want ]] && break
      sleep 0.5
    done
  fi
  callgrind_control -i off "$PID" >/dev/null
  callgrind_control -d "$name" "$PID" >/dev/null
  kill "$PID"; wait "$PID" 2>/dev/null || true
  f=$(ls "$W"/cg-"$name".out.* | head -n1)
  [[ -n "${KEEP:-}" ]] && mkdir -p "$KEEP" && cp "$f" "$KEEP/"
  echo "$name: $(awk -v n="$N" '/^totals:/ {printf "%.1fk", $2 / n / 1000}' "$f") instructions per write"
  [[ $name == answers ]] && echo "  (deliveries received: $(wc -l <"$W/delivered"))"
done

echo "== writes per second (no callgrind, $N writes per round, $ROUNDS rounds)"
declare -A TOTAL=()
for name in none answers hangs; do
  cfg=$(config "t-$name" "${URLS[$name]}")
  "$BIN" serve --config "$cfg" --listen "127.0.0.1:$((PORT + 1))" >"$W/t-$name.log" 2>&1 &
  echo $! >"$W/t-$name.pid"
  wait_up $((PORT + 1))
  kill "$(cat "$W/t-$name.pid")"; wait "$(cat "$W/t-$name.pid")" 2>/dev/null || true
done
for round in $(seq 1 "$ROUNDS"); do
  for name in none answers hangs; do
    cfg="$W/t-$name/gatehouse.toml"
    "$BIN" serve --config "$cfg" --listen "127.0.0.1:$((PORT + 1))" >>"$W/t-$name.log" 2>&1 &
    PID=$!
    wait_up $((PORT + 1))
    rate=$(drive $((PORT + 1)) time "$PID" "$N")
    kill "$PID"; wait "$PID" 2>/dev/null || true
    echo "round $round $name: $rate writes/s"
    TOTAL[$name]=$(( ${TOTAL[$name]:-0} + rate ))
  done
done
for name in none answers hangs; do
  echo "mean $name: $(( TOTAL[$name] / ROUNDS )) writes/s"
done
