// Package webhook verifies the signature Mailvet puts on the asynchronous results it POSTs to a
// caller's webhook URL (docs/api.md, "Signature"; docs/clients.md, "Verifying webhook
// signatures").
//
// When a job is created with a webhook_secret, every delivery carries the header
//
//	X-Service-Signature: sha256=<64 lowercase hex digits>
//
// the HMAC-SHA256 of the exact raw request body keyed with the secret. A receiver reads the body
// as bytes, calls Verify before parsing any JSON, and rejects the request on any error:
//
//	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
//	if err != nil { … }
//	if err := webhook.Verify(body, r.Header.Get(webhook.Header), secret); err != nil {
//		http.Error(w, "bad signature", http.StatusUnauthorized)
//		return
//	}
//
// That scheme has no timestamp. Every signed delivery also carries the Standard Webhooks headers
// webhook-id, webhook-timestamp and webhook-signature (standard.go), whose signature covers the
// attempt's time: VerifyRequest checks whichever scheme a request carries, refusing a timestamp
// more than 5 minutes (DefaultTolerance) from the receiver's clock, and with RequireStandard only
// the standard one, which is what refuses an old request replayed:
//
//	err := webhook.VerifyRequest(r.Header, body, secret, webhook.VerifyOptions{RequireStandard: true})
//
// Deduplicate deliveries on webhook-id, the same on every attempt and every replay of a callback
// (docs/api.md, "The callback request"). This package is the one implementation of both schemes: the service's own webhook
// worker signs with Sign and SignStandard.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// Header is the request header that carries the signature. Header names are case-insensitive;
// http.Header.Get takes care of that on the receiving side.
const Header = "X-Service-Signature"

const prefix = "sha256="

// The errors of Verify. Each means "reject the request"; they are told apart for logs and
// metrics only. Compare with errors.Is.
var (
	// ErrMissing: the request has no signature header (or an empty one). Either the job was
	// created without a webhook_secret or the request did not come from Mailvet.
	ErrMissing = errors.New("webhook: signature header is missing")
	// ErrMalformed: the header is not "sha256=" followed by exactly 64 lowercase hex digits.
	ErrMalformed = errors.New("webhook: signature header is malformed")
	// ErrMismatch: the header is well formed but is not the MAC of this body with this secret
	// (another secret, a body altered or re-serialized on the way, or a forgery).
	ErrMismatch = errors.New("webhook: signature does not match the body")
	// ErrNoSecret: the secret given to check with is empty, so nothing can be verified. Mailvet
	// never signs with an empty secret (a webhook_secret has at least 8 characters), and a MAC
	// keyed with nothing is one anybody can compute: this is a receiver whose secret is not
	// configured (an environment variable unset), and every request is refused.
	ErrNoSecret = errors.New("webhook: the secret to verify with is empty")
)

// Sign returns the X-Service-Signature value for rawBody: "sha256=" and the lowercase hex of
// HMAC-SHA256 keyed with secret over the exact bytes of rawBody. Receivers need it only in their
// own tests, to build signed requests.
func Sign(rawBody []byte, secret string) string {
	return prefix + hex.EncodeToString(mac(rawBody, secret))
}

// Verify checks the X-Service-Signature header of a callback request: rawBody is the request body
// exactly as received, header the header's value (empty when absent) and secret the
// webhook_secret the job was created with. It returns nil only for a genuine signature.
//
// It refuses everything when secret is empty (ErrNoSecret: a receiver whose secret is not
// configured must not accept what anybody can sign with the empty key). It rejects an empty
// header (ErrMissing); a prefix other than "sha256=" and anything after it
// that is not exactly 64 lowercase hex digits (ErrMalformed) — uppercase hex included, on purpose:
// the signature is defined in lowercase, Sign never produces anything else, and a receiver that
// tolerates variants only widens what a forger may send. Then it compares the MACs in constant
// time (ErrMismatch).
func Verify(rawBody []byte, header, secret string) error {
	if secret == "" {
		return ErrNoSecret
	}
	if header == "" {
		return ErrMissing
	}
	hexPart, ok := strings.CutPrefix(header, prefix)
	if !ok || len(hexPart) != 2*sha256.Size {
		return ErrMalformed
	}
	for i := 0; i < len(hexPart); i++ {
		c := hexPart[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return ErrMalformed
		}
	}
	got, err := hex.DecodeString(hexPart)
	if err != nil {
		return ErrMalformed
	}
	if !hmac.Equal(got, mac(rawBody, secret)) {
		return ErrMismatch
	}
	return nil
}

func mac(body []byte, secret string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return m.Sum(nil)
}
