// Unit tests of the bulk-list calls (docs/lists.md) against the scripted fake API of fake.mjs:
// the upload's body, headers and query, no retry of a streamed upload, the typed line of a bad file,
// the other routes' methods and paths, streamed and truncated downloads, and wait's polling.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { Mailvet, MailvetError } from "../dist/index.js";
import { envelope, send, sleep, startFake } from "./fake.mjs";

const fakes = [];
async function fake(handler) {
  const f = await startFake(handler);
  fakes.push(f);
  return f;
}
after(() => Promise.all(fakes.map((f) => f.close())));

const keys = { apiKey: "sk_live_test", provisioningKey: "sk_mgmt_test" };
const id = "019ab3c2-0000-7000-8000-000000000001";

/** list is a List as the API serialises it. */
function list(state = "running", verified = 0) {
  return {
    id, name: "june", state, format: "csv", columns: ["first", "email"], email_column: "email", rows: 4, unique: 4,
    verified, progress: verified / 4, rate_per_second: verified ? 2 : null, eta_seconds: state === "running" ? 1 : null,
    counts: { by_status: {}, by_reason: {} }, webhook_url: null, error: null, created_at: "2026-11-23T02:10:04Z",
    started_at: "2026-11-23T02:10:05Z", finished_at: null, expires_at: null, results_url: `http://x/v1/email/lists/${id}/results`,
  };
}

const csv = "first,email\nAnn,ann@acme.example\nZoe,zoe@acme.example\n";

describe("lists.upload", () => {
  test("sends the file as it is, with its Content-Type, the query options and the secret in a header", async () => {
    const f = await fake((req, res) => send(res, 202, list(), { Location: `/v1/email/lists/${id}` }));
    const mv = new Mailvet({ baseUrl: f.url, ...keys });
    const l = await mv.lists.upload(csv, { column: "email", name: "june", webhookUrl: "https://hooks.example.com/l", webhookSecret: "at-least-8-chars" });
    assert.equal(l.id, id);
    const [req] = f.requests;
    assert.equal(req.method, "POST");
    const url = new URL(req.path, "http://x");
    assert.equal(url.pathname, "/v1/email/lists");
    assert.deepEqual(Object.fromEntries(url.searchParams), { column: "email", name: "june", webhook_url: "https://hooks.example.com/l" });
    assert.equal(req.headers["content-type"], "text/csv");
    assert.equal(req.headers["mailvet-webhook-secret"], "at-least-8-chars");
    assert.equal(req.headers.authorization, "Bearer sk_live_test");
    assert.equal(req.raw, csv);
  });

  test("takes a Uint8Array, a Blob and a ReadableStream; a stream is sent chunked, as it is read", async () => {
    const f = await fake((req, res) => send(res, 202, list()));
    const mv = new Mailvet({ baseUrl: f.url, ...keys });
    const text = "ann@acme.example\nzoe@acme.example\n";
    await mv.lists.upload(new TextEncoder().encode(text), { format: "text" });
    await mv.lists.upload(new Blob([text]), { format: "text" });
    const parts = ['{"email":"ann@acme.example"}\n', '{"email":"zoe@acme.example"}\n'];
    let pulled = 0;
    const stream = new ReadableStream({
      async pull(ctl) {
        if (pulled === parts.length) return ctl.close();
        await sleep(20);
        ctl.enqueue(new TextEncoder().encode(parts[pulled++]));
      },
    });
    await mv.lists.upload(stream, { format: "ndjson" });
    assert.deepEqual(f.requests.map((r) => r.headers["content-type"]), ["text/plain", "text/plain", "application/x-ndjson"]);
    assert.deepEqual(f.requests.map((r) => r.raw), [text, text, parts.join("")]);
    assert.equal(f.requests[2].headers["transfer-encoding"], "chunked");
    assert.equal(f.requests[2].headers["content-length"], undefined);
    await assert.rejects(mv.lists.upload(text, { format: "xlsx" }), TypeError);
    assert.equal(f.requests.length, 3);
  });

  test("a body in memory is sent again after a 503 with the same key; a ReadableStream, read once, is not", async () => {
    const f = await fake((req, res) => {
      if (req.index === 1) return send(res, 202, list("queued"));
      send(res, 503, envelope("service_unavailable"), { "Retry-After": "0" });
    });
    const mv = new Mailvet({ baseUrl: f.url, ...keys, retryOnRateLimit: true });
    const l = await mv.lists.upload(csv);
    assert.equal(l.id, id);
    assert.deepEqual(f.requests.map((r) => r.raw), [csv, csv]);
    assert.equal(f.requests[1].headers["idempotency-key"], f.requests[0].headers["idempotency-key"]);
    const stream = new ReadableStream({ start(ctl) { ctl.enqueue(new TextEncoder().encode(csv)); ctl.close(); } });
    const err = await mv.lists.upload(stream).catch((e) => e);
    assert.ok(err instanceof MailvetError);
    assert.equal(err.status, 503);
    assert.equal(err.retryAfter, 0);
    assert.equal(f.requests.length, 3);
  });

  test("a file the API cannot read is a MailvetError carrying the line at fault", async () => {
    const f = await fake((req, res) => send(res, 400, envelope("invalid_request", { line: 3 }), { Connection: "close" }));
    const mv = new Mailvet({ baseUrl: f.url, ...keys });
    const err = await mv.lists.upload("first,email\nAnn,ann@acme.example\nZoe\n").catch((e) => e);
    assert.ok(err instanceof MailvetError);
    assert.equal(err.error, "invalid_request");
    assert.equal(err.line, 3);
  });
});

describe("the other list calls", () => {
  test("get, list, cancel and delete use their method and path", async () => {
    const f = await fake((req, res) => {
      if (req.method === "DELETE") return send(res, 204);
      if (req.path.startsWith("/v1/email/lists?")) return send(res, 200, { lists: [list()], next_cursor: null });
      if (req.path.endsWith("/cancel")) return send(res, 200, list("canceled", 1));
      send(res, 200, list());
    });
    const mv = new Mailvet({ baseUrl: f.url, ...keys });
    assert.equal((await mv.lists.get(id)).state, "running");
    assert.equal((await mv.lists.list({ limit: 5, cursor: "c1" })).lists.length, 1);
    assert.equal((await mv.lists.cancel(id)).state, "canceled");
    assert.equal(await mv.lists.delete(id), undefined);
    assert.deepEqual(f.requests.map((r) => `${r.method} ${r.path}`), [
      `GET /v1/email/lists/${id}`,
      "GET /v1/email/lists?limit=5&cursor=c1",
      `POST /v1/email/lists/${id}/cancel`,
      `DELETE /v1/email/lists/${id}`,
    ]);
    assert.ok(f.requests.every((r) => r.headers.authorization === "Bearer sk_live_test"));
  });

  test("results streams the download; resultsText reads it whole; status filters are joined", async () => {
    const f = await fake(async (req, res) => {
      res.writeHead(200, { "Content-Type": "text/csv", "Mailvet-List-State": "completed" });
      res.write("first,email,status\n");
      await sleep(30);
      res.end("Ann,ann@acme.example,deliverable\n");
    });
    const mv = new Mailvet({ baseUrl: f.url, ...keys });
    const stream = await mv.lists.results(id, { status: ["deliverable", "catch_all"] });
    assert.ok(stream instanceof ReadableStream);
    const reader = stream.getReader();
    const first = await reader.read();
    assert.equal(new TextDecoder().decode(first.value), "first,email,status\n", "the first chunk arrives before the end");
    let rest = "";
    for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value);
    assert.equal(rest, "Ann,ann@acme.example,deliverable\n");
    assert.equal(f.requests[0].path, `/v1/email/lists/${id}/results?format=csv&status=deliverable%2Ccatch_all`);

    const text = await mv.lists.resultsText(id, { format: "ndjson", status: "deliverable" });
    assert.equal(text, "first,email,status\nAnn,ann@acme.example,deliverable\n");
    assert.equal(f.requests[1].path, `/v1/email/lists/${id}/results?format=ndjson&status=deliverable`);

    // Formula cells stay escaped (the API's default) unless the caller asks for them raw.
    await mv.lists.resultsText(id, { escapeFormulas: true });
    assert.equal(f.requests[2].path, `/v1/email/lists/${id}/results?format=csv`);
    await mv.lists.resultsText(id, { escapeFormulas: false });
    assert.equal(f.requests[3].path, `/v1/email/lists/${id}/results?format=csv&escape_formulas=false`);
  });

  test("a download the server cuts off errors the stream instead of ending it, with its request id", async () => {
    const f = await fake(async (req, res) => {
      res.writeHead(200, { "Content-Type": "text/csv", "X-Request-Id": "rid-cut" });
      res.write("email,status\nann@acme.example,deliverable\n");
      await sleep(20);
      res.socket.destroy(); // no final chunk, as the API does when its database fails mid-download
    });
    const mv = new Mailvet({ baseUrl: f.url, ...keys });
    const err = await mv.lists.resultsText(id).catch((e) => e);
    assert.ok(err instanceof MailvetError, String(err));
    assert.equal(err.error, "network_error");
    assert.equal(err.requestId, "rid-cut");
  });

  test("a missing list is list_not_found before any byte of a download", async () => {
    const f = await fake((req, res) => send(res, 404, envelope("list_not_found")));
    const mv = new Mailvet({ baseUrl: f.url, ...keys });
    const err = await mv.lists.results(id).catch((e) => e);
    assert.equal(err.status, 404);
    assert.equal(err.error, "list_not_found");
  });
});

describe("lists.wait", () => {
  test("polls every pollMs until a final state and reports every reading", async () => {
    let n = 0;
    const f = await fake((req, res) => {
      n++;
      send(res, 200, n < 3 ? list("running", n) : { ...list("completed", 4), eta_seconds: null });
    });
    const mv = new Mailvet({ baseUrl: f.url, ...keys });
    const seen = [];
    const started = Date.now();
    const l = await mv.lists.wait(id, { pollMs: 40, onProgress: (p) => seen.push(`${p.state} ${p.verified}`) });
    assert.equal(l.state, "completed");
    assert.deepEqual(seen, ["running 1", "running 2", "completed 4"]);
    assert.ok(Date.now() - started >= 80, "two waits of pollMs between three readings");
    const at = f.requests.map((r) => r.at);
    assert.ok(at[1] - at[0] >= 35 && at[2] - at[1] >= 35);
  });

  test("a pollMs of 0 or less is the default second, as the Go client's WaitList, not a loop of reads without a pause", async () => {
    let n = 0;
    const f = await fake((req, res) => {
      n++;
      send(res, 200, n < 2 ? list("running", 1) : { ...list("completed", 4), eta_seconds: null });
    });
    const mv = new Mailvet({ baseUrl: f.url, ...keys });
    for (const pollMs of [0, -5]) {
      n = 0;
      const before = f.requests.length;
      assert.equal((await mv.lists.wait(id, { pollMs })).state, "completed");
      const at = f.requests.slice(before).map((r) => r.at);
      assert.equal(at.length, 2);
      assert.ok(at[1] - at[0] >= 950, `pollMs ${pollMs}: readings ${at[1] - at[0]} ms apart, want the default 1,000`);
    }
  });

  test("a failed or canceled list ends the wait too; an abort rejects with the signal's reason", async () => {
    const f = await fake((req, res) => send(res, 200, req.path.endsWith("1") ? list("failed") : list("running")));
    const mv = new Mailvet({ baseUrl: f.url, ...keys });
    assert.equal((await mv.lists.wait(id, { pollMs: 10 })).state, "failed");
    const ctl = new AbortController();
    setTimeout(() => ctl.abort(new Error("stop")), 60);
    const err = await mv.lists.wait("019ab3c2-0000-7000-8000-000000000002", { pollMs: 20, signal: ctl.signal }).catch((e) => e);
    assert.equal(err.message, "stop");
  });
});
