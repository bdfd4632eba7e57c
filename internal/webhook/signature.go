package webhook

import (
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
