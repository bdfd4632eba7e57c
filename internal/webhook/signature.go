package webhook

import (
	"net/http"
	"time"

	"github.com/mailvet/mailvet/webhook"
)

// The signature scheme has one implementation, the public package github.com/mailvet/mailvet/webhook
// that receivers import (docs/clients.md, "Verifying webhook signatures"); this file only adapts
// it to the argument order the worker and its tests use, so what the service signs and what
// receivers accept can never drift apart.

// SignatureHeader is the request header that carries the signature (docs/api.md, "Signature").
const SignatureHeader = webhook.Header

// Errors of Verify: the public package's, so errors.Is works across both.
var (
	ErrSignatureMissing   = webhook.ErrMissing
	ErrSignatureMalformed = webhook.ErrMalformed
	ErrSignatureMismatch  = webhook.ErrMismatch
)

// Sign returns the X-Service-Signature value for body: "sha256=" and the lowercase hex of
// HMAC-SHA256 keyed with secret over the exact bytes of body (docs/api.md, "Signature").
func Sign(secret, body []byte) string { return webhook.Sign(body, string(secret)) }

// Verify is the receiver's check of a callback (webhook.Verify): header is the X-Service-Signature
// value and body the raw request body as received.
func Verify(secret, body []byte, header string) error {
	return webhook.Verify(body, header, string(secret))
}

// The Standard Webhooks headers, sent beside X-Service-Signature (docs/api.md, "Signature").
const (
	HeaderID        = webhook.HeaderID
	HeaderTimestamp = webhook.HeaderTimestamp
	HeaderSignature = webhook.HeaderSignature
)

// ErrTimestamp: webhook-timestamp is missing, malformed or outside the tolerance.
var ErrTimestamp = webhook.ErrTimestamp

// SignStandard returns the webhook-signature value of one attempt: id is the delivery id (the
// same on every attempt), timestamp the attempt's Unix seconds.
func SignStandard(secret []byte, id string, timestamp int64, body []byte) string {
	return webhook.SignStandard(id, timestamp, body, string(secret))
}

// VerifyWebhook is the receiver's check of a callback request with either scheme
// (webhook.VerifyRequest): the Standard Webhooks headers when present, within tolerance of now
// (0: webhook.DefaultTolerance), else X-Service-Signature.
func VerifyWebhook(secret, body []byte, h http.Header, now time.Time, tolerance time.Duration) error {
	return webhook.VerifyRequest(h, body, string(secret), webhook.VerifyOptions{Tolerance: tolerance, Now: func() time.Time { return now }})
}
