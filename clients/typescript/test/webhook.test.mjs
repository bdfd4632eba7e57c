// verifyWebhookSignature accepts exactly what the service signs: the golden vectors of
// internal/webhook/testdata/signatures.json (computed with OpenSSL) and the malformed headers
// that internal/webhook's Verify rejects (docs/api.md, "Signature").
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import {
  constantTimeEqual,
  defaultToleranceSeconds,
  signatureHeader,
  standardWebhookKey,
  verifyStandardWebhookSignature,
  verifyWebhook,
  verifyWebhookSignature,
  webhookIdHeader,
} from "../dist/index.js";

const vectors = JSON.parse(readFileSync(new URL("../../../internal/webhook/testdata/signatures.json", import.meta.url), "utf8"));

test("every golden vector verifies, given as a string, bytes or an ArrayBuffer", async () => {
  assert.ok(vectors.length >= 6);
  for (const v of vectors) {
    const body = new TextEncoder().encode(v.body);
    assert.equal(await verifyWebhookSignature(v.body, v.signature, v.secret), true, `string body ${JSON.stringify(v.body)}`);
    assert.equal(await verifyWebhookSignature(body, v.signature, new TextEncoder().encode(v.secret)), true, "Uint8Array");
    assert.equal(await verifyWebhookSignature(body.buffer.slice(body.byteOffset, body.byteOffset + body.byteLength), v.signature, v.secret), true, "ArrayBuffer");
  }
  assert.equal(signatureHeader, "X-Service-Signature");
});

test("a changed body, a changed secret or another vector's signature is rejected", async () => {
  for (const [i, v] of vectors.entries()) {
    assert.equal(await verifyWebhookSignature(v.body + " ", v.signature, v.secret), false);
    assert.equal(await verifyWebhookSignature(v.body, v.signature, v.secret + "x"), false);
    const other = vectors[(i + 1) % vectors.length];
    assert.equal(await verifyWebhookSignature(v.body, other.signature, v.secret), false);
  }
});

test("a view into a larger buffer is read as just its bytes", async () => {
  const v = vectors[1];
  const body = new TextEncoder().encode(v.body);
  const big = new Uint8Array(body.length + 20);
  big.set(body, 10);
  assert.equal(await verifyWebhookSignature(big.subarray(10, 10 + body.length), v.signature, v.secret), true);
});

test("missing and malformed headers are rejected, as internal/webhook's Verify does", async () => {
  const { secret, body, signature: good } = vectors[1];
  const hex = good.slice("sha256=".length);
  const bad = {
    missing: undefined,
    null: null,
    empty: "",
    "no prefix": hex,
    "wrong algorithm": "sha1=" + hex,
    "uppercase prefix": "SHA256=" + hex,
    "prefix only": "sha256=",
    short: good.slice(0, -2),
    long: good + "00",
    "uppercase hex": "sha256=" + hex.toUpperCase(),
    "non-hex": "sha256=" + "zz".repeat(32),
    "leading space": " " + good,
    "trailing newline": good + "\n",
    "trailing junk": good.slice(0, -1) + "g",
    "two values": good + "," + good,
    "all zero": "sha256=" + "0".repeat(64),
  };
  for (const [name, header] of Object.entries(bad)) {
    assert.equal(await verifyWebhookSignature(body, header, secret), false, name);
  }
  assert.equal(await verifyWebhookSignature(body, good, secret), true);
  await assert.rejects(verifyWebhookSignature(body, good, ""), TypeError, "an empty secret is a mistake, not a mismatch");
});

test("constantTimeEqual compares whole byte arrays", () => {
  assert.equal(constantTimeEqual(new Uint8Array([1, 2, 3]), new Uint8Array([1, 2, 3])), true);
  assert.equal(constantTimeEqual(new Uint8Array([1, 2, 3]), new Uint8Array([1, 2, 4])), false);
  assert.equal(constantTimeEqual(new Uint8Array([9, 2, 3]), new Uint8Array([1, 2, 3])), false);
  assert.equal(constantTimeEqual(new Uint8Array([1, 2]), new Uint8Array([1, 2, 3])), false);
  assert.equal(constantTimeEqual(new Uint8Array(0), new Uint8Array(0)), true);
});

test("without globalThis.crypto (Node 18 without its flag) the Web Crypto of node:crypto is used", () => {
  const v = vectors[0];
  const script = `
Object.defineProperty(globalThis, "crypto", { value: undefined, configurable: true });
const { verifyWebhookSignature } = await import(${JSON.stringify(new URL("../dist/index.js", import.meta.url).href)});
process.stdout.write(String(await verifyWebhookSignature(${JSON.stringify(v.body)}, ${JSON.stringify(v.signature)}, ${JSON.stringify(v.secret)})));`;
  const out = execFileSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
  assert.equal(out, "true");
});

// The Standard Webhooks scheme (docs/api.md, "Signature"): the golden vectors of
// internal/webhook/testdata/standard-signatures.json, computed with OpenSSL and shared with the Go
// tests (webhook/standard_test.go); the first is the scheme's own published example.
const standard = JSON.parse(readFileSync(new URL("../../../internal/webhook/testdata/standard-signatures.json", import.meta.url), "utf8"));

const at = (v, offsetSeconds = 0) => ({ now: () => (Number(v.timestamp) + offsetSeconds) * 1000 });

test("every Standard Webhooks golden vector verifies at its own time, and within 5 minutes of it", async () => {
  assert.ok(standard.length >= 5);
  for (const v of standard) {
    for (const offset of [0, 299, -299, 300, -300]) {
      assert.equal(await verifyStandardWebhookSignature(v.body, v.id, v.timestamp, v.signature, v.secret, at(v, offset)), true, `${v.id} at ${offset}s`);
    }
    const headers = new Headers({ "webhook-id": v.id, "webhook-timestamp": v.timestamp, "webhook-signature": v.signature });
    assert.equal(await verifyWebhook(headers, v.body, v.secret, at(v, 60)), true, "Headers");
    const plain = { "Webhook-Id": v.id, "webhook-timestamp": v.timestamp, "WEBHOOK-SIGNATURE": v.signature };
    assert.equal(await verifyWebhook(plain, new TextEncoder().encode(v.body), v.secret, at(v)), true, "a node:http header object");
  }
  assert.equal(webhookIdHeader, "webhook-id");
  assert.equal(defaultToleranceSeconds, 300);
});

test("a Standard Webhooks request outside the tolerance (a replay) is rejected", async () => {
  for (const v of standard) {
    const headers = new Headers({ "webhook-id": v.id, "webhook-timestamp": v.timestamp, "webhook-signature": v.signature });
    assert.equal(await verifyWebhook(headers, v.body, v.secret, at(v, 301)), false, "301 s late");
    assert.equal(await verifyWebhook(headers, v.body, v.secret, at(v, -301)), false, "301 s early");
    assert.equal(await verifyWebhook(headers, v.body, v.secret, { ...at(v, 3600), toleranceSeconds: 7200 }), true, "a wider tolerance");
  }
});

test("a changed body, id, timestamp or secret breaks a Standard Webhooks signature", async () => {
  for (const v of standard) {
    const o = at(v);
    assert.equal(await verifyStandardWebhookSignature(v.body + " ", v.id, v.timestamp, v.signature, v.secret, o), false);
    assert.equal(await verifyStandardWebhookSignature(v.body, v.id + "x", v.timestamp, v.signature, v.secret, o), false);
    assert.equal(await verifyStandardWebhookSignature(v.body, v.id, String(Number(v.timestamp) + 1), v.signature, v.secret, o), false);
    assert.equal(await verifyStandardWebhookSignature(v.body, v.id, v.timestamp, v.signature, v.secret + "x", o), false);
  }
});

test("malformed Standard Webhooks headers are rejected; one right value among several passes", async () => {
  const v = standard[2];
  const o = at(v);
  const other = standard[1].signature;
  const bad = {
    "no id": [undefined, v.timestamp, v.signature],
    "empty id": ["", v.timestamp, v.signature],
    "long id": ["a".repeat(257), v.timestamp, v.signature],
    "no timestamp": [v.id, null, v.signature],
    "signed timestamp": [v.id, "+" + v.timestamp, v.signature],
    "milliseconds": [v.id, v.timestamp + "000", v.signature],
    "no signature": [v.id, v.timestamp, ""],
    "other version": [v.id, v.timestamp, "v2," + v.signature.slice(3)],
    "not base64": [v.id, v.timestamp, "v1,!!!!"],
    "nine values": [v.id, v.timestamp, Array(8).fill(other).concat(v.signature).join(" ")],
  };
  for (const [name, [id, ts, sig]] of Object.entries(bad)) {
    assert.equal(await verifyStandardWebhookSignature(v.body, id, ts, sig, v.secret, o), false, name);
  }
  assert.equal(await verifyStandardWebhookSignature(v.body, v.id, v.timestamp, `${other} ${v.signature}`, v.secret, o), true);
});

test("whsec_ secrets are keyed with their decoded bytes, others with their own", () => {
  assert.deepEqual(standardWebhookKey("whsec_aGVsbG8="), new TextEncoder().encode("hello"));
  for (const s of ["at-least-8-chars", "whsec_not base64!", "whsec_", "WHSEC_aGVsbG8="]) {
    assert.deepEqual(standardWebhookKey(s), new TextEncoder().encode(s), s);
  }
});

test("verifyWebhook falls back to X-Service-Signature unless the standard scheme is required", async () => {
  const v = vectors[1];
  const legacy = { "x-service-signature": v.signature };
  assert.equal(await verifyWebhook(legacy, v.body, v.secret), true);
  assert.equal(await verifyWebhook(legacy, v.body, v.secret, { requireStandard: true }), false);
  assert.equal(await verifyWebhook({}, v.body, v.secret), false);
});
