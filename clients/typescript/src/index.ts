// @mailvet/client: the official TypeScript client of the Mailvet API (docs/api.md, docs/clients.md).
export { Mailvet, batchChunkSize, streamChunkSize, retryCushionMs, maxRetryWaitMs, finalListStates } from "./client.js";
export type {
  AuditQuery,
  BatchOptions,
  BatchProgress,
  CallOptions,
  CreateKeyOptions,
  DeliveryFilter,
  ListBody,
  ListResultsOptions,
  ListsFilter,
  ListUploadOptions,
  ListWaitOptions,
  MailvetOptions,
  VerifyAsyncOptions,
} from "./client.js";
export { MailvetError } from "./errors.js";
export type { ClientErrorCode, ErrorExtra } from "./errors.js";
export {
  verifyWebhookSignature,
  verifyWebhook,
  verifyStandardWebhookSignature,
  standardWebhookKey,
  constantTimeEqual,
  signatureHeader,
  webhookIdHeader,
  webhookTimestampHeader,
  webhookSignatureHeader,
  defaultToleranceSeconds,
} from "./webhook.js";
export type { BytesLike, HeadersLike, VerifyWebhookOptions } from "./webhook.js";
export type * from "./openapi.js";
export { apiVersion } from "./openapi.js";
