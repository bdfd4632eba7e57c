// verifyWebhookSignature accepts exactly what the service signs: the golden vectors of
// internal/webhook/testdata/signatures.json (computed with OpenSSL) and the malformed headers
// that internal/webhook's Verify rejects (docs/api.md, "Signature").
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { constantTimeEqual, signatureHeader, verifyWebhookSignature } from "../dist/index.js";

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
