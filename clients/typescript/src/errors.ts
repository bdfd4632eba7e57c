import type { ApiError, VerifyResult } from "./openapi.js";

/**
 * Codes the client itself uses when there is no error envelope from the API: the request timed
 * out (`timeout`), the network failed (`network_error`), an HTTP error status came without the
 * API's envelope, e.g. from a proxy (`http_error`), a success answer was not the JSON the API
 * documents (`invalid_response`), or a stream ended without all its results and without an error
 * line (`stream_incomplete`).
 */
export type ClientErrorCode = "timeout" | "network_error" | "http_error" | "invalid_response" | "stream_incomplete";

/**
 * MailvetError is every failure of a call: an error envelope from the API (docs/errors.md), an
 * error line that ended a stream (docs/api.md, "The last line of an incomplete stream"), or one of
 * the client's own {@link ClientErrorCode}s (then `status` is 0, or the HTTP status of a response
 * that was not the API's JSON).
 *
 * Branch on `error`; show `message`; `action` says what to do and `docs` links the error's
 * section. The extra fields of some codes (`limit`, `used`, `reset_at`, `window`,
 * `hard_cap_eur`, `current_overage_eur`, `room`, `emails`, `line`) are copied onto the error, and the whole
 * envelope is in `body`.
 */
export class MailvetError extends Error {
  /** The HTTP status of the response; 200 for a stream's error line; 0 when there was no response. */
  readonly status: number;
  /** The stable machine code (`rate_limit_exceeded`, `invalid_request`, …, or a {@link ClientErrorCode}). */
  readonly error: string;
  /** What to do about it. */
  readonly action: string;
  /** The URL of the code's section in the error reference. */
  readonly docs: string;
  /** Emails per minute (rate_limit_exceeded) or units per month (monthly_quota_exceeded). */
  readonly limit?: number;
  /** Units used this month (monthly_quota_exceeded). */
  readonly used?: number;
  /** When the limit resets: the end of the minute or the start of the next month (ISO 8601). */
  readonly reset_at?: string;
  /** The rate-limit window, "1m". */
  readonly window?: string;
  /** The account's monthly overage cap in EUR (payment_required). */
  readonly hard_cap_eur?: number | null;
  /** The overage so far this month in EUR (payment_required). */
  readonly current_overage_eur?: number;
  /** How many more emails the spend cap allows this month (payment_required): a request of at most this many passes it. */
  readonly room?: number;
  /**
   * verifyStream: the addresses without a result, in input order, as given, including those of
   * requests not sent yet: send them again. On a stream's error line, they were not verified and
   * not charged. On a stream cut without one (`stream_incomplete`, or a `network_error` or
   * `timeout` after the stream began), a few may have been charged: the API bills a line once it
   * has written it, and a line in flight when the connection broke never arrived.
   */
  readonly emails?: string[];
  /** verifyStream: the positions in its `emails` of the addresses in `emails`, ascending. */
  readonly indexes?: number[];
  /** The line of an uploaded file that could not be read (a list upload's invalid_request, docs/lists.md). */
  readonly line?: number;
  /** The `Retry-After` header in seconds, when the response had one. */
  readonly retryAfter?: number;
  /** The `X-Request-Id` of the response: quote it when reporting a problem. */
  readonly requestId?: string;
  /**
   * verifyBatch only: the results of the addresses before the failed request, in input order —
   * verified and charged, so keep them. The failed request began at input index `results.length`;
   * a field the API names in `message` (`emails[1]`) counts from there.
   */
  results?: VerifyResult[];
  /** The error envelope as received; for the client's own codes, one the client built. */
  readonly body: ApiError | Record<string, unknown>;

  constructor(
    status: number,
    body: Partial<ApiError> & Record<string, unknown>,
    extra: ErrorExtra = {},
  ) {
    super(typeof body.message === "string" ? body.message : `HTTP ${status}`, extra.cause === undefined ? undefined : { cause: extra.cause });
    this.name = "MailvetError";
    this.status = status;
    this.error = typeof body.error === "string" ? body.error : "invalid_response";
    this.action = typeof body.action === "string" ? body.action : "";
    this.docs = typeof body.docs === "string" ? body.docs : "";
    if (typeof body.limit === "number") this.limit = body.limit;
    if (typeof body.used === "number") this.used = body.used;
    if (typeof body.reset_at === "string") this.reset_at = body.reset_at;
    if (typeof body.window === "string") this.window = body.window;
    if (typeof body.hard_cap_eur === "number" || body.hard_cap_eur === null) this.hard_cap_eur = body.hard_cap_eur;
    if (typeof body.current_overage_eur === "number") this.current_overage_eur = body.current_overage_eur;
    if (typeof body.room === "number") this.room = body.room;
    if (typeof body.line === "number") this.line = body.line;
    if (Array.isArray(body.emails)) this.emails = body.emails.filter((e): e is string => typeof e === "string");
    if (extra.emails !== undefined) this.emails = extra.emails;
    if (extra.indexes !== undefined) this.indexes = extra.indexes;
    if (extra.retryAfter !== undefined) this.retryAfter = extra.retryAfter;
    if (extra.requestId !== undefined) this.requestId = extra.requestId;
    this.body = body;
  }
}

/**
 * What a MailvetError carries beside the envelope; `emails` and `indexes` name the inputs a stream
 * left without a result.
 */
export interface ErrorExtra {
  retryAfter?: number;
  requestId?: string;
  cause?: unknown;
  emails?: string[];
  indexes?: number[];
}

/** clientError is a MailvetError for a failure that has no error envelope from the API. */
export function clientError(
  code: ClientErrorCode,
  message: string,
  status = 0,
  extra: ErrorExtra = {},
): MailvetError {
  return new MailvetError(status, { error: code, message, action: "", docs: "" }, extra);
}
