-- wrk script for benches/worker_vs_python.sh.
--
--   wrk -t1 -cC -dDs -s benches/lib/wrk_snips.lua URL -- PATHS_FILE
--
-- PATHS_FILE holds one request path per line (`/predict?query=<url-encoded utterance>`). Each
-- wrk thread cycles through them from its own offset. Every answer other than 200 is counted
-- (wrk itself only counts >= 400). done() prints one machine-readable line, `WRK key=value ...`,
-- with latencies in milliseconds taken from wrk's own per-request histogram.

local threads = {}

function setup(thread)
  thread:set("offset", #threads * 997)
  table.insert(threads, thread)
end

local requests = {}
local i = 0
non200 = 0

function init(args)
  local file = args[1] or error("usage: wrk ... -s wrk_snips.lua URL -- PATHS_FILE")
  for line in io.lines(file) do
    if #line > 0 then
      requests[#requests + 1] = wrk.format("GET", line)
    end
  end
  if #requests == 0 then error("no request paths in " .. file) end
  i = (offset or 0) % #requests
end

function request()
  i = i % #requests + 1
  return requests[i]
end

function response(status, headers, body)
  if status ~= 200 then non200 = non200 + 1 end
end

function done(summary, latency, requests)
  local bad = 0
  for _, t in ipairs(threads) do bad = bad + (t:get("non200") or 0) end
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    "WRK requests=%d duration_s=%.3f rps=%.2f mean_ms=%.3f p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f " ..
    "non200=%d connect_err=%d read_err=%d write_err=%d timeouts=%d\n",
    summary.requests, secs, summary.requests / secs, latency.mean / 1e3,
    latency:percentile(50) / 1e3, latency:percentile(90) / 1e3, latency:percentile(99) / 1e3, latency.max / 1e3,
    bad, e.connect, e.read, e.write, e.timeout))
end
