-- wrk script: signed GitHub webhooks, each a distinct delivery: its own X-GitHub-Delivery
-- and its own signed body, as real traffic is (one body under fresh ids is a replay,
-- which the edge acknowledges without storing). BODIES holds "signature<TAB>body" lines
-- (lib.sh's bench_bodies); thread t of THREADS cycles through every THREADS-th line, so
-- a body comes back only after more deliveries than a route's de-duplication window.
-- REPLAY=1 sends the first line's body under every id instead: the replay path.
-- RUN makes ids unique per run.
local pool = {}
for line in io.lines(os.getenv("BODIES")) do
  local sig, body = line:match("^([^\t]+)\t(.*)$")
  pool[#pool + 1] = { sig, body }
end
local run = os.getenv("RUN")
local stride = tonumber(os.getenv("THREADS") or "1")
local replay = os.getenv("REPLAY") == "1"
local threads = 0
local n = 0

function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

function request()
  n = n + 1
  local pick = 1
  if not replay then
    pick = ((tid - 1) + (n - 1) * stride) % #pool + 1
  end
  local signed = pool[pick]
  local headers = {
    ["Content-Type"] = "application/json",
    ["X-GitHub-Event"] = "push",
    ["X-GitHub-Delivery"] = run .. "-" .. tid .. "-" .. n,
    ["X-Hub-Signature-256"] = signed[1],
  }
  -- wrk.format takes these headers instead of -H's: add those (e.g. Connection: close).
  for name, value in pairs(wrk.headers) do
    headers[name] = value
  end
  return wrk.format("POST", "/hooks/github", headers, signed[2])
end

function done(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  io.write(string.format("RESULT rps=%.1f p50_us=%d p99_us=%d non2xx=%d errors=%d requests=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    summary.errors.status, errors, summary.requests))
end
