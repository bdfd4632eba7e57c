// Checking the X-Service-Signature of a webhook callback (docs/api.md, "Signature"): the header is
// "sha256=" and the lowercase hex of HMAC-SHA256 keyed with the job's webhook_secret over the exact
// raw body bytes. The rules match internal/webhook/signature.go (Verify): a missing header, a
// prefix other than "sha256=", or anything after it that is not exactly 64 lowercase hex digits is
// rejected before any MAC is computed. Web Crypto (globalThis.crypto.subtle) keeps it usable in
// browsers, workers and Node 18+.

/** The request header that carries the signature. Header names are case-insensitive. */
export const signatureHeader = "X-Service-Signature";

const headerRE = /^sha256=[0-9a-f]{64}$/;

/** Bytes a raw body or a secret may be given as; strings are encoded as UTF-8. */
export type BytesLike = string | Uint8Array | ArrayBuffer;

function bytes(v: BytesLike): Uint8Array {
  if (typeof v === "string") return new TextEncoder().encode(v);
  if (v instanceof Uint8Array) return v;
  return new Uint8Array(v);
}

/**
 * verifyWebhookSignature reports whether header (the X-Service-Signature value, or null/undefined
 * when the request had none) is the signature of rawBody with secret. Pass the body exactly as
 * received, before any JSON parsing. It resolves to false for a missing or malformed header and
 * for a wrong signature, and compares the MACs in constant time.
 */
export async function verifyWebhookSignature(
  rawBody: BytesLike,
  header: string | null | undefined,
  secret: BytesLike,
): Promise<boolean> {
  if (typeof header !== "string" || !headerRE.test(header)) return false;
  const got = new Uint8Array(32);
  for (let i = 0; i < 32; i++) got[i] = parseInt(header.slice(7 + 2 * i, 9 + 2 * i), 16);
  const key = bytes(secret);
  // Web Crypto refuses an empty HMAC key, and the API never signs with one (webhook_secret has at
  // least 8 characters), so an empty secret is a configuration mistake worth failing loudly on.
  if (key.length === 0) throw new TypeError("verifyWebhookSignature: the secret is empty");
  const subtle = await webCrypto();
  // Copies keep the views' underlying buffers out of Web Crypto, which takes whole ArrayBuffers.
  const hmacKey = await subtle.importKey("raw", key.slice(), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const want = new Uint8Array(await subtle.sign("HMAC", hmacKey, bytes(rawBody).slice()));
  return constantTimeEqual(got, want);
}

// webCrypto is globalThis.crypto.subtle, or, on Node 18, where that global needs a flag, the same
// API from node:crypto. The module name is a variable so that browser bundlers leave it alone.
async function webCrypto(): Promise<SubtleCrypto> {
  const subtle = globalThis.crypto?.subtle;
  if (subtle) return subtle;
  const nodeCrypto = "node:crypto";
  try {
    const mod = (await import(nodeCrypto)) as { webcrypto?: { subtle?: SubtleCrypto } };
    if (mod.webcrypto?.subtle) return mod.webcrypto.subtle;
  } catch {
    // Not Node: fall through to the error below.
  }
  throw new Error("verifyWebhookSignature needs Web Crypto (globalThis.crypto.subtle): Node 18+ or a modern browser");
}

/**
 * constantTimeEqual compares two byte arrays without returning early on the first difference, so
 * the time taken does not tell an attacker how much of a forged MAC was right. Lengths are not
 * secret (a MAC is always 32 bytes), so unequal lengths return at once.
 */
export function constantTimeEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}
