// The Mailvet API client: every route of docs/api.md over fetch, with the retry rules of its
// client checklist (wait until reset_at + 50 ms after a 429, Retry-After after a 503).
import { clientError, type ErrorExtra, MailvetError } from "./errors.js";
import type {
  Account,
  AccountExport,
  AsyncAccepted,
  AuditEvent,
  AuditPage,
  BatchResult,
  BillingPortalResponse,
  CreatedKey,
  DailyUsage,
  Delivery,
  DeliveryPage,
  HistoryDeleted,
  Job,
  KeyList,
  List,
  ListPage,
  RetryDeliveryResponse,
  StreamResult,
  UsageSummary,
  VerifyResult,
} from "./openapi.js";

/** Addresses per batch request; the API takes up to 100 (docs/api.md, "Limits"). */
export const batchChunkSize = 50;
/** Addresses per stream request: the API's maximum. */
export const streamChunkSize = 1000;
/**
 * The longest line of a stream, as the Go client's: a result is well under 1 KiB, and an error
 * line lists at most 1,000 addresses of at most 1,024 bytes.
 */
const maxStreamLine = 2 << 20;
/** The cushion added to `reset_at` before a retry, as docs/api.md's client checklist advises. */
export const retryCushionMs = 50;
/**
 * The longest wait before a retry. The API's own are at most a rate-limit window (60 s) or a few
 * seconds of Retry-After; a longer one (a proxy's Retry-After of an hour) is not waited out in
 * silence: the error is thrown at once, its `retryAfter` or `reset_at` saying when to try again.
 */
export const maxRetryWaitMs = 120_000;

/** The options of {@link Mailvet}. */
export interface MailvetOptions {
  /** The API's base URL, e.g. `https://api.example.com` or `http://localhost:8080`. */
  baseUrl: string;
  /** A standard key (`sk_live_…`), for the verify routes. */
  apiKey?: string;
  /** A provisioning key (`sk_mgmt_…`), for the management routes. */
  provisioningKey?: string;
  /**
   * Retry a request refused with 429 `rate_limit_exceeded` after waiting until its `reset_at`
   * plus 50 ms, and a 503 that carries `Retry-After` after that many seconds (plus 50 ms); each
   * wait gets a random jitter of up to a tenth of it (at most 1 s), and a wait longer than
   * {@link maxRetryWaitMs} is not waited: the error is thrown. A call
   * that verifies or creates something (verify, verifyAsync, each request of verifyBatch, a list, a
   * key, a portal session) sends one Idempotency-Key on all its attempts, so the API runs and bills
   * it once, and a 409 `idempotency_key_in_use` is retried after Retry-After; a delivery replay is
   * not retried after a 503. Also splits a batch or stream chunk larger than
   * the account's per-minute limit.
   *
   * Also retries network failures (a refused or reset connection, one closed before the answer,
   * a `timeoutMs` expiry), after 0.5 s, then 1 s, 2 s, … with the same jitter and limit, when a
   * repeat is safe: a GET or DELETE, a POST with an Idempotency-Key (for `lists.upload`, a body
   * that is not a ReadableStream), or any request whose connection was refused (ECONNREFUSED:
   * nothing was sent). A POST without a key (verify, verifyStream, lists.cancel,
   * deliveries.retry) that may have reached the server is not sent again, nor a stream that has
   * started, nor an aborted call. `keys.revoke` and `lists.delete` answered `key_not_found` or
   * `list_not_found` on such a retry resolve: the lost attempt did it (docs/clients.md, "Network
   * failures"). Default false.
   */
  retryOnRateLimit?: boolean;
  /** Retries of one request when `retryOnRateLimit` is on. Default 3. */
  maxRetries?: number;
  /** Time allowed for each HTTP request, body included, in ms (0: none). Default 60,000. */
  timeoutMs?: number;
  /** Time allowed for each stream request, until its last line, in ms (0: none). Default 130,000 (the API gives a stream 120 s). */
  streamTimeoutMs?: number;
  /** The fetch to use; default `globalThis.fetch`. */
  fetch?: typeof globalThis.fetch;
}

/** Per-call options. */
export interface CallOptions {
  /** Aborts the call, including a wait before a retry; the call then rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Overrides the client's `timeoutMs` (or `streamTimeoutMs`) for this call. */
  timeoutMs?: number;
}

/** A reading of {@link Mailvet.verifyBatch}'s progress. */
export interface BatchProgress {
  /** Addresses verified so far (and charged). */
  done: number;
  /** Addresses in the call. */
  total: number;
  /**
   * Set while a request refused for the per-minute rate limit (or answered 503 with Retry-After)
   * waits to be sent again: when it will be.
   */
  waitingUntil?: Date;
  /** The per-minute limit a rate-limit refusal named. */
  rateLimit?: number;
  /**
   * Set on the first wait that leaves more than a minute's worth of the rate limit to go: how long
   * the rest takes at this pace, and that a bulk list (`lists.upload`) verifies large inputs
   * without the per-minute limit (docs/lists.md).
   */
  hint?: string;
}

/** The options of {@link Mailvet.verifyBatch}. */
export interface BatchOptions extends CallOptions {
  /**
   * Called after each request is answered and before each wait for the rate limit. Without it, a
   * wait that leaves more than a minute's worth of the rate limit to go is told once with
   * `console.warn`, with the hint to use a bulk list.
   */
  onProgress?: (progress: BatchProgress) => void;
}

/** The options of {@link Mailvet.verifyAsync}. */
/** The options of `keys.create`. */
export interface CreateKeyOptions extends CallOptions {
  /** `"live"` (the default) or `"sandbox"` (docs/sandbox.md). */
  mode?: "live" | "sandbox";
}

export interface VerifyAsyncOptions extends CallOptions {
  /** The https URL the result is POSTed to (docs/api.md, "URL rules"). */
  webhookUrl: string;
  /** Key of the callback's X-Service-Signature; 8 characters or more. */
  webhookSecret?: string;
}

/** The filters of {@link Mailvet.deliveries}. */
export interface DeliveryFilter {
  status?: Delivery["state"];
  /** Page size, 1–100 (default 20). */
  limit?: number;
  /** The `next_cursor` of the previous page. */
  cursor?: string;
}

/** The paging of {@link Mailvet.audit}`.list`, as the Go client's AuditQuery. */
export interface AuditQuery {
  /** Page size, 1–200 (default 50). */
  limit?: number;
  /** The `next_cursor` of the previous page. */
  cursor?: string;
}

/** A file to upload as a list: text, bytes, or a stream of bytes (read once, never buffered whole). */
export type ListBody = string | Blob | Uint8Array | ArrayBuffer | ReadableStream<Uint8Array>;

/** The options of {@link Mailvet.lists}`.upload` (docs/lists.md, "Uploading"). */
export interface ListUploadOptions extends CallOptions {
  /** How the API reads the file: `csv` (the default; a header row), `ndjson` (an object with a string `email` a line) or `text` (an address a line). */
  format?: "csv" | "ndjson" | "text";
  /** CSV: the email column's name (case-insensitive); by default the API picks it. */
  column?: string;
  /** Your name for the list: up to 200 characters, no control or bidirectional control characters. */
  name?: string;
  /** The https URL called when the list completes or fails (docs/lists.md, "The completion callback"). */
  webhookUrl?: string;
  /** Signs the callback; sent as the `Mailvet-Webhook-Secret` header, never in the URL. */
  webhookSecret?: string;
}

/** The options of {@link Mailvet.lists}`.list`. */
export interface ListsFilter {
  /** Page size, 1–100 (default 20). */
  limit?: number;
  /** The `next_cursor` of the previous page. */
  cursor?: string;
}

/** The options of {@link Mailvet.lists}`.results`. */
export interface ListResultsOptions extends CallOptions {
  /** `csv` (the default): the input's columns, then the result's; `ndjson`: the input's fields and `result`. */
  format?: "csv" | "ndjson";
  /** Only the rows verified with one of these statuses. */
  status?: VerifyResult["status"] | readonly VerifyResult["status"][];
  /**
   * CSV only. `true` (the default, the API's own): cells a spreadsheet would run as formulas
   * (starting with `=`, `+`, `-`, `@`, a tab or a carriage return) come with an apostrophe before
   * them. `false` asks for the cells exactly as stored (`escape_formulas=false`), for a program
   * that reads the file (docs/lists.md, "Formula cells").
   */
  escapeFormulas?: boolean;
}

/** The options of {@link Mailvet.lists}`.wait`. */
export interface ListWaitOptions extends CallOptions {
  /** Time between two readings of the list, in ms. Default 1,000, also for 0 or less. */
  pollMs?: number;
  /** Called with every reading, the last one included. */
  onProgress?: (list: List) => void;
}

/** The list states after which nothing changes: completed, canceled, failed. */
export const finalListStates: readonly List["state"][] = ["completed", "canceled", "failed"];

const listContentTypes = { csv: "text/csv", ndjson: "application/x-ndjson", text: "text/plain" } as const;

type KeyKind = "standard" | "provisioning";

interface Call extends CallOptions {
  method: "GET" | "POST" | "DELETE";
  path: string;
  key: KeyKind;
  body?: unknown;
  /** Rate-limit units the request needs: a 429 whose limit is smaller can never pass, so it is not retried. */
  units?: number;
  stream?: boolean;
  /** A file body sent as it is, instead of JSON; a request carrying a ReadableStream is never retried. */
  upload?: { body: ListBody; contentType: string; headers: Record<string, string> };
  /**
   * The request verifies or creates something (a verification, single, async or batch; a list, a
   * key, a portal session): it carries an Idempotency-Key, one per request and the same on every
   * retry, so the API runs and bills it once (docs/api.md, "Idempotency"). The stream route takes
   * none.
   */
  idempotent?: boolean;
  /** Called before a wait for a retry, with when it ends and the error that caused it. */
  onWait?: (until: Date, err: MailvetError) => void;
  /** The most of a JSON answer read ({@link maxAnswer} unless set; the export sets none). */
  maxBody?: number;
}

interface Deadline {
  signal: AbortSignal;
  timedOut(): boolean;
  /** Stops the timeout but keeps the caller's signal connected (a download being read). */
  stopTimer(): void;
  done(): void;
}

/**
 * Mailvet is a client of the Mailvet API. Keep keys on servers: never ship them to a browser or
 * app (docs/api.md, "Authentication").
 *
 * ```ts
 * const mv = new Mailvet({ baseUrl: "http://localhost:8080", apiKey: process.env.MAILVET_API_KEY, retryOnRateLimit: true });
 * const r = await mv.verify("ann@acme.example");
 * ```
 */
export class Mailvet {
  readonly #base: string;
  readonly #apiKey: string | undefined;
  readonly #provisioningKey: string | undefined;
  readonly #retry: boolean;
  readonly #maxRetries: number;
  readonly #timeoutMs: number;
  readonly #streamTimeoutMs: number;
  readonly #fetch: typeof globalThis.fetch;

  constructor(options: MailvetOptions) {
    if (!options || typeof options.baseUrl !== "string" || !/^https?:\/\//.test(options.baseUrl)) {
      throw new TypeError("Mailvet: baseUrl must be an http(s) URL, e.g. http://localhost:8080");
    }
    this.#base = options.baseUrl.replace(/\/+$/, "");
    this.#apiKey = checkedKey("apiKey", options.apiKey);
    this.#provisioningKey = checkedKey("provisioningKey", options.provisioningKey);
    this.#retry = options.retryOnRateLimit ?? false;
    this.#maxRetries = Math.max(0, options.maxRetries ?? 3);
    this.#timeoutMs = options.timeoutMs ?? 60_000;
    this.#streamTimeoutMs = options.streamTimeoutMs ?? 130_000;
    const f = options.fetch ?? globalThis.fetch;
    if (typeof f !== "function") throw new TypeError("Mailvet: no fetch in this runtime; pass options.fetch");
    // Browsers refuse a fetch called as a method of another object, so it is bound here.
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /**
   * Verifies one address and waits for the result (POST /v1/email/verify). It sends no
   * Idempotency-Key: the key would have the API keep the answer for 24 hours and cost the fastest
   * call two database round trips, to spare a rare double charge of one address.
   */
  verify(email: string, options: CallOptions = {}): Promise<VerifyResult> {
    return this.#json<VerifyResult>({ ...options, method: "POST", path: "/v1/email/verify", key: "standard", body: { email }, units: 1 });
  }

  /**
   * Verifies one address asynchronously: the API answers at once with a job id and POSTs the
   * result, signed when `webhookSecret` is set, to `webhookUrl` (docs/api.md, "Asynchronous
   * verification"). {@link job} reads the job's state.
   */
  verifyAsync(email: string, options: VerifyAsyncOptions): Promise<AsyncAccepted> {
    const { webhookUrl, webhookSecret, ...call } = options ?? ({} as VerifyAsyncOptions);
    if (typeof webhookUrl !== "string" || webhookUrl === "") {
      return Promise.reject(new TypeError("Mailvet.verifyAsync: options.webhookUrl is required"));
    }
    const body: Record<string, string> = { email, webhook_url: webhookUrl };
    if (webhookSecret !== undefined) body.webhook_secret = webhookSecret;
    return this.#json<AsyncAccepted>({ ...call, method: "POST", path: "/v1/email/verify", key: "standard", body, units: 1, idempotent: true });
  }

  /** An asynchronous job's state and, once finished, its result (GET /v1/email/jobs/{job_id}). */
  job(id: string, options: CallOptions = {}): Promise<Job> {
    return this.#json<Job>({ ...options, method: "GET", path: `/v1/email/jobs/${encodeURIComponent(id)}`, key: "standard" });
  }

  /**
   * Verifies any number of addresses with POST /v1/email/verify/batch, 50 per request, one
   * request after the other, and returns one result per address in input order. An error stops
   * the batch and is thrown, carrying in `results` the results already verified (and charged);
   * with `retryOnRateLimit`, a 429 in the middle is waited out and the batch goes on.
   *
   * At the plan's pace a long list takes long (a free tier's 10 a minute: 110 addresses, 11
   * minutes): `onProgress` reports each answer and each wait, and large inputs belong in a bulk
   * list ({@link Mailvet.lists}`.upload`), which is not held to the per-minute limit.
   */
  async verifyBatch(emails: readonly string[], options: BatchOptions = {}): Promise<VerifyResult[]> {
    const { onProgress, ...callOptions } = options;
    const results: VerifyResult[] = [];
    let size = batchChunkSize;
    let hinted = false;
    const onWait = (until: Date, err: MailvetError): void => {
      const p: BatchProgress = { done: results.length, total: emails.length, waitingUntil: until };
      if (err.limit !== undefined) p.rateLimit = err.limit;
      if (err.error === "rate_limit_exceeded" && err.limit !== undefined && err.limit > 0 && !hinted) {
        const left = emails.length - results.length;
        const minutes = Math.ceil(left / err.limit);
        if (minutes > 1) {
          hinted = true;
          p.hint = `Mailvet: verifyBatch: ${left} addresses are left at the plan's rate limit of ${err.limit} a minute: about ${minutes} minutes; ` +
            "for large inputs upload a bulk list instead (mailvet.lists.upload, docs/lists.md), which is not held to the per-minute limit";
          if (onProgress === undefined) console.warn(p.hint);
        }
      }
      onProgress?.(p);
    };
    for (let i = 0; i < emails.length; ) {
      const chunk = emails.slice(i, i + size);
      let answer: BatchResult;
      try {
        answer = await this.#json<BatchResult>({ ...callOptions, method: "POST", path: "/v1/email/verify/batch", key: "standard", body: { emails: chunk }, units: chunk.length, idempotent: true, onWait });
      } catch (err) {
        const smaller = this.#splitSize(err, chunk.length);
        if (smaller === undefined) {
          if (err instanceof MailvetError) err.results = results;
          throw err;
        }
        size = smaller;
        continue;
      }
      if (!Array.isArray(answer?.results) || answer.results.length !== chunk.length) {
        const err = clientError("invalid_response", `a batch of ${chunk.length} addresses was answered with ${answer?.results?.length ?? "no"} results`, 200);
        err.results = results; // the earlier requests' results, verified and charged, as for any error
        throw err;
      }
      results.push(...answer.results);
      i += chunk.length;
      onProgress?.({ done: results.length, total: emails.length });
    }
    return results;
  }

  /**
   * Verifies any number of addresses with POST /v1/email/verify/stream, 1,000 per request, one
   * request after the other, and yields each result as its NDJSON line arrives — in completion
   * order, not input order. Each result's `index` is the position in `emails` of the address it
   * answers (the line's index plus the addresses of the requests before it): match on it, not on
   * `email`, which is the normalised address, the same for inputs that differ only in the
   * domain's case or in surrounding blanks and for an address given twice (docs/api.md, "Verify a
   * stream"). A line whose index is missing, outside its request or already answered is thrown as
   * an `invalid_response`. A stream that ends with an error line throws a MailvetError whose
   * `emails` are every address without a result, including those of requests not sent yet: send
   * them again. Breaking out of the loop cancels the request.
   */
  async *verifyStream(emails: readonly string[], options: CallOptions = {}): AsyncGenerator<StreamResult, void, undefined> {
    let size = streamChunkSize;
    for (let i = 0; i < emails.length; ) {
      const chunk = emails.slice(i, i + size);
      let opened: { res: Response; deadline: Deadline };
      try {
        opened = await this.#send({ ...options, method: "POST", path: "/v1/email/verify/stream", key: "standard", body: { emails: chunk }, units: chunk.length, stream: true });
      } catch (err) {
        const smaller = this.#splitSize(err, chunk.length);
        if (smaller === undefined) throw err;
        size = smaller;
        continue;
      }
      yield* this.#lines(opened.res, opened.deadline, options.signal, emails, i, chunk.length);
      i += chunk.length;
    }
  }

  /** The account's tier, billing state, limits and usage (GET /v1/management/account). */
  account(options: CallOptions = {}): Promise<Account> {
    return this.#json<Account>({ ...options, method: "GET", path: "/v1/management/account", key: "provisioning" });
  }

  /**
   * Deletes the account and everything stored for it (DELETE /v1/management/account;
   * docs/personal-data.md, "Deleting an account"). `accountId` must be the account's id, as
   * {@link account} returns it: any other is refused with `invalid_request`. Every key of the
   * account stops working at once, so a retry of a deletion that committed (its answer lost, with
   * `retryOnRateLimit`) is thrown as `invalid_api_key`: a wrong key answers the same, so the client
   * does not report the account deleted.
   * An account paying for a subscription is refused with `subscription_active` (409).
   */
  async deleteAccount(accountId: string, options: CallOptions = {}): Promise<void> {
    await this.#json<unknown>({ ...options, method: "DELETE", path: "/v1/management/account", key: "provisioning", body: { confirm: accountId } });
  }

  /**
   * Everything the account stores, as one JSON document (GET /v1/management/account/export;
   * docs/personal-data.md, "Export"): the account, users, keys' metadata, jobs, lists' metadata,
   * deliveries' metadata, the result snapshots still kept and the monthly counts, each list capped
   * at 100,000 entries (a list cut there is named in `truncated`).
   */
  exportAccount(options: CallOptions = {}): Promise<AccountExport> {
    return this.#json<AccountExport>({ ...options, method: "GET", path: "/v1/management/account/export", key: "provisioning", maxBody: Infinity });
  }

  /**
   * Deletes what the account stores of one address, for a data subject's request
   * (DELETE /v1/email/history; docs/personal-data.md, "One address's results"), and resolves to
   * the counts of what was removed. Work still running keeps the address until it finishes.
   */
  deleteHistory(email: string, options: CallOptions = {}): Promise<HistoryDeleted> {
    return this.#json<HistoryDeleted>({ ...options, method: "DELETE", path: "/v1/email/history?" + new URLSearchParams({ email }).toString(), key: "standard" });
  }

  /** The account's standard keys (GET, POST /v1/management/keys, DELETE /v1/management/keys/{id}). */
  readonly keys = {
    /** The active standard keys, oldest first, masked. */
    list: (options: CallOptions = {}): Promise<KeyList> =>
      this.#json<KeyList>({ ...options, method: "GET", path: "/v1/management/keys", key: "provisioning" }),
    /**
     * Creates a standard key; its `key` is shown only in this answer. `mode: "sandbox"` makes a
     * sandbox key (`sk_test_…`), answered from the magic addresses of docs/sandbox.md and never
     * billed; the default is a live key.
     */
    create: (label: string, options: CreateKeyOptions = {}): Promise<CreatedKey> => {
      const { mode, ...call } = options;
      const body = mode === undefined ? { label } : { label, mode };
      return this.#json<CreatedKey>({ ...call, method: "POST", path: "/v1/management/keys", key: "provisioning", body, idempotent: true });
    },
    /**
     * Revokes a standard key, effective at once. When an attempt's answer was lost and the retry is
     * answered `key_not_found`, the lost attempt revoked it, and this resolves.
     */
    revoke: async (id: string, options: CallOptions = {}): Promise<void> => {
      await this.#json<unknown>({ ...options, method: "DELETE", path: `/v1/management/keys/${encodeURIComponent(id)}`, key: "provisioning" });
    },
  };

  /** Billable verifications per UTC day for the last 30 days (GET /v1/management/usage). */
  usage(options: CallOptions = {}): Promise<DailyUsage> {
    return this.#json<DailyUsage>({ ...options, method: "GET", path: "/v1/management/usage", key: "provisioning" });
  }

  /** Usage of the current UTC month against the plan (GET /v1/management/usage/summary). */
  usageSummary(options: CallOptions = {}): Promise<UsageSummary> {
    return this.#json<UsageSummary>({ ...options, method: "GET", path: "/v1/management/usage/summary", key: "provisioning" });
  }

  /** Opens a Stripe billing portal session that sends the customer back to returnUrl (POST /v1/management/billing/portal). */
  billingPortal(returnUrl: string, options: CallOptions = {}): Promise<BillingPortalResponse> {
    return this.#json<BillingPortalResponse>({ ...options, method: "POST", path: "/v1/management/billing/portal", key: "provisioning", body: { return_url: returnUrl }, idempotent: true });
  }

  /** Webhook deliveries and their attempts (GET /v1/management/deliveries, POST …/{id}/retry). */
  readonly deliveries = {
    /** One page of deliveries, newest first; pass its `next_cursor` as `cursor` for the next. */
    list: (filter: DeliveryFilter = {}, options: CallOptions = {}): Promise<DeliveryPage> => {
      const q = new URLSearchParams();
      if (filter.status !== undefined) q.set("status", filter.status);
      if (filter.limit !== undefined) q.set("limit", String(filter.limit));
      if (filter.cursor !== undefined) q.set("cursor", filter.cursor);
      const qs = q.toString();
      return this.#json<DeliveryPage>({ ...options, method: "GET", path: "/v1/management/deliveries" + (qs ? "?" + qs : ""), key: "provisioning" });
    },
    /** Every delivery matching filter, newest first, fetching pages as the loop needs them. */
    all: (filter: Omit<DeliveryFilter, "cursor"> = {}, options: CallOptions = {}): AsyncGenerator<Delivery, void, undefined> =>
      this.#allDeliveries(filter, options),
    /** Builder and scale: sends a failed delivery again, with the same bytes and signature. */
    retry: (id: string, options: CallOptions = {}): Promise<RetryDeliveryResponse> =>
      this.#json<RetryDeliveryResponse>({ ...options, method: "POST", path: `/v1/management/deliveries/${encodeURIComponent(id)}/retry`, key: "provisioning" }),
  };

  /**
   * The account's audit log of security events (GET /v1/management/audit; docs/security.md,
   * "Audit log"): sign-ins, key and password changes, plan and spend-cap changes, newest first.
   * The Go client's AuditEvents.
   */
  readonly audit = {
    /** One page of events, newest first; pass its `next_cursor` as `cursor` for the next. */
    list: (query: AuditQuery = {}, options: CallOptions = {}): Promise<AuditPage> => {
      const q = new URLSearchParams();
      if (query.limit !== undefined) q.set("limit", String(query.limit));
      if (query.cursor !== undefined) q.set("cursor", query.cursor);
      const qs = q.toString();
      return this.#json<AuditPage>({ ...options, method: "GET", path: "/v1/management/audit" + (qs ? "?" + qs : ""), key: "provisioning" });
    },
    /** Every event, newest first, fetching pages (of `limit`) as the loop needs them. */
    all: (query: Omit<AuditQuery, "cursor"> = {}, options: CallOptions = {}): AsyncGenerator<AuditEvent, void, undefined> =>
      this.#allAudit(query, options),
  };

  /**
   * Bulk lists (docs/lists.md): upload a file, follow its progress, download its rows with their
   * results. The list routes take the standard key.
   */
  readonly lists = {
    /**
     * Uploads a file as a list (POST /v1/email/lists) and resolves to the list, queued or
     * running. The body is sent as it is; a ReadableStream is streamed, never held whole. With
     * `retryOnRateLimit`, a string, Blob, Uint8Array or ArrayBuffer body is sent again after a 503
     * or a network failure, with the same Idempotency-Key, so the API stores the list once; a
     * ReadableStream is never retried, because a stream cannot be sent twice (the per-minute rate
     * limit does not apply to lists anyway). No timeout applies unless `timeoutMs` is given: the
     * API answers once it has read the whole file. A file the API cannot read is a MailvetError
     * `invalid_request` whose `line` is the line at fault.
     */
    upload: (body: ListBody, options: ListUploadOptions = {}): Promise<List> => {
      const { format = "csv", column, name, webhookUrl, webhookSecret, ...call } = options;
      const contentType = listContentTypes[format];
      if (contentType === undefined) return Promise.reject(new TypeError(`Mailvet.lists.upload: format must be csv, ndjson or text, not ${String(format)}`));
      const q = new URLSearchParams();
      if (column !== undefined) q.set("column", column);
      if (name !== undefined) q.set("name", name);
      if (webhookUrl !== undefined) q.set("webhook_url", webhookUrl);
      const headers: Record<string, string> = {};
      // A header rather than the query string, which ends up in proxy logs (docs/lists.md).
      if (webhookSecret !== undefined) headers["Mailvet-Webhook-Secret"] = webhookSecret;
      const qs = q.toString();
      return this.#json<List>({ timeoutMs: 0, ...call, method: "POST", path: "/v1/email/lists" + (qs ? "?" + qs : ""), key: "standard", upload: { body, contentType, headers }, idempotent: true });
    },
    /** A list's state, counts, progress, rate and ETA (GET /v1/email/lists/{id}). */
    get: (id: string, options: CallOptions = {}): Promise<List> =>
      this.#json<List>({ ...options, method: "GET", path: `/v1/email/lists/${encodeURIComponent(id)}`, key: "standard" }),
    /** One page of the account's lists, newest first (GET /v1/email/lists). */
    list: (filter: ListsFilter = {}, options: CallOptions = {}): Promise<ListPage> => {
      const q = new URLSearchParams();
      if (filter.limit !== undefined) q.set("limit", String(filter.limit));
      if (filter.cursor !== undefined) q.set("cursor", filter.cursor);
      const qs = q.toString();
      return this.#json<ListPage>({ ...options, method: "GET", path: "/v1/email/lists" + (qs ? "?" + qs : ""), key: "standard" });
    },
    /**
     * The list's rows with their results, in input order (GET /v1/email/lists/{id}/results), as
     * the response's byte stream: read it, or cancel it. `timeoutMs` (default the client's
     * `timeoutMs`) bounds the time until the download starts; the signal bounds the reading. A
     * download the server could not finish errors the stream instead of ending it. An escaped CSV
     * (the default) begins with UTF-8's byte-order mark, for spreadsheets (docs/lists.md, "Results").
     */
    results: (id: string, options: ListResultsOptions = {}): Promise<ReadableStream<Uint8Array>> => this.#results(id, options),
    /**
     * The same as `results`, read whole into a string: for lists small enough to hold in memory.
     * UTF-8 decoding leaves the CSV's byte-order mark out, so the string begins with the header.
     */
    resultsText: async (id: string, options: ListResultsOptions = {}): Promise<string> =>
      new Response(await this.#results(id, options)).text(),
    /** Stops a queued or running list; resolves to it, canceled. A finished list is `list_finished` (409). */
    cancel: (id: string, options: CallOptions = {}): Promise<List> =>
      this.#json<List>({ ...options, method: "POST", path: `/v1/email/lists/${encodeURIComponent(id)}/cancel`, key: "standard" }),
    /**
     * Deletes a list's rows, results and counts for good; a running list is canceled first. When
     * an attempt's answer was lost and the retry is answered `list_not_found`, the lost attempt
     * deleted it, and this resolves.
     */
    delete: async (id: string, options: CallOptions = {}): Promise<void> => {
      await this.#json<unknown>({ ...options, method: "DELETE", path: `/v1/email/lists/${encodeURIComponent(id)}`, key: "standard" });
    },
    /**
     * Reads the list every `pollMs` until it is completed, canceled or failed, and resolves to
     * that reading: check its `state`. The signal aborts the wait.
     */
    wait: async (id: string, options: ListWaitOptions = {}): Promise<List> => {
      const { pollMs: asked, onProgress, ...call } = options;
      // 0 or less (or NaN) is the default, as for the Go client's WaitList: not reads in a loop
      // without a pause.
      const pollMs = asked !== undefined && asked > 0 ? asked : 1000;
      for (;;) {
        const l = await this.lists.get(id, call);
        onProgress?.(l);
        if (finalListStates.includes(l.state)) return l;
        await sleep(pollMs, call.signal);
      }
    },
  };

  async #results(id: string, options: ListResultsOptions): Promise<ReadableStream<Uint8Array>> {
    const { format = "csv", status, escapeFormulas, ...call } = options;
    const q = new URLSearchParams({ format });
    if (status !== undefined) q.set("status", typeof status === "string" ? status : status.join(","));
    if (escapeFormulas === false) q.set("escape_formulas", "false");
    const get: Call = { ...call, method: "GET", path: `/v1/email/lists/${encodeURIComponent(id)}/results?${q}`, key: "standard" };
    const { res, deadline } = await this.#send(get);
    deadline.stopTimer();
    if (!res.body) {
      deadline.done();
      throw clientError("invalid_response", "the results response has no body", res.status, requestIdOf(res));
    }
    const reader = res.body.getReader();
    const fail = (err: unknown) => this.#transportError(err, call.signal, deadline, this.#what(get), requestIdOf(res));
    return new ReadableStream<Uint8Array>({
      async pull(ctl) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await reader.read();
        } catch (err) {
          deadline.done();
          ctl.error(fail(err));
          return;
        }
        if (chunk.done) {
          deadline.done();
          ctl.close();
        } else {
          ctl.enqueue(chunk.value);
        }
      },
      async cancel(reason) {
        deadline.done();
        await reader.cancel(reason).catch(() => undefined);
      },
    });
  }

  async *#allDeliveries(filter: Omit<DeliveryFilter, "cursor">, options: CallOptions): AsyncGenerator<Delivery, void, undefined> {
    const seen = new Set<string>();
    let cursor: string | undefined;
    do {
      const page: DeliveryPage = await this.deliveries.list(cursor === undefined ? filter : { ...filter, cursor }, options);
      yield* page.deliveries;
      cursor = nextCursor(seen, page.next_cursor, "/v1/management/deliveries");
    } while (cursor);
  }

  async *#allAudit(query: Omit<AuditQuery, "cursor">, options: CallOptions): AsyncGenerator<AuditEvent, void, undefined> {
    const seen = new Set<string>();
    let cursor: string | undefined;
    do {
      const page: AuditPage = await this.audit.list(cursor === undefined ? query : { ...query, cursor }, options);
      yield* page.events;
      cursor = nextCursor(seen, page.next_cursor, "/v1/management/audit");
    } while (cursor);
  }

  // #splitSize says how small a refused chunk must be split when a 429 names a per-minute limit
  // below its size: such a request can never pass (docs/api.md, "Metering"), however long one waits.
  #splitSize(err: unknown, size: number): number | undefined {
    if (!this.#retry || !(err instanceof MailvetError) || err.error !== "rate_limit_exceeded") return undefined;
    return err.limit !== undefined && err.limit >= 1 && err.limit < size ? err.limit : undefined;
  }

  async #json<T>(call: Call): Promise<T> {
    const { res, deadline } = await this.#send(call);
    const limit = call.maxBody ?? maxAnswer;
    let text: string;
    let whole: boolean;
    try {
      ({ text, whole } = await readUpTo(res, limit));
    } catch (err) {
      throw this.#transportError(err, call.signal, deadline, this.#what(call));
    } finally {
      deadline.done();
    }
    if (!whole) {
      throw clientError("invalid_response", `HTTP ${res.status} with an answer larger than ${limit >> 20} MiB, which no answer of the API's is`, res.status, requestIdOf(res));
    }
    if (text === "") {
      // Only the API's 204s have no body; an empty 200 is a proxy's or a portal's, not an answer.
      if (res.status === 204) return undefined as T;
      throw clientError("invalid_response", `HTTP ${res.status} with an empty body`, res.status, requestIdOf(res));
    }
    try {
      return JSON.parse(text) as T;
    } catch (err) {
      throw clientError("invalid_response", `HTTP ${res.status} with a body that is not JSON`, res.status, { cause: err, ...requestIdOf(res) });
    }
  }

  // #send makes the request, retrying as the options say, and returns the first 2xx response with
  // its deadline still running (the caller reads the body, then calls deadline.done()).
  async #send(call: Call): Promise<{ res: Response; deadline: Deadline }> {
    const key = call.key === "standard" ? this.#apiKey : this.#provisioningKey;
    if (!key) {
      throw new TypeError(call.key === "standard"
        ? "Mailvet: this call needs a standard key (sk_live_…, or sandbox sk_test_…): pass options.apiKey"
        : "Mailvet: this call needs a provisioning key (sk_mgmt_…): pass options.provisioningKey");
    }
    const headers: Record<string, string> = {
      Authorization: `Bearer ${key}`,
      Accept: call.stream ? "application/x-ndjson" : "application/json",
    };
    let body: ListBody | undefined;
    if (call.upload !== undefined) {
      Object.assign(headers, call.upload.headers);
      headers["Content-Type"] = call.upload.contentType;
      body = call.upload.body;
    } else if (call.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(call.body);
    }
    // One key per call, sent on every attempt of it.
    if (call.idempotent) headers["Idempotency-Key"] = newIdempotencyKey();
    const timeout = call.timeoutMs ?? (call.stream ? this.#streamTimeoutMs : this.#timeoutMs);
    // An upload's body that is a stream is read as it is sent, once: it cannot be sent again.
    const replayable = !(body instanceof ReadableStream);
    // An earlier attempt may have reached the server, and its answer was lost.
    let maybeSent = false;
    for (let attempt = 0; ; attempt++) {
      const deadline = startDeadline(call.signal, timeout);
      let res: Response;
      try {
        const init: RequestInit & { duplex?: "half" } = { method: call.method, headers, signal: deadline.signal };
        if (body !== undefined) init.body = body as BodyInit;
        // Node's fetch sends a stream only half-duplex, and says so only when asked to.
        if (body instanceof ReadableStream) init.duplex = "half";
        res = await this.#fetch(this.#base + call.path, init);
      } catch (err) {
        deadline.done();
        const failure = this.#transportError(err, call.signal, deadline, this.#what(call));
        const sent = !refused(err);
        // A request that may have reached the server is sent again only when a repeat does
        // nothing more: a read or a delete, or a POST with an Idempotency-Key (docs/clients.md,
        // "Network failures"). One whose connection was refused was never sent.
        if (!this.#retry || attempt >= this.#maxRetries || !replayable || !networkFailure(err, call.signal, deadline) ||
          (sent && call.method === "POST" && !call.idempotent)) throw failure;
        maybeSent ||= sent;
        const wait = transportRetryMs * 2 ** Math.min(attempt, 6);
        await sleep(wait + jitter(wait), call.signal);
        continue;
      }
      if (res.ok) return { res, deadline };
      let err: MailvetError;
      try {
        err = await errorFrom(res);
      } catch (readErr) {
        throw this.#transportError(readErr, call.signal, deadline, this.#what(call));
      } finally {
        deadline.done();
      }
      if (maybeSent && call.method === "DELETE" && err.status === 404 && (err.error === "key_not_found" || err.error === "list_not_found")) {
        // The lost attempt revoked the key or deleted the list: the call did what was asked
        // (docs/clients.md, "Network failures").
        return { res: new Response(null, { status: 204 }), deadline };
      }
      let wait = replayable ? this.#retryDelay(err, attempt, call) : undefined;
      if (wait === undefined || wait > maxRetryWaitMs) throw err;
      wait += jitter(wait);
      call.onWait?.(new Date(Date.now() + wait), err);
      await sleep(wait, call.signal);
    }
  }

  // #retryDelay is how long to wait before retrying after err, or undefined when err is final:
  // retries are off or used up, the error is not one a wait can cure, the request needs more
  // rate-limit units than the account's whole per-minute limit, or it is a 503 to a request that
  // may have acted and must not be repeated (repeatable).
  #retryDelay(err: MailvetError, attempt: number, call: Call): number | undefined {
    if (!this.#retry || attempt >= this.#maxRetries) return undefined;
    const units = call.units;
    if (err.status === 429 && err.error === "rate_limit_exceeded") {
      if (units !== undefined && err.limit !== undefined && units > err.limit) return undefined;
      const reset = err.reset_at === undefined ? NaN : Date.parse(err.reset_at);
      if (!Number.isNaN(reset)) return Math.max(0, reset - Date.now()) + retryCushionMs;
      if (err.retryAfter !== undefined) return err.retryAfter * 1000 + retryCushionMs;
      return undefined;
    }
    if (err.status === 503 && err.retryAfter !== undefined && repeatable(call, err)) return err.retryAfter * 1000 + retryCushionMs;
    // The call's first attempt is still running on the server: the same key, sent again after
    // Retry-After, gets its answer (docs/api.md, "Idempotency").
    if (err.status === 409 && err.error === "idempotency_key_in_use" && call.idempotent) return Math.max(err.retryAfter ?? 1, 1) * 1000 + retryCushionMs;
    return undefined;
  }

  // #transportError is the error of a request that got no complete answer; what names the
  // request ("POST https://…/v1/email/verify", #what) for the message.
  // ids is the answer's request id when one had begun (a stream or a download cut short), so that
  // the failure can be quoted to support like any other, and for a stream cut short the inputs it
  // left without a result.
  #transportError(err: unknown, signal: AbortSignal | undefined, deadline: Deadline, what: string, ids: ErrorExtra = {}): unknown {
    if (signal?.aborted) return signal.reason;
    if (deadline.timedOut()) return clientError("timeout", `${what} timed out.`, 0, { cause: err, ...ids });
    if (err instanceof MailvetError) return err;
    return clientError("network_error", `${what} failed: ${causes(err)}`, 0, { cause: err, ...ids });
  }

  // #what leaves out the query: it may hold an address (DELETE /v1/email/history?email=…), which
  // has no place in the caller's logs.
  #what(call: Pick<Call, "method" | "path">): string {
    return `${call.method} ${this.#base}${call.path.split("?")[0]}`;
  }

  // #lines yields the results of one stream response, the request of emails[offset, offset+want),
  // as their lines arrive, each index counted in the caller's input: offset plus the line's own.
  // An error that ends the stream early names the inputs without a result (owed), those of the
  // requests not sent yet included.
  async *#lines(res: Response, deadline: Deadline, signal: AbortSignal | undefined, emails: readonly string[], offset: number, want: number): AsyncGenerator<StreamResult, void, undefined> {
    if (!res.body) {
      deadline.done();
      throw clientError("invalid_response", "the stream response has no body", res.status);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    const ids = requestIdOf(res);
    let buffered = "";
    let got = 0;
    let finished = false;
    const answered = new Uint8Array(want); // 1 at the index of each line received
    // owed lists the positions and addresses without a result, built only once the stream has
    // failed: the request's unanswered ones, then every address after the request, never sent.
    const owedIndexes = (): number[] => {
      const indexes: number[] = [];
      for (let k = 0; k < want; k++) if (!answered[k]) indexes.push(offset + k);
      for (let i = offset + want; i < emails.length; i++) indexes.push(i);
      return indexes;
    };
    const owed = (): { indexes: number[]; emails: string[] } => {
      const indexes = owedIndexes();
      return { indexes, emails: indexes.map((i) => emails[i] as string) };
    };
    const parse = (line: string): StreamResult => {
      let v: unknown;
      try {
        v = JSON.parse(line);
      } catch (err) {
        throw clientError("invalid_response", `a stream line is not JSON: ${line.slice(0, 200)}`, res.status, { cause: err, ...ids });
      }
      if (v && typeof v === "object" && typeof (v as { error?: unknown }).error === "string") {
        // The error line of an incomplete stream (StreamError in openapi.json): the addresses
        // without a result, plus those of later requests, which were never sent.
        const line = v as Record<string, unknown>;
        const indexes = owedIndexes();
        const listed = [...(Array.isArray(line.emails) ? (line.emails as string[]) : []), ...emails.slice(offset + want)];
        throw new MailvetError(res.status, { ...line, emails: listed }, { ...ids, indexes });
      }
      // An index that is missing, outside the request or answered already would match the
      // result to the wrong input: the answer is not the API's (docs/api.md, "Verify a stream").
      const index = (v as { index?: unknown } | null)?.index;
      if (typeof index !== "number" || !Number.isInteger(index) || index < 0 || index >= want || answered[index]) {
        throw clientError("invalid_response", `line ${got + 1} of the stream has index ${JSON.stringify(index) ?? "none"}, not that of an address of the request (${want}) without a result yet`, res.status, ids);
      }
      answered[index] = 1;
      return { ...(v as StreamResult), index: offset + index };
    };
    try {
      for (;;) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await reader.read();
        } catch (err) {
          throw this.#transportError(err, signal, deadline, `POST ${this.#base}/v1/email/verify/stream`, { ...ids, ...owed() });
        }
        if (chunk.done) break;
        buffered += decoder.decode(chunk.value, { stream: true });
        let nl: number;
        while ((nl = buffered.indexOf("\n")) >= 0) {
          const line = buffered.slice(0, nl).trim();
          buffered = buffered.slice(nl + 1);
          if (line === "") continue;
          const r = parse(line);
          got++;
          yield r;
        }
        if (buffered.length > maxStreamLine) {
          // No line of the API's is this long: the answer is not its stream, and reading on
          // would hold all of it in memory until the stream's timeout.
          throw clientError("invalid_response", `a stream line is longer than ${maxStreamLine} characters after ${got} of ${want} results: not the API's stream`, res.status, { ...ids, ...owed() });
        }
      }
      buffered += decoder.decode();
      if (buffered.trim() !== "") {
        // The API ends every line with a newline: a last line without one was cut. Cut inside the
        // JSON, it is the stream's end before its last line, not a malformed answer.
        const text = buffered.trim();
        try {
          JSON.parse(text);
        } catch {
          throw clientError("stream_incomplete", `the stream ended in the middle of a line after ${got} of ${want} results, without an error line`, res.status, { ...ids, ...owed() });
        }
        const last = parse(text);
        yield last;
        got++;
      }
      finished = true;
      if (got !== want) {
        throw clientError("stream_incomplete", `the stream ended after ${got} of ${want} results without an error line`, res.status, { ...ids, ...owed() });
      }
    } finally {
      deadline.done();
      if (!finished) await reader.cancel().catch(() => undefined);
    }
  }
}

// checkedKey is a key as the Authorization header carries it: without the blanks around it (a
// key read from a file ends with a line break, perhaps begins with a byte-order mark), and in
// visible ASCII, as every key is. Any other character would have fetch refuse the header with an
// error that quotes its value, the key, into the caller's logs: the TypeError says where the
// character is, never the key.
function checkedKey(name: string, key: string | undefined): string | undefined {
  if (key === undefined || key === null) return undefined;
  const k = String(key).trim();
  const at = k.search(/[^\x21-\x7e]/);
  if (at >= 0) {
    throw new TypeError(`Mailvet: options.${name} has a character that is not visible ASCII at position ${at + 1} (a line break, a blank or a non-ASCII character): keys are sk_… in visible ASCII; check how it was read`);
  }
  return k;
}

// nextCursor is the cursor of the next page of an all() loop, or undefined after the last page.
// A cursor the loop has already followed would fetch the same pages again forever: it is an
// invalid_response, thrown, instead of a loop that never ends.
function nextCursor(seen: Set<string>, cursor: string | null | undefined, path: string): string | undefined {
  if (cursor === undefined || cursor === null || cursor === "") return undefined;
  if (seen.has(cursor)) {
    throw clientError("invalid_response", `GET ${path} answered a next_cursor it had already answered (${cursor.slice(0, 100)}): paging stopped instead of repeating pages`, 200);
  }
  seen.add(cursor);
  return cursor;
}

// jitter is a random part of a wait, up to a tenth of it and at most a second, added to every wait
// before a retry, so that clients refused together (by an outage's 503, or at the end of a
// rate-limit window they share) do not all come back in the same millisecond.
function jitter(waitMs: number): number {
  return Math.random() * Math.min(waitMs / 10, 1000);
}

/**
 * The wait before the first retry after a network failure, in ms; it doubles on each failure after
 * that (0.5 s, 1 s, 2 s with the default three retries) and gets its jitter like every other wait.
 */
const transportRetryMs = 500;

// networkFailure says whether err, a rejected fetch, is a failure another attempt may cure: the
// client's own timeout, or fetch's network error (a TypeError: refused, reset, closed before the
// answer). Never the caller's abort, nor a request fetch could not make (a malformed URL or
// header: Node's ERR_ codes) or a host name that does not exist (ENOTFOUND).
function networkFailure(err: unknown, signal: AbortSignal | undefined, deadline: Deadline): boolean {
  if (signal?.aborted) return false;
  if (deadline.timedOut()) return true;
  if (!(err instanceof TypeError)) return false;
  return !codesOf(err).some((code) => code.startsWith("ERR_") || code === "ENOTFOUND");
}

// refused says whether err is a connection refused, so that nothing of the request was sent:
// ECONNREFUSED in Node's cause chain (an AggregateError's errors when it tried several addresses).
// A browser's fetch does not say why it failed, so there a failure always counts as sent.
function refused(err: unknown): boolean {
  const codes = codesOf(err);
  return codes.length > 0 && codes.every((code) => code === "ECONNREFUSED");
}

// codesOf is the error codes (Node's err.code) found in err, its causes and, for an
// AggregateError, the errors it gathers.
function codesOf(err: unknown, depth = 0): string[] {
  if (!(err instanceof Error) || depth > 5) return [];
  const codes: string[] = [];
  const code = (err as { code?: unknown }).code;
  if (typeof code === "string") codes.push(code);
  if (err instanceof AggregateError) for (const e of err.errors) codes.push(...codesOf(e, depth + 1));
  codes.push(...codesOf(err.cause, depth + 1));
  return codes;
}

// causes is an error's message followed by those of its causes: Node's fetch says only "fetch
// failed" or "terminated", and the reason (ECONNREFUSED and the address, a reset) is one or two
// causes down, where a log line would never show it.
function causes(err: unknown): string {
  const parts: string[] = [];
  for (let e: unknown = err, depth = 0; e !== undefined && e !== null && depth < 5; depth++) {
    const msg = e instanceof Error ? e.message : String(e);
    if (msg && !parts.includes(msg)) parts.push(msg);
    e = e instanceof Error ? e.cause : undefined;
  }
  return parts.join(": ") || "unknown error";
}

function requestIdOf(res: Response): { requestId?: string } {
  const id = res.headers.get("X-Request-Id");
  return id ? { requestId: id } : {};
}

// repeatable says whether call may be sent again after the 503 err, which can come after the
// request acted (a commit whose answer came too late): a request with an Idempotency-Key (the API
// runs it once, and answers a retry with the first response), a stream (refused ones are never
// charged), a read, a delete or a cancel, but not a delivery replay. What the API promises
// of its own 503s says nothing of another's: a proxy may answer 503 after passing the request on
// and the API verifying or charging, so a POST without a key answered by a 503 that is not the
// API's envelope (http_error) is never sent again.
function repeatable(call: Call, err: MailvetError): boolean {
  if (call.method !== "POST" || call.idempotent) return true;
  if (err.error === "http_error") return false;
  return call.path.startsWith("/v1/email/verify") || call.path.endsWith("/cancel");
}

// newIdempotencyKey makes the key of one call: 128 random bits in hex, from Web Crypto where the
// runtime has it (Node 19+, browsers, Deno, Bun); Node 18 without the global falls back to
// Math.random, whose keys need only be unique among one account's calls of a day.
function newIdempotencyKey(): string {
  const bytes = new Uint8Array(16);
  const c = (globalThis as { crypto?: { getRandomValues?: (a: Uint8Array) => Uint8Array } }).crypto;
  if (c?.getRandomValues) c.getRandomValues(bytes);
  else for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(Math.random() * 256);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date (RFC 9110 §10.2.3).
function parseRetryAfter(v: string | null): number | undefined {
  if (v === null) return undefined;
  const s = v.trim();
  if (/^\d+$/.test(s)) return Number(s);
  const t = Date.parse(s);
  return Number.isNaN(t) ? undefined : Math.max(0, (t - Date.now()) / 1000);
}

/**
 * The most of an error answer the client reads: an envelope is a few hundred bytes, and a proxy's
 * page (or a body that never ends) is no reason to hold more in memory, nor to wait for its end.
 */
const maxErrorBody = 64 << 10;

/**
 * The most of a JSON answer the client reads. The API's largest (a page of 100 lists with their
 * counts, a batch of 100 results) are well under a megabyte; the account's export, which may
 * rightly be larger, is not bounded. More is not the API's answer, and reading on would hold it in
 * memory until the timeout.
 */
const maxAnswer = 32 << 20;

// readUpTo reads res's body as text, at most limit bytes of it, and cancels the rest; whole says
// whether the body ended within the limit.
async function readUpTo(res: Response, limit: number): Promise<{ text: string; whole: boolean }> {
  if (!res.body) return { text: "", whole: true };
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  let whole = false;
  try {
    while (size <= limit) {
      const chunk = await reader.read();
      if (chunk.done) {
        whole = true;
        break;
      }
      chunks.push(chunk.value);
      size += chunk.value.length;
    }
  } finally {
    if (!whole) await reader.cancel().catch(() => undefined);
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    bytes.set(c, at);
    at += c.length;
  }
  return { text: new TextDecoder().decode(size > limit ? bytes.subarray(0, limit) : bytes), whole: whole && size <= limit };
}

// errorFrom turns a non-2xx response into a MailvetError: the API's error envelope with its extra
// fields, or, for a body that is not one (a proxy's error page), an http_error.
async function errorFrom(res: Response): Promise<MailvetError> {
  const { text } = await readUpTo(res, maxErrorBody);
  const extra = { ...requestIdOf(res) } as { retryAfter?: number; requestId?: string };
  const retryAfter = parseRetryAfter(res.headers.get("Retry-After"));
  if (retryAfter !== undefined) extra.retryAfter = retryAfter;
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (body && typeof body === "object" && !Array.isArray(body) && typeof (body as { error?: unknown }).error === "string") {
    return new MailvetError(res.status, body as Record<string, unknown>, extra);
  }
  const snippet = text.trim().slice(0, 200);
  return clientError("http_error", `HTTP ${res.status}${snippet ? ": " + snippet : ""}`, res.status, extra);
}

// startDeadline combines the caller's signal with a timeout into one signal for fetch. It is
// written out rather than AbortSignal.any/timeout, which Node 18 lacks.
function startDeadline(signal: AbortSignal | undefined, ms: number): Deadline {
  const ctl = new AbortController();
  let timedOut = false;
  let timer = ms > 0 ? setTimeout(() => { timedOut = true; ctl.abort(); }, ms) : undefined;
  const onAbort = () => ctl.abort(signal?.reason);
  if (signal?.aborted) ctl.abort(signal.reason);
  else signal?.addEventListener("abort", onAbort, { once: true });
  return {
    signal: ctl.signal,
    timedOut: () => timedOut,
    stopTimer: () => {
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
    },
    done: () => {
      if (timer !== undefined) clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    },
  };
}

// sleep waits ms milliseconds, or rejects with the signal's reason as soon as it aborts.
function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
