// A scripted stand-in for the API on loopback, for the unit tests: each test gives a handler that
// answers one request at a time, and the fake records every request (method, path, headers, body,
// raw body, arrival time) and how many were in flight at once.
import http from "node:http";

export async function startFake(handler) {
  const requests = [];
  let inFlight = 0;
  const fake = {
    requests,
    maxInFlight: 0,
    url: "",
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const raw = Buffer.concat(chunks).toString("utf8");
    const rec = {
      method: req.method,
      path: req.url,
      headers: req.headers,
      // JSON bodies parsed; a list upload's file is kept as it came, in raw.
      body: raw && /json/.test(req.headers["content-type"] ?? "") && !/ndjson/.test(req.headers["content-type"]) ? JSON.parse(raw) : undefined,
      raw,
      at: Date.now(),
      index: requests.length,
    };
    requests.push(rec);
    inFlight++;
    fake.maxInFlight = Math.max(fake.maxInFlight, inFlight);
    res.on("close", () => { inFlight--; });
    try {
      await handler(rec, res);
    } catch (err) {
      res.writeHead(599).end(String(err));
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  fake.url = `http://127.0.0.1:${server.address().port}`;
  return fake;
}

/** send answers with status and a JSON body. */
export function send(res, status, body, headers = {}) {
  res.writeHead(status, { "Content-Type": "application/json", ...headers });
  res.end(body === undefined ? "" : JSON.stringify(body));
}

/** result is a verify result for email, shaped as the API serialises it. */
export function result(email) {
  return {
    email, valid: true, status: "deliverable", confidence: 0.95, failed_check: null, disposable: false,
    role: false, free_provider: false, catch_all: false, smtp_blocked: false, mx_found: true,
    mx_host: "mx.example.com", suggestion: null, latency_ms: 1.5, reason: "accepted",
  };
}

/** streamResult is a stream's result line for email, the index-th address of its request. */
export function streamResult(email, index) {
  return { index, ...result(email) };
}

/** envelope is an API error envelope with extra fields. */
export function envelope(code, extra = {}) {
  return { error: code, message: `message of ${code}`, action: `action of ${code}`, docs: `http://localhost/docs/errors#${code}`, ...extra };
}

/** rateLimited answers 429 rate_limit_exceeded, resetting resetInMs from now. */
export function rateLimited(res, resetInMs, limit = 100) {
  const reset = new Date(Date.now() + resetInMs);
  send(res, 429, envelope("rate_limit_exceeded", { limit, window: "1m", reset_at: reset.toISOString() }),
    { "Retry-After": String(Math.max(1, Math.ceil(resetInMs / 1000))) });
  return reset.getTime();
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
