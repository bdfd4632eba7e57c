// Unit tests of the client against the scripted fake API of fake.mjs: request shapes, errors,
// retry timing after 429 and 503, batch and stream chunking, timeouts and aborts.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { Mailvet, MailvetError } from "../dist/index.js";
import { envelope, rateLimited, result, send, sleep, startFake, streamResult } from "./fake.mjs";

const fakes = [];
async function fake(handler) {
  const f = await startFake(handler);
  fakes.push(f);
  return f;
}
after(() => Promise.all(fakes.map((f) => f.close())));

const keys = { apiKey: "sk_live_test", provisioningKey: "sk_mgmt_test" };
const emailsOf = (n, prefix = "u") => Array.from({ length: n }, (_, i) => `${prefix}${i}@acme.example`);

describe("requests", () => {
  test("verify sends the standard key and the address, and returns the result", async () => {
    const f = await fake((req, res) => send(res, 200, result(req.body.email)));
    const mv = new Mailvet({ baseUrl: f.url + "/", ...keys });
    const r = await mv.verify("ann@acme.example");
    assert.equal(r.email, "ann@acme.example");
    assert.equal(r.status, "deliverable");
    const [req] = f.requests;
    assert.equal(req.method, "POST");
    assert.equal(req.path, "/v1/email/verify");
    assert.equal(req.headers.authorization, "Bearer sk_live_test");
    assert.equal(req.headers["content-type"], "application/json");
    assert.deepEqual(req.body, { email: "ann@acme.example" });
  });

  test("verifyAsync sends webhook_url and webhook_secret; job reads the job", async () => {
    const f = await fake((req, res) => {
      if (req.method === "POST") return send(res, 202, { job_id: "0b6f3c1e-8a2d-4f5e-9c41-2d7a9e0b5f13", status: "pending" });
      send(res, 200, { job_id: "0b6f3c1e-8a2d-4f5e-9c41-2d7a9e0b5f13", status: "pending", email: "ann@acme.example", result: null, created_at: "2026-11-22T03:04:05Z", completed_at: null, next_attempt_at: null });
    });
    const mv = new Mailvet({ baseUrl: f.url, ...keys });
    const acc = await mv.verifyAsync("ann@acme.example", { webhookUrl: "https://hooks.example.com/mv", webhookSecret: "at-least-8-chars" });
    assert.deepEqual(acc, { job_id: "0b6f3c1e-8a2d-4f5e-9c41-2d7a9e0b5f13", status: "pending" });
    assert.deepEqual(f.requests[0].body, { email: "ann@acme.example", webhook_url: "https://hooks.example.com/mv", webhook_secret: "at-least-8-chars" });
    const job = await mv.job(acc.job_id);
    assert.equal(job.status, "pending");
    assert.equal(f.requests[1].method, "GET");
    assert.equal(f.requests[1].path, "/v1/email/jobs/0b6f3c1e-8a2d-4f5e-9c41-2d7a9e0b5f13");
    await assert.rejects(mv.verifyAsync("ann@acme.example", {}), TypeError);
  });

  test("keys.create sends the mode only when given: sandbox keys (docs/sandbox.md)", async () => {
    const f = await fake((req, res) => send(res, 201, { body: req.body, auth: req.headers.authorization }));
    const mv = new Mailvet({ baseUrl: f.url, ...keys });
    assert.deepEqual(await mv.keys.create("ci", { mode: "sandbox" }), { body: { label: "ci", mode: "sandbox" }, auth: "Bearer sk_mgmt_test" });
    assert.deepEqual(await mv.keys.create("prod", { mode: "live" }), { body: { label: "prod", mode: "live" }, auth: "Bearer sk_mgmt_test" });
    assert.deepEqual(await mv.keys.create("plain"), { body: { label: "plain" }, auth: "Bearer sk_mgmt_test" });
  });

  test("audit.all and deliveries.all stop on a next_cursor they already followed instead of looping forever", async () => {
    const f = await fake((req, res) => {
      if (req.path.startsWith("/v1/management/audit")) return send(res, 200, { events: [{ id: "e", kind: "signin" }], next_cursor: "same" });
      send(res, 200, { deliveries: [{ id: "d" }], next_cursor: req.index % 2 === 0 ? "a" : "b" });
    });
    const mv = new Mailvet({ baseUrl: f.url, ...keys });
    const drain = async (it) => { let n = 0; for await (const _ of it) if (++n > 50) return n; return n; };
    const err = await drain(mv.audit.all()).catch((e) => e);
    assert.ok(err instanceof MailvetError, `audit.all ended with ${err}`);
    assert.equal(err.error, "invalid_response");
    assert.equal(f.requests.length, 2, "the first page, then the cursor once");
    const err2 = await drain(mv.deliveries.all()).catch((e) => e);
    assert.equal(err2?.error, "invalid_response", "a cycle of two cursors is caught too");
    assert.equal(f.requests.length, 5);
  });

  test("the management calls use the provisioning key, their method and path", async () => {
    const f = await fake((req, res) => {
      if (req.method === "DELETE") return send(res, 204);
      if (req.path.startsWith("/v1/management/deliveries?")) {
        const cursor = new URL(req.path, "http://x").searchParams.get("cursor");
        return send(res, 200, cursor ? { deliveries: [{ id: "d2" }] } : { deliveries: [{ id: "d1" }], next_cursor: "c1" });
      }
      send(res, 200, { path: req.path, body: req.body ?? null });
    });
    const mv = new Mailvet({ baseUrl: f.url, ...keys });
    assert.deepEqual(await mv.account(), { path: "/v1/management/account", body: null });
    assert.deepEqual(await mv.keys.list(), { path: "/v1/management/keys", body: null });
    assert.deepEqual(await mv.keys.create("prod"), { path: "/v1/management/keys", body: { label: "prod" } });
    assert.equal(await mv.keys.revoke("9a7e/x"), undefined);
    assert.deepEqual(await mv.usage(), { path: "/v1/management/usage", body: null });
    assert.deepEqual(await mv.usageSummary(), { path: "/v1/management/usage/summary", body: null });
    assert.deepEqual(await mv.billingPortal("https://app.example.com/billing"), { path: "/v1/management/billing/portal", body: { return_url: "https://app.example.com/billing" } });
    assert.deepEqual(await mv.deliveries.retry("d1"), { path: "/v1/management/deliveries/d1/retry", body: null });
    const page = await mv.deliveries.list({ status: "failed", limit: 10 });
    assert.equal(page.next_cursor, "c1");
    const all = [];
    for await (const d of mv.deliveries.all({ status: "failed" })) all.push(d.id);
    assert.deepEqual(all, ["d1", "d2"]);
    const seen = f.requests.map((r) => `${r.method} ${r.path}`);
    assert.deepEqual(seen, [
      "GET /v1/management/account", "GET /v1/management/keys", "POST /v1/management/keys",
      "DELETE /v1/management/keys/9a7e%2Fx", "GET /v1/management/usage", "GET /v1/management/usage/summary",
      "POST /v1/management/billing/portal", "POST /v1/management/deliveries/d1/retry",
      "GET /v1/management/deliveries?status=failed&limit=10",
      "GET /v1/management/deliveries?status=failed", "GET /v1/management/deliveries?status=failed&cursor=c1",
    ]);
    for (const r of f.requests) assert.equal(r.headers.authorization, "Bearer sk_mgmt_test");
  });

  test("audit.list and audit.all page GET /v1/management/audit with the provisioning key", async () => {
    const f = await fake((req, res) => {
      const cursor = new URL(req.path, "http://x").searchParams.get("cursor");
      send(res, 200, cursor ? { events: [{ id: "e2", kind: "signin" }] } : { events: [{ id: "e1", kind: "key_created" }], next_cursor: "c 1" });
    });
    const mv = new Mailvet({ baseUrl: f.url, ...keys });
    const page = await mv.audit.list({ limit: 1 });
    assert.deepEqual(page, { events: [{ id: "e1", kind: "key_created" }], next_cursor: "c 1" });
    assert.deepEqual((await mv.audit.list({ cursor: page.next_cursor })).events.map((e) => e.id), ["e2"]);
    const all = [];
    for await (const e of mv.audit.all({ limit: 1 })) all.push(e.id);
    assert.deepEqual(all, ["e1", "e2"]);
    assert.deepEqual(f.requests.map((r) => `${r.method} ${r.path}`), [
      "GET /v1/management/audit?limit=1", "GET /v1/management/audit?cursor=c+1",
      "GET /v1/management/audit?limit=1", "GET /v1/management/audit?limit=1&cursor=c+1",
    ]);
    for (const r of f.requests) assert.equal(r.headers.authorization, "Bearer sk_mgmt_test");
  });

  test("deleteAccount, exportAccount and deleteHistory send their key, method, path and body", async () => {
    const f = await fake((req, res) => {
      if (req.path === "/v1/management/account" && req.method === "DELETE") return send(res, 204);
      if (req.path === "/v1/management/account/export") return send(res, 200, { account: { account_id: "a1" }, truncated: [] });
      send(res, 200, { email: "ann@acme.example", deleted: { results: 2, jobs: 1, deliveries: 1, list_rows: 0 } });
    });
    const mv = new Mailvet({ baseUrl: f.url, ...keys });
    assert.equal(await mv.deleteAccount("a1"), undefined);
    assert.deepEqual(await mv.exportAccount(), { account: { account_id: "a1" }, truncated: [] });
    const d = await mv.deleteHistory("Ann+x@acme.example");
    assert.equal(d.deleted.results, 2);
    const [del, exp, hist] = f.requests;
    assert.equal(`${del.method} ${del.path}`, "DELETE /v1/management/account");
    assert.deepEqual(del.body, { confirm: "a1" });
    assert.equal(del.headers.authorization, "Bearer sk_mgmt_test");
    assert.equal(`${exp.method} ${exp.path}`, "GET /v1/management/account/export");
    assert.equal(exp.headers.authorization, "Bearer sk_mgmt_test");
    assert.equal(`${hist.method} ${hist.path}`, "DELETE /v1/email/history?email=Ann%2Bx%40acme.example");
    assert.equal(hist.headers.authorization, "Bearer sk_live_test");
  });

  test("a call without the key it needs fails before any request", async () => {
    const f = await fake((req, res) => send(res, 200, {}));
    await assert.rejects(new Mailvet({ baseUrl: f.url, apiKey: "sk_live_x" }).account(), /provisioning key/);
    await assert.rejects(new Mailvet({ baseUrl: f.url, provisioningKey: "sk_mgmt_x" }).verify("a@b.example"), /standard key/);
    assert.equal(f.requests.length, 0);
    assert.throws(() => new Mailvet({ baseUrl: "localhost:8080" }), TypeError);
  });

  test("a key a header cannot carry is refused by the constructor without showing the key; blanks around it are dropped", async () => {
    const secret = "sk_live_0123456789abcdefSECRET";
    for (const bad of [`${secret}\nsecond line`, `${secret}\r\nX-Other: 1`, `${secret}\u00e9`, `sk_live_ ${secret}`]) {
      for (const options of [{ apiKey: bad }, { provisioningKey: bad }]) {
        let err;
        try {
          new Mailvet({ baseUrl: "http://127.0.0.1:1", ...options });
        } catch (e) {
          err = e;
        }
        assert.ok(err instanceof TypeError, `${JSON.stringify(options)}: ${err}`);
        assert.match(err.message, /(apiKey|provisioningKey) has a character/);
        assert.ok(!err.message.includes("SECRET") && !String(err.stack).includes("SECRET"), err.message);
      }
    }
    const f = await fake((req, res) => send(res, 200, result(req.body.email)));
    await new Mailvet({ baseUrl: f.url, apiKey: ` ${secret}\r\n` }).verify("ann@acme.example");
    assert.equal(f.requests[0].headers.authorization, `Bearer ${secret}`);
  });
});

describe("errors", () => {
  test("an error envelope becomes a MailvetError with every field", async () => {
    const f = await fake((req, res) => send(res, 402, envelope("payment_required", { hard_cap_eur: 25, current_overage_eur: 24.99, room: 3, reset_at: "2026-12-01T00:00:00Z" }), { "X-Request-Id": "req-1" }));
    const mv = new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true });
    const err = await mv.verify("ann@acme.example").catch((e) => e);
    assert.ok(err instanceof MailvetError);
    assert.ok(err instanceof Error);
    assert.equal(err.name, "MailvetError");
    assert.equal(err.status, 402);
    assert.equal(err.error, "payment_required");
    assert.equal(err.message, "message of payment_required");
    assert.equal(err.action, "action of payment_required");
    assert.equal(err.docs, "http://localhost/docs/errors#payment_required");
    assert.equal(err.hard_cap_eur, 25);
    assert.equal(err.current_overage_eur, 24.99);
    assert.equal(err.room, 3);
    assert.equal(err.reset_at, "2026-12-01T00:00:00Z");
    assert.equal(err.requestId, "req-1");
    assert.equal(err.body.error, "payment_required");
    assert.equal(f.requests.length, 1, "a 402 is never retried");
  });

  test("a 429 is thrown at once with its fields when retryOnRateLimit is off (the default)", async () => {
    const f = await fake((req, res) => rateLimited(res, 100, 10));
    const err = await new Mailvet({ baseUrl: f.url, ...keys }).verify("a@acme.example").catch((e) => e);
    assert.equal(err.status, 429);
    assert.equal(err.error, "rate_limit_exceeded");
    assert.equal(err.limit, 10);
    assert.equal(err.window, "1m");
    assert.match(err.reset_at, /^\d{4}-\d\d-\d\dT/);
    assert.equal(err.retryAfter, 1);
    assert.equal(f.requests.length, 1);
  });

  test("monthly_quota_exceeded is never retried: its reset_at is next month", async () => {
    const f = await fake((req, res) => send(res, 429, envelope("monthly_quota_exceeded", { limit: 500, used: 500, reset_at: "2026-12-01T00:00:00Z" }), { "Retry-After": "1" }));
    const err = await new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true }).verify("a@acme.example").catch((e) => e);
    assert.equal(err.error, "monthly_quota_exceeded");
    assert.equal(err.used, 500);
    assert.equal(f.requests.length, 1);
  });

  test("an error without the API's envelope is an http_error carrying the status", async () => {
    const f = await fake((req, res) => { res.writeHead(502, { "Content-Type": "text/html" }); res.end("<h1>Bad gateway</h1>"); });
    const err = await new Mailvet({ baseUrl: f.url, ...keys }).usage().catch((e) => e);
    assert.ok(err instanceof MailvetError);
    assert.equal(err.status, 502);
    assert.equal(err.error, "http_error");
    assert.match(err.message, /502.*Bad gateway/);
  });

  test("an error page that never ends (a misbehaving proxy's) is read only to 64 KiB: an http_error at once, not a timeout", async () => {
    const f = await fake(async (req, res) => {
      res.writeHead(502, { "Content-Type": "text/html", "X-Request-Id": "rid-502" });
      const chunk = "<p>" + "x".repeat(64 << 10) + "</p>\n";
      // Up to 128 MiB, then held open: only a client that stops reading is answered in time.
      for (let i = 0; i < 2048 && !res.destroyed; i++) {
        if (!res.write(chunk)) await new Promise((r) => { res.once("drain", r); res.once("close", r); });
      }
    });
    const started = Date.now();
    const err = await new Mailvet({ baseUrl: f.url, ...keys, timeoutMs: 5000 }).account().catch((e) => e);
    assert.ok(err instanceof MailvetError, String(err));
    assert.equal(err.error, "http_error");
    assert.equal(err.status, 502);
    assert.equal(err.requestId, "rid-502");
    assert.match(err.message, /^HTTP 502: <p>x{100}/);
    assert.ok(Date.now() - started < 3000, `answered after ${Date.now() - started} ms`);
  });

  test("an answer with no end is an invalid_response at 32 MiB, not held in memory until the timeout; the export is not bounded", async () => {
    const endless = async (req, res) => {
      res.writeHead(200, { "Content-Type": "application/json", "X-Request-Id": "rid-endless" });
      res.write('{"account_id":"');
      const chunk = "x".repeat(64 << 10);
      // Up to 256 MiB, then held open: only a client that stops reading answers in time.
      for (let i = 0; i < 4096 && !res.destroyed; i++) {
        if (!res.write(chunk)) await new Promise((r) => { res.once("drain", r); res.once("close", r); });
      }
    };
    const f = await fake(endless);
    const started = Date.now();
    const err = await new Mailvet({ baseUrl: f.url, ...keys, timeoutMs: 20_000 }).account().catch((e) => e);
    assert.ok(err instanceof MailvetError, String(err));
    assert.equal(err.error, "invalid_response");
    assert.match(err.message, /larger than 32 MiB/);
    assert.equal(err.requestId, "rid-endless");
    assert.ok(Date.now() - started < 10_000, `refused after ${Date.now() - started} ms`);
    // The export is the one answer that may rightly be larger: 33 MiB of it is read whole.
    const big = "y".repeat(33 << 20);
    const g = await fake((req, res) => send(res, 200, { account: { account_id: big } }));
    const doc = await new Mailvet({ baseUrl: g.url, ...keys }).exportAccount();
    assert.equal(doc.account.account_id.length, big.length);
  });

  test("a success that is not JSON is an invalid_response", async () => {
    const f = await fake((req, res) => { res.writeHead(200); res.end("not json"); });
    const err = await new Mailvet({ baseUrl: f.url, ...keys }).verify("a@acme.example").catch((e) => e);
    assert.equal(err.error, "invalid_response");
    assert.equal(err.status, 200);
  });

  test("a 200 with an empty body (a proxy's, not the API's) is an invalid_response, not undefined", async () => {
    const f = await fake((req, res) => { res.writeHead(200, { "X-Request-Id": "rid-1" }); res.end(); });
    const err = await new Mailvet({ baseUrl: f.url, ...keys }).verify("a@acme.example").catch((e) => e);
    assert.ok(err instanceof MailvetError, `resolved to ${JSON.stringify(err)}`);
    assert.equal(err.error, "invalid_response");
    assert.equal(err.requestId, "rid-1");
    // The API's 204s still resolve.
    const g = await fake((req, res) => { res.writeHead(204); res.end(); });
    assert.equal(await new Mailvet({ baseUrl: g.url, ...keys }).keys.revoke("k1"), undefined);
  });
});

describe("retries", () => {
  test("after a 429 the retry waits until reset_at + 50 ms, not longer", async () => {
    let reset = 0;
    const f = await fake((req, res) => {
      if (req.index === 0) reset = rateLimited(res, 300);
      else send(res, 200, result(req.body.email));
    });
    const mv = new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true });
    const r = await mv.verify("ann@acme.example");
    assert.equal(r.email, "ann@acme.example");
    assert.equal(f.requests.length, 2);
    const retriedAt = f.requests[1].at;
    assert.ok(retriedAt >= reset + 50, `retried ${reset + 50 - retriedAt} ms before reset_at + 50 ms`);
    // Well under the 1 s of the Retry-After header: reset_at, not the rounded header, is waited for
    // (the margin leaves room for a loaded machine).
    assert.ok(retriedAt < reset + 50 + 600, `retried ${retriedAt - reset - 50} ms after reset_at + 50 ms`);
  });

  test("reset_at to the second, as the API sends it, is waited out the same way", async () => {
    let reset = 0;
    const f = await fake((req, res) => {
      if (req.index > 0) return send(res, 200, result(req.body.email));
      reset = Math.ceil((Date.now() + 1) / 1000) * 1000; // the next whole second
      send(res, 429, envelope("rate_limit_exceeded", { limit: 10, window: "1m", reset_at: new Date(reset).toISOString().replace(/\.\d+Z$/, "Z") }), { "Retry-After": "1" });
    });
    await new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true }).verify("ann@acme.example");
    assert.ok(f.requests[1].at >= reset + 50);
    assert.ok(f.requests[1].at < reset + 50 + 600);
  });

  test("at most maxRetries retries, then the 429 is thrown", async () => {
    const f = await fake((req, res) => rateLimited(res, 20));
    const err = await new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true, maxRetries: 2 }).verify("a@acme.example").catch((e) => e);
    assert.equal(err.error, "rate_limit_exceeded");
    assert.equal(f.requests.length, 3);
    const f2 = await fake((req, res) => rateLimited(res, 20));
    await assert.rejects(new Mailvet({ baseUrl: f2.url, ...keys, retryOnRateLimit: true }).verify("a@acme.example"), MailvetError);
    assert.equal(f2.requests.length, 4, "the default maxRetries is 3");
  });

  test("a 503 with Retry-After is retried after that many seconds; without it, it is thrown", async () => {
    const f = await fake((req, res) => {
      if (req.index === 0) return send(res, 503, envelope("service_unavailable"), { "Retry-After": "1" });
      send(res, 200, result(req.body.email));
    });
    await new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true }).verify("a@acme.example");
    assert.equal(f.requests.length, 2);
    const waited = f.requests[1].at - f.requests[0].at;
    assert.ok(waited >= 1050 && waited < 2000, `waited ${waited} ms`);

    const g = await fake((req, res) => send(res, 503, envelope("service_unavailable")));
    const err = await new Mailvet({ baseUrl: g.url, ...keys, retryOnRateLimit: true }).verify("a@acme.example").catch((e) => e);
    assert.equal(err.status, 503);
    assert.equal(g.requests.length, 1);
    const h = await fake((req, res) => send(res, 503, envelope("service_unavailable"), { "Retry-After": "1" }));
    await assert.rejects(new Mailvet({ baseUrl: h.url, ...keys }).verify("a@acme.example"), MailvetError);
    assert.equal(h.requests.length, 1, "retries are off by default");
  });

  test("a POST that creates something carries one Idempotency-Key, the same on its retries, and is retried after a 503", async () => {
    const f = await fake((req, res) => {
      if (req.index % 2 === 0) return send(res, 503, envelope("service_unavailable"), { "Retry-After": "0" });
      if (req.path === "/v1/management/keys") return send(res, 201, { id: "k1", key: "sk_live_x", label: "prod" });
      send(res, 200, { url: "https://billing.example.com/s" });
    });
    const m = new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true });
    await m.keys.create("prod");
    await m.billingPortal("https://example.com/back");
    assert.equal(f.requests.length, 4, "each sent twice");
    const ids = f.requests.map((r) => r.headers["idempotency-key"]);
    assert.match(ids[0], /^[0-9a-f]{32}$/);
    assert.equal(ids[1], ids[0], "the retry repeats the call's key");
    assert.equal(ids[3], ids[2]);
    assert.notEqual(ids[2], ids[0], "another call, another key");
  });

  test("a 503 to a delivery replay, which has no key, is thrown at once, as it may have acted", async () => {
    const f = await fake((req, res) => send(res, 503, envelope("service_unavailable"), { "Retry-After": "1" }));
    const m = new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true });
    await assert.rejects(m.deliveries.retry("d1"), MailvetError);
    assert.equal(f.requests.length, 1, "not retried");
    assert.equal(f.requests[0].headers["idempotency-key"], undefined);
  });

  test("a POST without a key answered by a 503 that is not the API's (a proxy's page) is never sent again", async () => {
    // The proxy may have passed the request on: the API acted on it.
    const f = await fake((req, res) => { res.writeHead(503, { "Content-Type": "text/html", "Retry-After": "0" }); res.end("<h1>upstream timed out</h1>"); });
    const m = new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true });
    await assert.rejects(m.lists.cancel("l1"), MailvetError);
    assert.equal(f.requests.length, 1, "not retried");
    assert.equal(f.requests[0].headers["idempotency-key"], undefined);
    // An async verification has a key: the API makes one job however often it is sent.
    const err = await m.verifyAsync("a@acme.example", { webhookUrl: "https://hooks.example.com/x" }).catch((e) => e);
    assert.equal(err.error, "http_error");
    assert.equal(f.requests.length, 5, "sent once and retried 3 times");
    assert.equal(new Set(f.requests.slice(1).map((r) => r.headers["idempotency-key"])).size, 1);
    // A read is safe to repeat whoever answered.
    const g = await fake((req, res) => {
      if (req.index === 0) { res.writeHead(503, { "Content-Type": "text/html", "Retry-After": "0" }); return res.end("busy"); }
      send(res, 200, { id: "j1", status: "queued" });
    });
    await new Mailvet({ baseUrl: g.url, ...keys, retryOnRateLimit: true }).job("j1");
    assert.equal(g.requests.length, 2);
  });

  test("each request of verifyBatch carries its own Idempotency-Key, retried after a proxy's 503; verify and the stream none", async () => {
    // docs/api.md, "Idempotency": the API replays a keyed batch's first answer, so a retry after a
    // proxy's 503 (which may have passed the request on) is verified and charged once. A single
    // verification carries none (the API would keep its answer 24 hours, for two more round trips).
    const proxy503 = (res) => { res.writeHead(503, { "Content-Type": "text/html", "Retry-After": "0" }); res.end("<h1>upstream timed out</h1>"); };
    const f = await fake((req, res) => {
      if (req.index === 1 || req.index === 4) return proxy503(res);
      if (req.path === "/v1/email/verify") return send(res, 200, result(req.body.email));
      send(res, 200, { results: req.body.emails.map(result), count: req.body.emails.length });
    });
    const m = new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true });
    await m.verify("a@acme.example");
    assert.equal((await m.verifyBatch(emailsOf(60))).length, 60);
    const err = await (async () => { for await (const _ of m.verifyStream(emailsOf(2))) { /* drain */ } })().catch((e) => e);
    assert.equal(err?.error, "http_error");
    // 0: verify; 1, 2: the first chunk and its retry; 3: the second; 4: the stream.
    const ids = f.requests.map((r) => r.headers["idempotency-key"]);
    assert.equal(ids.length, 5, `requests: ${f.requests.map((r) => r.path)}`);
    assert.equal(ids[0], undefined, "a single verification carries no key");
    for (const i of [1, 3]) assert.match(ids[i], /^[0-9a-f]{32}$/);
    assert.equal(ids[2], ids[1], "a chunk's retry repeats its key");
    assert.notEqual(ids[3], ids[1], "each request is its own operation");
    assert.equal(ids[4], undefined, "the stream route takes no key");
  });

  test("a 409 idempotency_key_in_use is retried with the same key after Retry-After", async () => {
    const f = await fake((req, res) => {
      if (req.index === 0) return send(res, 409, envelope("idempotency_key_in_use"), { "Retry-After": "1" });
      send(res, 201, { id: "k1", key: "sk_live_x", label: "prod" });
    });
    const created = await new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true }).keys.create("prod");
    assert.equal(created.key, "sk_live_x");
    assert.equal(f.requests.length, 2);
    assert.ok(f.requests[1].at - f.requests[0].at >= 1000, "after Retry-After");
    assert.equal(f.requests[1].headers["idempotency-key"], f.requests[0].headers["idempotency-key"]);
  });

  test("a Retry-After longer than maxRetryWaitMs (a proxy's hour) is thrown at once, not waited out", async () => {
    const f = await fake((req, res) => send(res, 503, envelope("service_unavailable"), { "Retry-After": "3600" }));
    const ctl = new AbortController();
    const call = new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true }).job("j1", { signal: ctl.signal }).catch((e) => e);
    const timer = setTimeout(() => ctl.abort(new Error("still waiting after 3 s")), 3000);
    const err = await call;
    clearTimeout(timer);
    assert.ok(err instanceof MailvetError, String(err));
    assert.equal(err.status, 503);
    assert.equal(err.retryAfter, 3600);
    assert.equal(f.requests.length, 1);
  });

  test("retries are jittered by up to a tenth of the wait, so that clients refused together do not come back together", async () => {
    const waitOnce = async (random) => {
      const f = await fake((req, res) => {
        if (req.index === 0) return send(res, 503, envelope("service_unavailable"), { "Retry-After": "1" });
        send(res, 200, { id: "j", status: "queued" });
      });
      const saved = Math.random;
      Math.random = () => random; // the jitter's draw, pinned
      try {
        await new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true }).job("j1");
      } finally {
        Math.random = saved;
      }
      return f.requests[1].at - f.requests[0].at;
    };
    const low = await waitOnce(0);
    const high = await waitOnce(0.999);
    assert.ok(low >= 1050 && low < 1050 + 80, `with the smallest draw: waited ${low} ms, want Retry-After + 50 ms`);
    assert.ok(high >= 1050 + 99 && high < 1050 + 100 + 80, `with the largest draw: waited ${high} ms, want Retry-After + 50 ms + 100 ms`);
  });

  test("an abort during the wait before a retry rejects at once with the signal's reason", async () => {
    const f = await fake((req, res) => rateLimited(res, 5000));
    const ctl = new AbortController();
    const started = Date.now();
    setTimeout(() => ctl.abort(new Error("stop")), 100);
    await assert.rejects(new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true }).verify("a@acme.example", { signal: ctl.signal }), /stop/);
    assert.ok(Date.now() - started < 1000);
    assert.equal(f.requests.length, 1);
  });
});

describe("timeouts and aborts", () => {
  test("a request that gets no answer within timeoutMs fails with a timeout MailvetError", async () => {
    const f = await fake(() => {}); // never answers
    const started = Date.now();
    const err = await new Mailvet({ baseUrl: f.url, ...keys, timeoutMs: 150 }).verify("a@acme.example").catch((e) => e);
    assert.ok(err instanceof MailvetError);
    assert.equal(err.error, "timeout");
    assert.equal(err.status, 0);
    assert.ok(Date.now() - started < 1000);
    const err2 = await new Mailvet({ baseUrl: f.url, ...keys }).verify("a@acme.example", { timeoutMs: 100 }).catch((e) => e);
    assert.equal(err2.error, "timeout", "a per-call timeoutMs applies too");
  });

  test("an AbortSignal aborts a request in flight with its reason", async () => {
    const f = await fake(() => {});
    const ctl = new AbortController();
    setTimeout(() => ctl.abort(new Error("user left")), 50);
    await assert.rejects(new Mailvet({ baseUrl: f.url, ...keys }).verify("a@acme.example", { signal: ctl.signal }), /user left/);
  });

  test("a refused connection is a network_error", async () => {
    const f = await fake(() => {});
    const url = f.url;
    await f.close();
    const err = await new Mailvet({ baseUrl: url, ...keys }).verify("a@acme.example").catch((e) => e);
    assert.equal(err.error, "network_error");
    // The message says what was asked and why it failed, not only fetch's "fetch failed".
    assert.match(err.message, /^POST http:\/\/127\.0\.0\.1:\d+\/v1\/email\/verify failed: fetch failed: .*ECONNREFUSED/);
  });
});

describe("verifyBatch", () => {
  test("sends 50 addresses per request, one request at a time, and returns the results in input order", async () => {
    const f = await fake(async (req, res) => {
      await sleep(20 - req.index * 5); // later chunks answer faster: order must still hold
      send(res, 200, { results: req.body.emails.map(result), count: req.body.emails.length });
    });
    const emails = emailsOf(120);
    const out = await new Mailvet({ baseUrl: f.url, ...keys }).verifyBatch(emails);
    assert.deepEqual(out.map((r) => r.email), emails);
    assert.deepEqual(f.requests.map((r) => r.body.emails.length), [50, 50, 20]);
    assert.deepEqual(f.requests.flatMap((r) => r.body.emails), emails);
    assert.equal(f.maxInFlight, 1);
    assert.deepEqual(await new Mailvet({ baseUrl: f.url, ...keys }).verifyBatch([]), []);
    assert.equal(f.requests.length, 3, "an empty batch sends nothing");
  });

  test("a 429 in the middle of a 500-address batch is retried transparently with retryOnRateLimit", async () => {
    let reset = 0;
    const f = await fake((req, res) => {
      if (req.index === 4) reset = rateLimited(res, 200, 200); // the fifth request, after 200 addresses
      else send(res, 200, { results: req.body.emails.map(result), count: req.body.emails.length });
    });
    const emails = emailsOf(500);
    const out = await new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true }).verifyBatch(emails);
    assert.deepEqual(out.map((r) => r.email), emails);
    assert.equal(f.requests.length, 11);
    assert.deepEqual(f.requests[5].body.emails, f.requests[4].body.emails, "the refused chunk is sent again");
    assert.ok(f.requests[5].at >= reset + 50);
    assert.equal(f.maxInFlight, 1);
  });

  test("without retryOnRateLimit the 429 stops the batch and is thrown", async () => {
    const f = await fake((req, res) => {
      if (req.index === 1) rateLimited(res, 200, 60);
      else send(res, 200, { results: req.body.emails.map(result), count: req.body.emails.length });
    });
    const err = await new Mailvet({ baseUrl: f.url, ...keys }).verifyBatch(emailsOf(200)).catch((e) => e);
    assert.equal(err.error, "rate_limit_exceeded");
    assert.equal(err.limit, 60);
    assert.equal(f.requests.length, 2);
  });

  test("an error stops the batch and carries the results already verified (and charged)", async () => {
    const input = emailsOf(120);
    input[101] = "";
    const f = await fake((req, res) => {
      const bad = req.body.emails.indexOf("");
      if (bad >= 0) return send(res, 400, { ...envelope("invalid_request"), message: `Field emails[${bad}] is empty; send an email address.` });
      send(res, 200, { results: req.body.emails.map(result), count: req.body.emails.length });
    });
    const err = await new Mailvet({ baseUrl: f.url, ...keys }).verifyBatch(input).catch((e) => e);
    assert.equal(err.error, "invalid_request");
    assert.deepEqual(err.results.map((r) => r.email), input.slice(0, 100));
    // The field the API names counts from the failed request's first address: results.length.
    assert.equal(input[err.results.length + Number(/emails\[(\d+)\]/.exec(err.message)[1])], "");
  });

  test("a chunk larger than the per-minute limit is split to the limit instead of waited on", async () => {
    const f = await fake((req, res) => {
      if (req.body.emails.length > 10) return rateLimited(res, 60_000, 10); // could never pass
      send(res, 200, { results: req.body.emails.map(result), count: req.body.emails.length });
    });
    const emails = emailsOf(25);
    const started = Date.now();
    const out = await new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true }).verifyBatch(emails);
    assert.deepEqual(out.map((r) => r.email), emails);
    assert.deepEqual(f.requests.map((r) => r.body.emails.length), [25, 10, 10, 5]);
    assert.ok(Date.now() - started < 2000, "no wait for a window that could never be enough");
  });

  test("onProgress reports each answer and each wait for the rate limit, with a hint to use a bulk list", async () => {
    const f = await fake((req, res) => {
      if (req.body.emails.length > 10 || req.index === 2) return rateLimited(res, 200, 10);
      send(res, 200, { results: req.body.emails.map(result), count: req.body.emails.length });
    });
    const seen = [];
    const warned = [];
    const warn = console.warn;
    console.warn = (...args) => warned.push(args.join(" "));
    try {
      const out = await new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true }).verifyBatch(emailsOf(30), { onProgress: (p) => seen.push(p) });
      assert.equal(out.length, 30);
      assert.deepEqual(seen.map((p) => [p.done, p.total, p.waitingUntil !== undefined]), [[10, 30, false], [10, 30, true], [20, 30, false], [30, 30, false]]);
      const wait = seen[1];
      assert.equal(wait.rateLimit, 10);
      assert.ok(wait.waitingUntil.getTime() - Date.now() < 2000);
      assert.match(wait.hint, /20 addresses are left .* about 2 minutes.*bulk list/);
      assert.deepEqual(warned, [], "with a callback nothing is printed");
      // Without a callback the hint is printed once with console.warn.
      await new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true }).verifyBatch(emailsOf(30));
    } finally {
      console.warn = warn;
    }
    assert.equal(warned.length, 0, "the second call's waits come after the fake's one refusal: no wait, no hint");
  });

  test("without onProgress a long wait is told once with console.warn", async () => {
    const f = await fake((req, res) => {
      if (req.body.emails.length > 10 || req.index === 2 || req.index === 4) return rateLimited(res, 100, 10);
      send(res, 200, { results: req.body.emails.map(result), count: req.body.emails.length });
    });
    const warned = [];
    const warn = console.warn;
    console.warn = (...args) => warned.push(args.join(" "));
    try {
      const out = await new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true }).verifyBatch(emailsOf(40));
      assert.equal(out.length, 40);
    } finally {
      console.warn = warn;
    }
    assert.equal(warned.length, 1);
    assert.match(warned[0], /30 addresses are left at the plan's rate limit of 10 a minute: about 3 minutes.*lists\.upload/);
  });

  test("an answer with the wrong number of results is an invalid_response", async () => {
    const f = await fake((req, res) => send(res, 200, { results: [result("x@acme.example")], count: 1 }));
    const err = await new Mailvet({ baseUrl: f.url, ...keys }).verifyBatch(emailsOf(2)).catch((e) => e);
    assert.equal(err.error, "invalid_response");
  });

  test("an answer with the wrong number of results carries the results verified before it, as every error does", async () => {
    const f = await fake((req, res) => {
      const emails = req.index === 0 ? req.body.emails : req.body.emails.slice(1);
      send(res, 200, { results: emails.map(result), count: emails.length });
    });
    const err = await new Mailvet({ baseUrl: f.url, ...keys }).verifyBatch(emailsOf(60)).catch((e) => e);
    assert.ok(err instanceof MailvetError, String(err));
    assert.equal(err.error, "invalid_response");
    assert.deepEqual(err.results?.map((r) => r.email), emailsOf(50));
  });
});

// streamOf answers a stream request with one line per address, flushing each line.
function streamLines(res, lines) {
  res.writeHead(200, { "Content-Type": "application/x-ndjson" });
  for (const l of lines) res.write(JSON.stringify(l) + "\n");
  res.end();
}

describe("verifyStream", () => {
  test("yields each line as it arrives, before the stream has ended", async () => {
    let release;
    const released = new Promise((r) => { release = r; });
    const f = await fake(async (req, res) => {
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      res.write(JSON.stringify(streamResult(req.body.emails[1], 1)) + "\n");
      await released; // the second line waits until the client has the first
      res.end(JSON.stringify(streamResult(req.body.emails[0], 0)) + "\n");
    });
    const it = new Mailvet({ baseUrl: f.url, ...keys }).verifyStream(["a@acme.example", "b@acme.example"]);
    const first = await it.next();
    assert.equal(first.value.email, "b@acme.example");
    release();
    const second = await it.next();
    assert.equal(second.value.email, "a@acme.example");
    assert.equal((await it.next()).done, true);
    assert.equal(f.requests[0].headers.accept, "application/x-ndjson");
  });

  test("sends 1,000 addresses per request, one after the other", async () => {
    const f = await fake((req, res) => streamLines(res, req.body.emails.map(streamResult)));
    const emails = emailsOf(2500);
    const got = [];
    for await (const r of new Mailvet({ baseUrl: f.url, ...keys }).verifyStream(emails)) got.push(r.email);
    assert.deepEqual(got, emails);
    assert.deepEqual(f.requests.map((r) => r.body.emails.length), [1000, 1000, 500]);
    assert.equal(f.maxInFlight, 1);
  });

  test("each result's index is its address's position in the input, counted across requests", async () => {
    // Every address the same, answered in reverse order: only index says which input a line
    // answers. latency_ms carries the line's own index, to check the offset added to it.
    const f = await fake((req, res) => streamLines(res, req.body.emails.map((e, i) => ({ ...streamResult(e.trim().toLowerCase(), i), latency_ms: i })).reverse()));
    const emails = Array.from({ length: 2500 }, (_, i) => (i % 2 ? " ann@ACME.example" : "ann@acme.example"));
    const got = [];
    for await (const r of new Mailvet({ baseUrl: f.url, ...keys }).verifyStream(emails)) {
      assert.equal(r.email, "ann@acme.example");
      assert.equal(r.index, Math.floor(r.index / 1000) * 1000 + r.latency_ms, `index ${r.index}`);
      got.push(r.index);
    }
    assert.deepEqual(got.slice(0, 3), [999, 998, 997], "in the order the lines came");
    assert.deepEqual(got.slice(1000, 1003), [1999, 1998, 1997], "the second request's, counted on from the first's");
    assert.deepEqual([...got].sort((a, b) => a - b), emails.map((_, i) => i));
  });

  for (const [name, bad] of [["missing", undefined], ["repeated", 2], ["past the end", 3], ["negative", -1], ["not an integer", 0.5], ["a string", "1"]]) {
    test(`a line whose index is ${name} is an invalid_response, not a result matched to the wrong input`, async () => {
      const f = await fake((req, res) => streamLines(res, [streamResult(req.body.emails[2], 2), { ...result(req.body.emails[1]), index: bad }, streamResult(req.body.emails[0], 0)]));
      const got = [];
      const err = await (async () => {
        for await (const r of new Mailvet({ baseUrl: f.url, ...keys }).verifyStream(emailsOf(3))) got.push(r.index);
      })().catch((e) => e);
      assert.deepEqual(got, [2]);
      assert.ok(err instanceof MailvetError, String(err));
      assert.equal(err.error, "invalid_response");
      assert.match(err.message, /line 2 of the stream has index/);
    });
  }

  test("a final error line is thrown as a MailvetError naming every address without a result", async () => {
    const f = await fake((req, res) => {
      const [done, ...missing] = req.body.emails;
      streamLines(res, [streamResult(done, 0), envelope("service_unavailable", { message: `${missing.length} of ${req.body.emails.length} addresses were not verified: the server is shutting down.`, emails: missing })]);
    });
    const emails = emailsOf(1200);
    const got = [];
    const err = await (async () => {
      for await (const r of new Mailvet({ baseUrl: f.url, ...keys }).verifyStream(emails)) got.push(r.email);
    })().catch((e) => e);
    assert.deepEqual(got, [emails[0]]);
    assert.ok(err instanceof MailvetError);
    assert.equal(err.error, "service_unavailable");
    assert.equal(err.status, 200);
    assert.match(err.message, /999 of 1000 addresses/);
    assert.deepEqual(err.emails, emails.slice(1), "the line's addresses, then the 200 never sent");
    assert.deepEqual(err.indexes, emails.map((_, i) => i).slice(1), "their positions in the input");
    assert.equal(f.requests.length, 1);
  });

  test("a stream the server cuts off is a network_error with the answer's request id", async () => {
    const f = await fake(async (req, res) => {
      res.writeHead(200, { "Content-Type": "application/x-ndjson", "X-Request-Id": "rid-stream" });
      res.write(JSON.stringify(streamResult(req.body.emails[0], 0)) + "\n");
      await sleep(20);
      res.socket.destroy();
    });
    const err = await (async () => {
      for await (const _ of new Mailvet({ baseUrl: f.url, ...keys }).verifyStream(emailsOf(3))) { /* drain */ }
    })().catch((e) => e);
    assert.ok(err instanceof MailvetError, String(err));
    assert.equal(err.error, "network_error");
    assert.equal(err.requestId, "rid-stream");
  });

  test("a line that never ends (not the API's stream) is an invalid_response past 2 MiB, not held in memory until the timeout", async () => {
    const f = await fake(async (req, res) => {
      res.writeHead(200, { "Content-Type": "application/x-ndjson", "X-Request-Id": "rid-long" });
      res.write(JSON.stringify(streamResult(req.body.emails[0], 0)) + "\n");
      const chunk = "x".repeat(64 << 10);
      // Up to 128 MiB without a newline, then held open.
      for (let i = 0; i < 2048 && !res.destroyed; i++) {
        if (!res.write(chunk)) await new Promise((r) => { res.once("drain", r); res.once("close", r); });
      }
    });
    const started = Date.now();
    const got = [];
    const err = await (async () => {
      for await (const r of new Mailvet({ baseUrl: f.url, ...keys, streamTimeoutMs: 8000 }).verifyStream(emailsOf(3))) got.push(r.index);
    })().catch((e) => e);
    assert.ok(err instanceof MailvetError, String(err));
    assert.equal(err.error, "invalid_response");
    assert.equal(err.requestId, "rid-long");
    assert.deepEqual(got, [0]);
    assert.deepEqual(err.indexes, [1, 2]);
    assert.deepEqual(err.emails, emailsOf(3).slice(1));
    assert.ok(Date.now() - started < 5000, `thrown after ${Date.now() - started} ms`);
  });

  test("a stream that ends early without an error line is a stream_incomplete", async () => {
    const f = await fake((req, res) => streamLines(res, [streamResult(req.body.emails[0], 0)]));
    const err = await (async () => {
      for await (const _ of new Mailvet({ baseUrl: f.url, ...keys }).verifyStream(emailsOf(3))) { /* drain */ }
    })().catch((e) => e);
    assert.equal(err.error, "stream_incomplete");
  });

  test("lines split across chunks, inside a multi-byte character, are read whole", async () => {
    const f = await fake(async (req, res) => {
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      const bytes = Buffer.from(req.body.emails.map((e, i) => JSON.stringify(streamResult(e, i)) + "\n").join(""), "utf8");
      // One byte a write, flushed apart, so that é's two bytes arrive in different chunks.
      for (let i = 0; i < bytes.length; i += 7) { res.write(bytes.subarray(i, i + 7)); if (i % 70 === 0) await sleep(1); }
      res.end();
    });
    const emails = ["josé@acme.example", "zoë@acme.example", "a@acme.example"];
    const got = [];
    for await (const r of new Mailvet({ baseUrl: f.url, ...keys }).verifyStream(emails)) got.push(r.email);
    assert.deepEqual(got, emails);
  });

  test("a stream that ends in the middle of a line, without an error line, is a stream_incomplete", async () => {
    const f = await fake((req, res) => {
      res.writeHead(200, { "Content-Type": "application/x-ndjson", "X-Request-Id": "rid-cut" });
      res.write(JSON.stringify(streamResult(req.body.emails[0], 0)) + "\n");
      res.end(JSON.stringify(streamResult(req.body.emails[1], 1)).slice(0, 40));
    });
    const got = [];
    const err = await (async () => {
      for await (const r of new Mailvet({ baseUrl: f.url, ...keys }).verifyStream(emailsOf(3))) got.push(r.email);
    })().catch((e) => e);
    assert.deepEqual(got, ["u0@acme.example"]);
    assert.equal(err?.error, "stream_incomplete", String(err));
    assert.equal(err.requestId, "rid-cut");
  });

  // 1,005 addresses, two requests, written as a caller might (blanks, an uppercase domain, a
  // repeat), so that the error is seen to name them as given, not normalised.
  const cutInput = () => {
    const emails = Array.from({ length: 1005 }, (_, i) => `u${String(i).padStart(4, "0")}@acme.example`);
    emails[7] = " ann@ACME.example";
    emails[8] = "ann@acme.example";
    emails[1002] = "zoe@Acme.Example\t";
    return emails;
  };
  const answeredFirst = [999, 3, 8, 0]; // completion order
  for (const [name, code, end] of [
    ["the connection is dropped", "network_error", (res) => res.socket.destroy()],
    ["the stream ends between lines", "stream_incomplete", (res) => res.end()],
    ["the stream ends inside a line", "stream_incomplete", (res) => res.end(JSON.stringify(streamResult("u0005@acme.example", 5)).slice(0, 30))],
  ]) {
    test(`a stream cut without an error line (${name}) names the inputs without a result, the unsent request's too, as given`, async () => {
      const f = await fake(async (req, res) => {
        res.writeHead(200, { "Content-Type": "application/x-ndjson", "X-Request-Id": "rid-cut" });
        for (const k of answeredFirst) res.write(JSON.stringify(streamResult(req.body.emails[k], k)) + "\n");
        await sleep(20);
        end(res);
      });
      const emails = cutInput();
      const got = [];
      const err = await (async () => {
        for await (const r of new Mailvet({ baseUrl: f.url, ...keys }).verifyStream(emails)) got.push(r.index);
      })().catch((e) => e);
      assert.deepEqual(got, answeredFirst);
      assert.ok(err instanceof MailvetError, String(err));
      assert.equal(err.error, code);
      assert.equal(err.requestId, "rid-cut");
      const wantIndexes = emails.map((_, i) => i).filter((i) => !answeredFirst.includes(i));
      assert.deepEqual(err.indexes, wantIndexes, "the 996 of the first request without a line, then 1000-1004");
      assert.deepEqual(err.emails, wantIndexes.map((i) => emails[i]));
      assert.equal(err.emails[5], " ann@ACME.example");
      assert.equal(err.emails.at(-3), "zoe@Acme.Example\t");
      assert.equal(f.requests.length, 1, "the request after a cut stream is not sent");
    });
  }

  test("a cut in the second request names only its inputs without a line, at their positions in the whole input", async () => {
    const f = await fake(async (req, res) => {
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      const n = req.index === 0 ? req.body.emails.length : 2;
      for (let k = 0; k < n; k++) res.write(JSON.stringify(streamResult(req.body.emails[k], k)) + "\n");
      if (req.index === 0) return res.end();
      await sleep(20);
      res.socket.destroy();
    });
    const emails = cutInput();
    let results = 0;
    const err = await (async () => {
      for await (const _ of new Mailvet({ baseUrl: f.url, ...keys }).verifyStream(emails)) results++;
    })().catch((e) => e);
    assert.equal(results, 1002);
    assert.equal(err?.error, "network_error", String(err));
    assert.deepEqual(err.indexes, [1002, 1003, 1004]);
    assert.deepEqual(err.emails, emails.slice(1002));
  });

  test("breaking out of the loop closes the request", async () => {
    let closed;
    const wasClosed = new Promise((r) => { closed = r; });
    const f = await fake(async (req, res) => {
      res.on("close", closed);
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      for (const [i, e] of req.body.emails.entries()) {
        if (res.destroyed) return;
        res.write(JSON.stringify(streamResult(e, i)) + "\n");
        await sleep(20);
      }
      res.end();
    });
    for await (const r of new Mailvet({ baseUrl: f.url, ...keys }).verifyStream(emailsOf(100))) {
      assert.equal(r.email, "u0@acme.example");
      break;
    }
    await Promise.race([wasClosed, sleep(2000).then(() => assert.fail("the server never saw the request end"))]);
  });

  test("a 429 before the stream starts is retried like any request", async () => {
    const f = await fake((req, res) => {
      if (req.index === 0) return rateLimited(res, 100, 1000);
      streamLines(res, req.body.emails.map(streamResult));
    });
    const got = [];
    for await (const r of new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true }).verifyStream(emailsOf(3))) got.push(r.email);
    assert.equal(got.length, 3);
    assert.equal(f.requests.length, 2);
  });
});
