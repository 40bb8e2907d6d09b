-- wrk script shared by the benchmarks: send one fixed request, then print
-- one machine-readable line with throughput and latency percentiles.
--
--   BENCH_METHOD         GET or POST (default POST)
--   BENCH_BODY           request body (POST; required unless GET)
--   BENCH_CONTENT_TYPE   default application/json
--   BENCH_TOKEN          optional: sent as "Authorization: Bearer ..."
--   BENCH_AUTHORIZATION  optional: the whole Authorization header (wins over BENCH_TOKEN)
--   BENCH_IDS_FILE       optional: a file of ids, one per line; every request
--                        then replaces %ID% in BENCH_BODY with the next id
--                        (each thread starts at its own place in the list)
--   %UUID% in BENCH_BODY  replaced on every request by a fresh id shaped
--                        like a UUIDv7 (the time in milliseconds first, so
--                        it sorts after rows made earlier, as the ids
--                        gatehouse generates do), for creates on a server
--                        that is given the row's id
--
--   BENCH_BODY='{"query":"{ books(first: 10) { title year } }"}' \
--     wrk -t2 -c50 -d15s -s bench/request.lua http://127.0.0.1:18081/graphql

wrk.method = os.getenv("BENCH_METHOD") or "POST"
if wrk.method ~= "GET" then
  wrk.body = os.getenv("BENCH_BODY") or error("BENCH_BODY is not set")
  wrk.headers["Content-Type"] = os.getenv("BENCH_CONTENT_TYPE") or "application/json"
end
wrk.headers["Accept"] = "application/json"
local authorization = os.getenv("BENCH_AUTHORIZATION")
local token = os.getenv("BENCH_TOKEN")
if authorization and authorization ~= "" then
  wrk.headers["Authorization"] = authorization
elseif token and token ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. token
end

local ids_file = os.getenv("BENCH_IDS_FILE")
local ids = nil
if ids_file and ids_file ~= "" then
  ids = {}
  for line in io.lines(ids_file) do
    if line ~= "" then ids[#ids + 1] = line end
  end
  if #ids == 0 then error(ids_file .. " holds no ids") end
end
local uuids = wrk.body ~= nil and wrk.body:find("%UUID%", 1, true) ~= nil

if ids or uuids then
  local template = wrk.body
  local next_id = 0
  local thread_count = 0
  function setup(thread)
    thread_count = thread_count + 1
    thread:set("thread_no", thread_count)
    if ids then thread:set("start", math.random(#ids)) end
  end
  function init()
    -- Each thread its own sequence: a different seed per thread and run.
    math.randomseed(os.time() * 1000 + (thread_no or 0) * 7919 + math.floor(os.clock() * 1e6))
  end
  local counter = nil
  -- xxxxxxxx-xxxx-7ttt-8rrr-cccccccccccc: milliseconds since the epoch
  -- (to the second), the thread, random bits, then a per-thread counter
  -- starting at a random place.
  local function uuid()
    if not counter then counter = math.random(0, 2 ^ 30) end
    counter = counter + 1
    local ms = os.time() * 1000
    return string.format("%08x-%04x-7%03x-8%03x-0000%08x",
      math.floor(ms / 65536), ms % 65536, (thread_no or 0) % 4096,
      math.random(0, 4095), counter % 4294967296)
  end
  function request()
    local body = template
    if ids then
      next_id = next_id + 1
      local id = ids[(next_id + (start or 0)) % #ids + 1]
      body = body:gsub("%%ID%%", id)
    end
    if uuids then
      body = body:gsub("%%UUID%%", uuid)
    end
    return wrk.format(nil, nil, nil, body)
  end
end

function done(summary, latency, requests)
  local secs = summary.duration / 1e6
  local e = summary.errors
  local errors = e.connect + e.read + e.write + e.timeout
  -- Latencies are in microseconds; printed in milliseconds.
  io.write(string.format(
    "BENCH_RESULT requests=%d seconds=%.3f rps=%.1f p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f non2xx=%d socket_errors=%d\n",
    summary.requests, secs, summary.requests / secs,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000,
    e.status, errors))
end
