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

// The Standard Webhooks headers every signed callback carries beside X-Service-Signature
// (docs/api.md, "Signature"): webhook-id is the original delivery's id (the same on each attempt and replay),
// webhook-timestamp the attempt's Unix seconds, webhook-signature "v1," and the base64 of
// HMAC-SHA256 over "<id>.<timestamp>.<raw body>". The rules match webhook/standard.go
// (VerifyStandard, VerifyRequest) and are tested with the same golden vectors.

/** The Standard Webhooks header names (lower case, as HTTP/2 and Node's IncomingMessage give them). */
export const webhookIdHeader = "webhook-id";
export const webhookTimestampHeader = "webhook-timestamp";
export const webhookSignatureHeader = "webhook-signature";

/** How far webhook-timestamp may be from the receiver's clock by default, either way: 5 minutes. */
export const defaultToleranceSeconds = 300;

// Bounds of what is read from the headers before anything is computed (as in the Go package).
const maxIdLength = 256;
const maxSignatureLength = 1024;
const maxSignatures = 8;
const timestampRE = /^[0-9]{1,12}$/;
const base64RE = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** Options of verifyWebhook and verifyStandardWebhookSignature. */
export interface VerifyWebhookOptions {
  /** How far webhook-timestamp may be from now, in seconds, either way (default 300). */
  toleranceSeconds?: number;
  /** The receiver's clock in milliseconds since the epoch (default Date.now). */
  now?: () => number;
  /**
   * Refuse a callback without the Standard Webhooks headers instead of checking
   * X-Service-Signature alone, which has no timestamp: set it to have old requests, replayed,
   * refused.
   */
  requireStandard?: boolean;
}

/**
 * standardWebhookKey is the HMAC key of the Standard Webhooks signature for a webhook_secret: a
 * secret "whsec_" + standard base64 (of at least one byte) is keyed with the decoded bytes, as
 * Standard Webhooks libraries key it; any other secret with its own UTF-8 bytes.
 */
export function standardWebhookKey(secret: BytesLike): Uint8Array {
  const raw = bytes(secret);
  const prefix = "whsec_";
  if (raw.length > prefix.length && new TextDecoder().decode(raw.subarray(0, prefix.length)) === prefix) {
    const rest = new TextDecoder().decode(raw.subarray(prefix.length));
    if (base64RE.test(rest)) {
      const bin = atob(rest);
      if (bin.length > 0) return Uint8Array.from(bin, (c) => c.charCodeAt(0));
    }
  }
  return raw;
}

/**
 * verifyStandardWebhookSignature reports whether the Standard Webhooks headers (their values, or
 * null/undefined when absent) sign rawBody with secret at a time within the tolerance of now. It
 * resolves to false for an absent, oversized or malformed header, a timestamp outside the
 * tolerance, and a wrong signature; one matching "v1," value among several suffices.
 */
export async function verifyStandardWebhookSignature(
  rawBody: BytesLike,
  id: string | null | undefined,
  timestamp: string | null | undefined,
  signature: string | null | undefined,
  secret: BytesLike,
  options: VerifyWebhookOptions = {},
): Promise<boolean> {
  if (typeof id !== "string" || typeof timestamp !== "string" || typeof signature !== "string") return false;
  if (id === "" || id.length > maxIdLength || signature.length > maxSignatureLength) return false;
  if (!timestampRE.test(timestamp)) return false;
  const nowSeconds = (options.now ?? Date.now)() / 1000;
  const tolerance = options.toleranceSeconds && options.toleranceSeconds > 0 ? options.toleranceSeconds : defaultToleranceSeconds;
  if (Math.abs(nowSeconds - Number(timestamp)) > tolerance) return false;
  const values = signature.split(" ").filter((v) => v !== "");
  if (values.length === 0 || values.length > maxSignatures) return false;
  const key = standardWebhookKey(secret);
  if (key.length === 0) throw new TypeError("verifyStandardWebhookSignature: the secret is empty");
  const subtle = await webCrypto();
  const hmacKey = await subtle.importKey("raw", key.slice(), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const head = new TextEncoder().encode(`${id}.${timestamp}.`);
  const body = bytes(rawBody);
  const content = new Uint8Array(head.length + body.length);
  content.set(head, 0);
  content.set(body, head.length);
  const want = new Uint8Array(await subtle.sign("HMAC", hmacKey, content));
  let ok = false;
  for (const v of values) {
    if (!v.startsWith("v1,") || !base64RE.test(v.slice(3))) continue;
    const bin = atob(v.slice(3));
    if (bin.length !== 32) continue;
    // Every value is compared, so the time taken does not tell which one matched.
    if (constantTimeEqual(Uint8Array.from(bin, (c) => c.charCodeAt(0)), want)) ok = true;
  }
  return ok;
}

/** Request headers as Fetch (Headers), Express or node:http (a plain object) give them. */
export type HeadersLike = { get(name: string): string | null } | Record<string, string | string[] | undefined>;

function header(h: HeadersLike, name: string): string | undefined {
  if (typeof (h as { get?: unknown }).get === "function") {
    return (h as { get(name: string): string | null }).get(name) ?? undefined;
  }
  const rec = h as Record<string, string | string[] | undefined>;
  const key = Object.keys(rec).find((k) => k.toLowerCase() === name.toLowerCase());
  const v = key === undefined ? undefined : rec[key];
  return Array.isArray(v) ? v.join(", ") : v;
}

/**
 * verifyWebhook checks a callback request with whichever scheme it carries (docs/api.md,
 * "Signature"): the Standard Webhooks headers when webhook-signature is present (then only
 * them, timestamp tolerance included), else X-Service-Signature, unless requireStandard is set.
 * Pass the raw body exactly as received, before any JSON parsing.
 */
export async function verifyWebhook(
  headers: HeadersLike,
  rawBody: BytesLike,
  secret: BytesLike,
  options: VerifyWebhookOptions = {},
): Promise<boolean> {
  const sig = header(headers, webhookSignatureHeader);
  if ((sig !== undefined && sig !== "") || options.requireStandard) {
    return verifyStandardWebhookSignature(
      rawBody,
      header(headers, webhookIdHeader),
      header(headers, webhookTimestampHeader),
      sig,
      secret,
      options,
    );
  }
  return verifyWebhookSignature(rawBody, header(headers, signatureHeader), secret);
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
