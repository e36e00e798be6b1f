-- wrk script: signed GitHub webhooks with a distinct X-GitHub-Delivery per request.
-- BODY_FILE holds the body, SIG its X-Hub-Signature-256, RUN makes ids unique per run.
local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
local body = f:read("*a")
f:close()
local sig = os.getenv("SIG")
local run = os.getenv("RUN")
local threads = 0
local n = 0

function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

function request()
  n = n + 1
  return wrk.format("POST", "/hooks/github", {
    ["Content-Type"] = "application/json",
    ["X-GitHub-Event"] = "push",
    ["X-GitHub-Delivery"] = run .. "-" .. tid .. "-" .. n,
    ["X-Hub-Signature-256"] = sig,
  }, body)
end

function done(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  io.write(string.format("RESULT rps=%.1f p50_us=%d p99_us=%d non2xx=%d errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    summary.errors.status, errors))
end
