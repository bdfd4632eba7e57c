// Network failures (docs/clients.md, "Network failures") against a real Node http server that
// reads the request and then destroys its socket without an answer: the request reached the
// server and its answer was lost. The client sends it again only when a repeat does nothing more.
import assert from "node:assert/strict";
import http from "node:http";
import { after, describe, test } from "node:test";
import { Mailvet, MailvetError } from "../dist/index.js";
import { envelope, result, send, sleep, startFake, streamResult } from "./fake.mjs";

const fakes = [];
async function fake(handler) {
  const f = await startFake(handler);
  fakes.push(f);
  return f;
}
after(() => Promise.all(fakes.map((f) => f.close())));

const keys = { apiKey: "sk_live_test", provisioningKey: "sk_mgmt_test" };
const keyId = "9a7e0000-0000-4000-8000-000000000001";

/** hangUp closes the request's connection without an answer. */
const hangUp = (res) => res.socket.destroy();

describe("network failures", () => {
  const cases = [
    { name: "GET job", retry: true, call: (mv) => mv.job("j1"), answer: (res) => send(res, 200, { job_id: "j", status: "queued" }) },
    { name: "keyed POST keys.create", retry: true, call: (mv) => mv.keys.create("prod"), answer: (res) => send(res, 201, { id: "k1", key: "sk_live_x" }) },
    { name: "keyed POST verifyBatch", retry: true, call: (mv) => mv.verifyBatch(["a@acme.example"]), answer: (res) => send(res, 200, { results: [result("a@acme.example")], count: 1 }) },
    // The lost attempt revoked the key, so the retry is answered key_not_found: it is revoked.
    { name: "DELETE keys.revoke answered 404 on the retry", retry: true, call: (mv) => mv.keys.revoke(keyId), answer: (res) => send(res, 404, envelope("key_not_found")) },
    { name: "DELETE lists.delete answered 404 on the retry", retry: true, call: (mv) => mv.lists.delete(keyId), answer: (res) => send(res, 404, envelope("list_not_found")) },
    { name: "unkeyed POST verify", retry: false, call: (mv) => mv.verify("a@acme.example"), answer: (res) => send(res, 200, result("a@acme.example")) },
    {
      name: "stream", retry: false,
      call: async (mv) => { for await (const _ of mv.verifyStream(["a@acme.example"])) { /* drain */ } },
      answer: (res) => { res.writeHead(200, { "Content-Type": "application/x-ndjson" }); res.end(JSON.stringify(streamResult("a@acme.example", 0)) + "\n"); },
    },
  ];
  for (const c of cases) {
    test(`${c.name}: ${c.retry ? "sent again after its answer was lost" : "not sent again: it may have acted"}`, async () => {
      const f = await fake((req, res) => (req.index === 0 ? hangUp(res) : c.answer(res)));
      const mv = new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true });
      const err = await c.call(mv).then(() => undefined, (e) => e);
      if (c.retry) {
        assert.equal(err, undefined, `want the second attempt's answer, got ${err}`);
        assert.equal(f.requests.length, 2);
        assert.equal(f.requests[1].headers["idempotency-key"], f.requests[0].headers["idempotency-key"], "a retry carries its first attempt's key");
      } else {
        assert.ok(err instanceof MailvetError, String(err));
        assert.equal(err.error, "network_error");
        assert.equal(f.requests.length, 1);
      }
    });
  }

  test("at most maxRetries retries, after 0.5 s then 1 s with jitter; none with retryOnRateLimit off", async () => {
    const f = await fake((req, res) => hangUp(res));
    const err = await new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true, maxRetries: 2 }).account().catch((e) => e);
    assert.equal(err.error, "network_error");
    assert.equal(f.requests.length, 3);
    const [a, b, c] = f.requests.map((r) => r.at);
    assert.ok(b - a >= 500 && b - a <= 550 + 200, `first retry after ${b - a} ms`);
    assert.ok(c - b >= 1000 && c - b <= 1100 + 200, `second retry after ${c - b} ms`);

    const g = await fake((req, res) => hangUp(res));
    const off = await new Mailvet({ baseUrl: g.url, ...keys }).account().catch((e) => e);
    assert.equal(off.error, "network_error");
    assert.equal(g.requests.length, 1);
  });

  test("an abort is never retried, during an attempt or during the wait; the client's own timeout is", async () => {
    const f = await fake(() => {}); // never answers
    const ctl = new AbortController();
    setTimeout(() => ctl.abort(new Error("user left")), 100);
    await assert.rejects(new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true }).job("j1", { signal: ctl.signal }), /user left/);
    await sleep(100);
    assert.equal(f.requests.length, 1);

    const g = await fake((req, res) => hangUp(res));
    const ctl2 = new AbortController();
    setTimeout(() => ctl2.abort(new Error("user left")), 200); // inside the 0.5 s wait
    const started = Date.now();
    await assert.rejects(new Mailvet({ baseUrl: g.url, ...keys, retryOnRateLimit: true }).job("j1", { signal: ctl2.signal }), /user left/);
    assert.ok(Date.now() - started < 450);
    assert.equal(g.requests.length, 1);

    const h = await fake((req, res) => { if (req.index > 0) send(res, 200, { job_id: "j", status: "queued" }); });
    const j = await new Mailvet({ baseUrl: h.url, ...keys, retryOnRateLimit: true, timeoutMs: 150 }).job("j1");
    assert.equal(j.job_id, "j");
    assert.equal(h.requests.length, 2);
  });

  test("a refused connection sent nothing, so even verify is sent again, once the server listens", async () => {
    const probe = http.createServer();
    await new Promise((resolve) => probe.listen(0, "127.0.0.1", resolve));
    const port = probe.address().port;
    await new Promise((resolve) => probe.close(resolve)); // nothing listens: connections are refused
    let served = 0;
    const server = http.createServer((req, res) => {
      served++;
      req.resume();
      req.on("end", () => send(res, 200, result("a@acme.example")));
    });
    setTimeout(() => server.listen(port, "127.0.0.1"), 200); // within the 0.5 s wait
    try {
      const r = await new Mailvet({ baseUrl: `http://127.0.0.1:${port}`, ...keys, retryOnRateLimit: true }).verify("a@acme.example");
      assert.equal(r.status, "deliverable");
      assert.equal(served, 1);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  test("a stream cut after a line is not sent again: it is reported incomplete", async () => {
    const f = await fake((req, res) => {
      res.writeHead(200, { "Content-Type": "application/x-ndjson" });
      res.write(JSON.stringify(streamResult("a@acme.example", 0)) + "\n");
      setTimeout(() => hangUp(res), 50);
    });
    const got = [];
    const err = await (async () => {
      for await (const r of new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true }).verifyStream(["a@acme.example", "b@acme.example"])) got.push(r);
    })().catch((e) => e);
    assert.equal(got.length, 1);
    assert.ok(err instanceof MailvetError && (err.error === "network_error" || err.error === "stream_incomplete"), String(err));
    assert.equal(f.requests.length, 1);
  });

  test("an upload in memory is sent again with the same key and bytes; a ReadableStream is not", async () => {
    const csv = "email\na@acme.example\n";
    const f = await fake((req, res) => (req.index % 2 === 0 ? hangUp(res) : send(res, 202, { id: "l1", state: "queued" })));
    const mv = new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true });
    const l = await mv.lists.upload(new TextEncoder().encode(csv));
    assert.equal(l.id, "l1");
    assert.deepEqual(f.requests.map((r) => r.raw), [csv, csv]);
    assert.equal(f.requests[1].headers["idempotency-key"], f.requests[0].headers["idempotency-key"]);
    const stream = new ReadableStream({ start(ctl) { ctl.enqueue(new TextEncoder().encode(csv)); ctl.close(); } });
    const err = await mv.lists.upload(stream).catch((e) => e);
    assert.equal(err.error, "network_error");
    assert.equal(f.requests.length, 3);
  });

  test("a 404 is an error unless an answer was lost; a retried deleteAccount's invalid_api_key is thrown", async () => {
    const f = await fake((req, res) => {
      if (req.path === "/v1/management/account") return req.index === 1 ? hangUp(res) : send(res, 401, envelope("invalid_api_key"));
      send(res, 404, envelope("key_not_found"));
    });
    const mv = new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true });
    const notFound = await mv.keys.revoke(keyId).catch((e) => e);
    assert.equal(notFound?.error, "key_not_found");
    const gone = await mv.deleteAccount("acct").catch((e) => e);
    assert.equal(gone?.error, "invalid_api_key");
    assert.equal(f.requests.length, 3);
  });
});

test("a network failure names the route, never its query: a history deletion's query is the address erased", async () => {
  const closed = http.createServer();
  await new Promise((resolve) => closed.listen(0, "127.0.0.1", resolve));
  const { port } = closed.address();
  await new Promise((resolve) => closed.close(resolve)); // nothing listens: the connection is refused
  const err = await new Mailvet({ baseUrl: `http://127.0.0.1:${port}`, ...keys }).deleteHistory("ann.private@acme.example").catch((e) => e);
  assert.ok(err instanceof MailvetError, String(err));
  assert.equal(err.error, "network_error");
  assert.match(err.message, /\/v1\/email\/history/);
  assert.doesNotMatch(err.message, /ann\.private/);
});
