// The client against a real server: `bin/api -dev -demo` built from this repository, in the demo
// mail world (internal/mailsim), on a fresh database that is dropped at the end. It needs Go
// (/usr/local/go/bin), Postgres where DATABASE_URL points (by default 127.0.0.1:5432, user
// postgres, trust; `make test` sets it to the project's private cluster when nothing answers
// there) and psql.
//
// The free tier's limits are raised for the run: 450 addresses a minute, so that a 500-address
// batch (ten requests of 50) meets exactly one 429, after at most nine requests (fewer when the
// earlier tests used part of the same minute), and the client must wait for the next one-minute
// window (docs/api.md, "Metering": fixed UTC minutes) and go on. That wait is real and lasts until
// the minute ends: at most 60 s, about 30 s on average. Retry timing to the millisecond is proven
// against the fake in client.test.mjs; this test proves that the real server's 429 and reset_at
// drive it. 450 leaves the next window enough for the rest of the batch as long as the earlier
// tests used at most 400 addresses in the batch's first minute (they use about 40).
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { Mailvet, MailvetError } from "../dist/index.js";

const repo = fileURLToPath(new URL("../../..", import.meta.url));
const rateLimit = 450;
const env = { ...process.env, PATH: `/usr/local/go/bin:${process.env.PATH}` };

// What each demo address shows (cmd/api/demo_test.go, docs/development.md, "The demo world").
const demo = {
  "ann@acme.example": { status: "deliverable", reason: "accepted" },
  "zoe@acme.example": { status: "undeliverable", reason: "mailbox_unknown" },
  "anyone@globex.example": { status: "catch_all", reason: "catch_all" },
  "bob@initech.example": { status: "unknown", reason: "greylisted" },
  "ann@mail.example": { status: "unknown", reason: "provider_blocks_probes" },
  "temp@mailinator.com": { status: "invalid", reason: "disposable" },
  "ann@mial.example": { status: "invalid", reason: "no_mx" },
};

const work = mkdtempSync(join(tmpdir(), "mailvet-ts-it-"));
const database = `mailvet_ts_${process.pid}_${Date.now().toString(36)}`;
// The server's URL with another database name: the test's own, or postgres to drop it.
function databaseURL(name) {
  const u = new URL(process.env.DATABASE_URL || "postgres://postgres@127.0.0.1:5432/mailvet?sslmode=disable");
  u.pathname = "/" + name;
  return u.toString();
}
let server; // the child process
let stdout = "";
let stderr = "";
let base = "";
let apiKey = "";
let provisioningKey = "";
let demoEmails = [];

function freePort() {
  return new Promise((resolve, reject) => {
    const l = net.createServer();
    l.once("error", reject);
    l.listen(0, "127.0.0.1", () => {
      const { port } = l.address();
      l.close(() => resolve(port));
    });
  });
}

async function waitFor(what, check, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await check().catch(() => false)) return;
    if (server.exitCode !== null) throw new Error(`api exited (${server.exitCode}) while waiting for ${what}:\n${stdout}\n${stderr}`);
    if (Date.now() > deadline) throw new Error(`no ${what} within ${ms} ms:\n${stdout}\n${stderr}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

before(async () => {
  execFileSync("go", ["build", "-o", join(work, "api"), "./cmd/api"], { cwd: repo, env, stdio: ["ignore", "inherit", "inherit"] });
  const [httpPort, metricsPort] = [await freePort(), await freePort()];
  base = `http://127.0.0.1:${httpPort}`;
  // cwd is the scratch directory: dev mode keeps the embedded NATS store in ./.data.
  server = spawn(join(work, "api"), ["-dev", "-demo"], {
    cwd: work,
    env: {
      ...env,
      DATABASE_URL: databaseURL(database),
      MAILVET_HTTP_ADDR: `127.0.0.1:${httpPort}`,
      MAILVET_METRICS_ADDR: `127.0.0.1:${metricsPort}`,
      MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN: String(rateLimit),
      MAILVET_PLAN_FREE_MONTHLY_CALLS: "100000",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  server.stdout.setEncoding("utf8").on("data", (d) => { stdout += d; });
  server.stderr.setEncoding("utf8").on("data", (d) => { stderr += d; });
  await waitFor("banner", async () => stdout.includes("Mailvet is running"), 60_000);
  await waitFor("/readyz", async () => (await fetch(base + "/readyz")).status === 200, 30_000);
  apiKey = /standard key \(verify API\):\s+(sk_live_[0-9A-Za-z]+)/.exec(stdout)?.[1] ?? "";
  provisioningKey = /provisioning key \(management API\):\s+(sk_mgmt_[0-9A-Za-z]+)/.exec(stdout)?.[1] ?? "";
  const section = stdout.split("Demo world")[1] ?? "";
  demoEmails = [...section.matchAll(/^ {2}(\S+@\S+) {2,}\S/gm)].map((m) => m[1]);
  assert.ok(apiKey && provisioningKey, `no keys in the banner:\n${stdout}`);
});

after(async () => {
  if (server && server.exitCode === null) {
    const exited = new Promise((r) => server.once("exit", r));
    server.kill("SIGTERM");
    const timer = setTimeout(() => server.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
  }
  try {
    execFileSync("psql", [databaseURL("postgres"), "-qc", `drop database if exists "${database}" with (force)`], { stdio: "pipe" });
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

const client = (opts = {}) => new Mailvet({ baseUrl: base, apiKey, provisioningKey, ...opts });

describe("against bin/api -dev -demo", () => {
  test("the banner lists the demo addresses, and verify shows each one's outcome", async () => {
    assert.deepEqual([...demoEmails].sort(), Object.keys(demo).sort());
    const mv = client();
    for (const email of demoEmails) {
      const r = await mv.verify(email);
      assert.equal(r.email, email);
      assert.equal(r.status, demo[email].status, email);
      assert.equal(r.reason, demo[email].reason, email);
    }
  });

  test("API errors arrive as MailvetError with the envelope's fields", async () => {
    const mv = client();
    const bad = await mv.verify("").catch((e) => e);
    assert.ok(bad instanceof MailvetError);
    assert.equal(bad.status, 400);
    assert.equal(bad.error, "invalid_request");
    assert.ok(bad.action.length > 0);
    assert.match(bad.docs, /\/docs\/errors#invalid_request$/);
    assert.ok(bad.requestId);

    const wrongKey = await new Mailvet({ baseUrl: base, apiKey: provisioningKey }).verify("ann@acme.example").catch((e) => e);
    assert.equal(wrongKey.status, 403);
    assert.equal(wrongKey.error, "wrong_key_type");

    // 1,000 addresses are more than the whole per-minute limit: refused whole, with the rate
    // limit's fields, and at once (the client does not retry what can never pass).
    const tooMany = Array.from({ length: 1000 }, (_, i) => `u${i}@acme.example`);
    const err = await (async () => { for await (const _ of mv.verifyStream(tooMany)) { /* none */ } })().catch((e) => e);
    assert.ok(err instanceof MailvetError, String(err));
    assert.equal(err.status, 429);
    assert.equal(err.error, "rate_limit_exceeded");
    assert.equal(err.limit, rateLimit);
    assert.equal(err.window, "1m");
    assert.ok(Date.parse(err.reset_at) > Date.now() - 1000);
    // Retrying it as it is can never pass: no Retry-After, and the action says to split it.
    assert.equal(err.retryAfter, undefined);
    assert.match(err.action, /[Ss]plit/);
  });

  test("verifyStream yields one result per address as the lines arrive", async () => {
    const emails = [...demoEmails, ...demoEmails, ...demoEmails];
    const got = [];
    for await (const r of client().verifyStream(emails)) {
      assert.equal(r.status, demo[r.email].status, r.email);
      got.push(r.email);
    }
    assert.deepEqual(got.sort(), [...emails].sort());
  });

  test("verifyStream's index tells apart inputs that normalise to the same address", async () => {
    // The same address again, with its domain in capitals, with blanks around it: all answered
    // with the same normalised email, each on its own line with its own index (docs/api.md,
    // "Verify a stream").
    const emails = ["ann@acme.example", " ann@ACME.example", "zoe@acme.example", "ann@Acme.Example\t", "ann@acme.example",
      "zoe@ACME.EXAMPLE ", "temp@mailinator.com", "temp@MAILINATOR.com", "zoe@acme.example", "ann@acme.example"];
    const normalised = (e) => { const [local, domain] = e.trim().split("@"); return `${local}@${domain.toLowerCase()}`; };
    const seen = new Set();
    for await (const r of client().verifyStream(emails)) {
      assert.ok(Number.isInteger(r.index) && r.index >= 0 && r.index < emails.length && !seen.has(r.index), `index ${r.index}`);
      seen.add(r.index);
      const input = emails[r.index];
      assert.equal(r.email, normalised(input), JSON.stringify(input));
      assert.equal(r.status, demo[r.email].status, JSON.stringify(input));
    }
    assert.equal(seen.size, emails.length);
  });

  test("verifyAsync queues a job that job() then shows completed; the delivery is listed", async () => {
    const mv = client();
    const acc = await mv.verifyAsync("ann@acme.example", { webhookUrl: "https://hooks.example.com/mailvet", webhookSecret: "at-least-8-chars" });
    assert.equal(acc.status, "pending");
    let job = await mv.job(acc.job_id);
    for (let i = 0; i < 100 && job.status !== "completed" && job.status !== "failed"; i++) {
      await new Promise((r) => setTimeout(r, 100));
      job = await mv.job(acc.job_id);
    }
    assert.equal(job.status, "completed");
    assert.equal(job.result?.status, "deliverable");
    assert.equal(job.result?.job_id, acc.job_id);
    const missing = await mv.job("00000000-0000-4000-8000-000000000000").catch((e) => e);
    assert.equal(missing.error, "job_not_found");
    let found;
    for (let i = 0; i < 50 && !found; i++) {
      for await (const d of mv.deliveries.all()) if (d.job_id === acc.job_id) found = d;
      if (!found) await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(found, "the job's delivery is listed");
    assert.equal(found.signed, true);
    const replay = await mv.deliveries.retry(found.id).catch((e) => e);
    assert.equal(replay.error, "plan_upgrade_required", "the demo account is on the free tier");
  });

  test("the management API: account, keys, usage, billing portal", async () => {
    const mv = client();
    const account = await mv.account();
    assert.equal(account.tier, "free");
    assert.equal(account.limits.rate_limit_per_min, rateLimit);
    const before = await mv.keys.list();
    const created = await mv.keys.create("ts-client-test");
    assert.match(created.key, /^sk_live_/);
    assert.equal((await mv.keys.list()).count, before.count + 1);
    const withNewKey = new Mailvet({ baseUrl: base, apiKey: created.key });
    assert.equal((await withNewKey.verify("temp@mailinator.com")).status, "invalid");
    await mv.keys.revoke(created.id);
    const revoked = await withNewKey.verify("temp@mailinator.com").catch((e) => e);
    assert.equal(revoked.error, "invalid_api_key");
    assert.equal((await mv.keys.list()).count, before.count);

    const usage = await mv.usage();
    assert.equal(usage.days.length, 30);
    assert.ok(usage.days.at(-1).calls > 0);
    const summary = await mv.usageSummary();
    assert.equal(summary.tier, "free");
    assert.ok(summary.calls_used > 0);

    const portal = await mv.billingPortal("https://app.example.com/billing").catch((e) => e);
    assert.ok(portal instanceof MailvetError);
    assert.equal(portal.error, "no_billing_customer", "the demo account has no Stripe customer");
  });

  test("audit: a key created and revoked is in the audit log, newest first, a page at a time", async () => {
    const mv = client();
    const created = await mv.keys.create("ts-audit");
    await mv.keys.revoke(created.id);
    const first = await mv.audit.list({ limit: 1 });
    assert.equal(first.events.length, 1);
    assert.ok(first.next_cursor, "more events follow");
    const [revoked] = first.events;
    assert.equal(revoked.kind, "key_revoked");
    assert.match(revoked.detail, /ts-audit/);
    assert.equal(revoked.outcome, "success");
    assert.equal(revoked.actor_type, "api_key");
    assert.ok(!revoked.actor.includes(provisioningKey), "an actor is a key's display form, never the key");
    const second = await mv.audit.list({ limit: 1, cursor: first.next_cursor });
    assert.equal(second.events[0].kind, "key_created");
    assert.match(second.events[0].detail, /ts-audit/);
    const all = [];
    for await (const e of mv.audit.all({ limit: 2 })) all.push(e.id);
    assert.deepEqual(all.slice(0, 2), [revoked.id, second.events[0].id]);
    assert.equal(new Set(all).size, all.length, "no event twice across pages");
    const tooMany = await mv.audit.list({ limit: 500 }).catch((e) => e);
    assert.ok(tooMany instanceof MailvetError && tooMany.status === 400 && tooMany.error === "invalid_request", String(tooMany));
    const wrongKey = await new Mailvet({ baseUrl: base, provisioningKey: apiKey }).audit.list().catch((e) => e);
    assert.ok(wrongKey instanceof MailvetError && wrongKey.error === "wrong_key_type", String(wrongKey));
  });

  test("a sandbox key answers the magic addresses of docs/sandbox.md, marked sandbox, and bills nothing", async () => {
    const mv = client();
    // Usage rows of the earlier tests are written behind their responses: wait until it settles.
    let before = (await mv.account()).usage_this_month;
    for (let i = 0; i < 20; i++) {
      await new Promise((r) => setTimeout(r, 100));
      const now = (await mv.account()).usage_this_month;
      if (now === before) break;
      before = now;
    }
    const created = await mv.keys.create("ts-sandbox", { mode: "sandbox" });
    assert.match(created.key, /^sk_test_/);
    assert.equal(created.mode, "sandbox");
    assert.equal((await mv.keys.list()).keys.find((k) => k.id === created.id)?.mode, "sandbox");
    const sandbox = new Mailvet({ baseUrl: base, apiKey: created.key });
    const want = {
      "accepted@sandbox.mailvet.test": ["deliverable", "accepted"],
      "mailbox_unknown@sandbox.mailvet.test": ["undeliverable", "mailbox_unknown"],
      "catch_all@sandbox.mailvet.test": ["catch_all", "catch_all"],
      "role@sandbox.mailvet.test": ["deliverable", "accepted"],
      "ann@acme.example": ["unknown", "sandbox_unlisted"],
      "not-an-address": ["invalid", "invalid_syntax"],
    };
    for (const [email, [status, reason]] of Object.entries(want)) {
      const r = await sandbox.verify(email);
      assert.deepEqual([r.status, r.reason, r.sandbox], [status, reason, true], email);
    }
    const batch = await sandbox.verifyBatch(Object.keys(want));
    assert.deepEqual(batch.map((r) => [r.status, r.reason, r.sandbox]), Object.values(want).map(([s, r]) => [s, r, true]));
    assert.equal((await client().verify("ann@acme.example")).sandbox, undefined, "a live key is never answered by the sandbox");
    await mv.keys.revoke(created.id);
    await new Promise((r) => setTimeout(r, 300));
    // The live verify above is the only new usage.
    assert.equal((await mv.account()).usage_this_month, before + 1);
  });

  test("a key creation whose answer is lost is retried with its Idempotency-Key and gets the same key", async () => {
    // The fetch passes every request to the API but answers the first POST with a 503 of its
    // own, as a connection cut after the API acted looks to the client.
    const sent = [];
    let lost = false;
    const losing = async (url, init) => {
      const res = await fetch(url, init);
      if (init.method !== "POST") return res;
      sent.push(new Headers(init.headers).get("Idempotency-Key"));
      if (lost) return res;
      lost = true;
      await res.text();
      return new Response(JSON.stringify({ error: "service_unavailable", message: "Lost.", action: "Retry.", docs: "d" }),
        { status: 503, headers: { "Content-Type": "application/json", "Retry-After": "0" } });
    };
    const mv = client({ fetch: losing, retryOnRateLimit: true });
    const before = await mv.keys.list();
    const created = await mv.keys.create("ts-idempotent");
    assert.equal(sent.length, 2);
    assert.match(sent[0], /^[0-9a-f]{32}$/);
    assert.equal(sent[1], sent[0]);
    const after = await mv.keys.list();
    assert.equal(after.count, before.count + 1, "one key created for two attempts");
    assert.ok(after.keys.some((k) => k.id === created.id));
    await mv.keys.revoke(created.id);
  });

  test("a bulk list: upload a CSV as a stream, wait for it, download its rows in input order", async () => {
    const mv = client();
    const rows = [...demoEmails, ...demoEmails.map((e) => e.toUpperCase())]; // duplicates once normalised
    const file = "name,Email\n" + rows.map((e, i) => `Person ${i},${e}\n`).join("");
    const bytes = new TextEncoder().encode(file);
    const body = new ReadableStream({
      start(ctl) {
        ctl.enqueue(bytes.slice(0, 20)); // two chunks: the body really is streamed
        ctl.enqueue(bytes.slice(20));
        ctl.close();
      },
    });
    const uploaded = await mv.lists.upload(body, { name: "ts-it" });
    assert.equal(uploaded.rows, rows.length);
    assert.equal(uploaded.unique, demoEmails.length);
    assert.equal(uploaded.email_column, "Email");
    const readings = [];
    const done = await mv.lists.wait(uploaded.id, { pollMs: 100, onProgress: (l) => readings.push(l.verified) });
    assert.equal(done.state, "completed");
    assert.equal(done.verified, demoEmails.length);
    assert.ok(readings.length >= 1);
    const csv = (await mv.lists.resultsText(done.id)).trimEnd().split("\n");
    assert.equal(csv[0], "name,Email,status,reason,valid,confidence,failed_check,disposable,role,free_provider,catch_all,smtp_blocked,mx_found,mx_host,suggestion,smtp_code,smtp_enhanced_code,smtp_text");
    assert.equal(csv.length, 1 + rows.length);
    csv.slice(1).forEach((line, i) => {
      const [name, email, status, reason] = line.split(",");
      assert.equal(name, `Person ${i}`, "input order");
      assert.equal(email, rows[i]);
      assert.equal(status, demo[rows[i].toLowerCase()].status, rows[i]);
      assert.equal(reason, demo[rows[i].toLowerCase()].reason, rows[i]);
    });
    const bad = await mv.lists.upload("name,email\nAnn,ann@acme.example\nZoe\n").catch((e) => e);
    assert.ok(bad instanceof MailvetError);
    assert.equal(bad.error, "invalid_request");
    assert.equal(bad.line, 3);
    await mv.lists.delete(done.id);
    assert.equal((await mv.lists.get(done.id).catch((e) => e)).error, "list_not_found");
  });

  test("a 429 in the middle of a 500-address batch is retried transparently with retryOnRateLimit", async (t) => {
    // The requests before the 429 must all land in one window (in the demo world ten requests of
    // 50 take well under a second): if the minute is about to end, start in the next one.
    const msLeft = 60_000 - (Date.now() % 60_000);
    if (msLeft < 3_000) await new Promise((r) => setTimeout(r, msLeft + 200));

    const seen = []; // every response the client received: status, time, and a 429's reset_at
    const countingFetch = async (url, init) => {
      const res = await fetch(url, init);
      const entry = { status: res.status, at: Date.now(), size: JSON.parse(init.body).emails.length };
      if (res.status === 429) entry.resetAt = Date.parse((await res.clone().json()).reset_at);
      seen.push(entry);
      return res;
    };
    const emails = Array.from({ length: 500 }, (_, i) => demoEmails[i % demoEmails.length]);
    const started = Date.now();
    const results = await client({ retryOnRateLimit: true, fetch: countingFetch }).verifyBatch(emails);
    const took = Date.now() - started;

    assert.equal(results.length, 500);
    results.forEach((r, i) => {
      assert.equal(r.email, emails[i], `result ${i} is in input order`);
      assert.equal(r.status, demo[r.email].status, r.email);
    });
    const refused = seen.filter((s) => s.status === 429);
    assert.equal(refused.length, 1, `exactly one 429: ${JSON.stringify(seen)}`);
    const i = seen.indexOf(refused[0]);
    assert.ok(i >= 1 && i <= 9, `the 429 came in the middle, after ${i} requests`);
    assert.equal(seen.length, 11);
    assert.ok(seen.every((s) => s.size === 50));
    assert.equal(seen[i + 1].status, 200);
    assert.ok(seen[i + 1].at >= refused[0].resetAt + 50, "the retry waited until reset_at + 50 ms");
    t.diagnostic(`500-address batch: 429 after ${i} requests, waited ${seen[i + 1].at - refused[0].at} ms for the next window, ${took} ms in all`);
  });

  // Last: it deletes the demo account.
  test("exportAccount, deleteHistory, then deleteAccount: the account's keys stop working", async () => {
    const mv = client();
    const { account_id: id } = await mv.account();
    // The batch test before this one may have used the minute's rate limit: wait it out.
    await client({ retryOnRateLimit: true }).verify("zoe@acme.example");
    let ex;
    for (const deadline = Date.now() + 10_000; ; await new Promise((r) => setTimeout(r, 50))) {
      ex = await mv.exportAccount(); // usage rows follow their answers by a moment
      if (ex.results.some((r) => r.result?.email === "zoe@acme.example")) break;
      assert.ok(Date.now() < deadline, `the export never showed the result: ${JSON.stringify(ex).slice(0, 500)}`);
    }
    assert.equal(ex.account.account_id, id);
    assert.ok(ex.keys.length >= 2);
    assert.ok(!JSON.stringify(ex).includes("key_hash"));

    const d = await mv.deleteHistory(" ZOE@acme.example ");
    assert.equal(d.email, "zoe@acme.example");
    assert.ok(d.deleted.results >= 1, JSON.stringify(d));
    ex = await mv.exportAccount();
    assert.ok(!ex.results.some((r) => r.result?.email === "zoe@acme.example"));

    const wrong = await mv.deleteAccount("not-the-id").catch((e) => e);
    assert.ok(wrong instanceof MailvetError && wrong.status === 400 && wrong.error === "invalid_request", String(wrong));
    assert.equal(await mv.deleteAccount(id), undefined);
    const gone = await mv.account().catch((e) => e);
    assert.ok(gone instanceof MailvetError && gone.status === 401, String(gone));
    const refused = await mv.verify("ann@acme.example").catch((e) => e);
    assert.ok(refused instanceof MailvetError && refused.status === 401, String(refused));
  });
});
