package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers Mailvet sends beside X-Service-Signature (docs/api.md,
// "Signature"). Header names are case-insensitive; http.Header.Get takes care of that.
const (
	// HeaderID is the original delivery's id: the same on every attempt of one delivery and on
	// every replay of it (a replay is a new delivery whose own id is in X-Mailvet-Delivery), so
	// deduplicating on it also catches a replay of a callback already processed.
	HeaderID = "webhook-id"
	// HeaderTimestamp is when this attempt was sent, in Unix seconds.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature is "v1," and the standard base64 of HMAC-SHA256 over
	// "<webhook-id>.<webhook-timestamp>.<raw body>", keyed with StandardKey(secret). A receiver
	// accepts a list of such values separated by spaces, as the scheme allows.
	HeaderSignature = "webhook-signature"
)

// DefaultTolerance is how far webhook-timestamp may be from the receiver's clock, either way,
// when VerifyOptions.Tolerance is zero.
const DefaultTolerance = 5 * time.Minute

// Bounds of what a receiver reads from the Standard Webhooks headers before computing anything.
const (
	maxIDLen        = 256
	maxSignatureLen = 1024
	maxSignatures   = 8
	standardPrefix  = "v1,"
	secretPrefix    = "whsec_"
)

// ErrTimestamp: webhook-timestamp is missing, not a number of Unix seconds, or further from now
// than the tolerance (an old request replayed, or a clock far off).
var ErrTimestamp = errors.New("webhook: webhook-timestamp is missing, malformed or outside the tolerance")

// StandardKey is the HMAC key of the Standard Webhooks signature for a webhook_secret. Standard
// Webhooks writes its secrets as "whsec_" and the base64 of the key bytes, and its libraries
// decode them so. Mailvet does the same for a webhook_secret in that form (it starts with
// "whsec_" and the rest is standard base64 of at least one byte), so such a secret can be given
// as it is to a Standard Webhooks library. Any other webhook_secret is used as its UTF-8 bytes; a
// receiver using such a library then passes it "whsec_" + base64(secret). X-Service-Signature
// always uses the secret's UTF-8 bytes, whatever its form.
func StandardKey(secret string) []byte {
	if rest, ok := strings.CutPrefix(secret, secretPrefix); ok {
		if b, err := base64.StdEncoding.DecodeString(rest); err == nil && len(b) > 0 {
			return b
		}
	}
	return []byte(secret)
}

// SignStandard returns the webhook-signature value of attempt (id, timestamp) of rawBody.
func SignStandard(id string, timestamp int64, rawBody []byte, secret string) string {
	return standardPrefix + base64.StdEncoding.EncodeToString(standardMAC(id, strconv.FormatInt(timestamp, 10), rawBody, StandardKey(secret)))
}

func standardMAC(id, timestamp string, body, key []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// VerifyOptions tune VerifyStandard and VerifyRequest. The zero value is the default.
type VerifyOptions struct {
	// Tolerance is how far webhook-timestamp may be from Now, either way (0: DefaultTolerance).
	Tolerance time.Duration
	// Now is the receiver's clock (nil: time.Now).
	Now func() time.Time
	// RequireStandard makes VerifyRequest refuse a request without the Standard Webhooks headers
	// instead of checking X-Service-Signature. X-Service-Signature has no timestamp, so a
	// receiver that wants replays of old requests refused must set it: Mailvet sends both
	// schemes on every signed delivery made since they exist.
	RequireStandard bool
}

func (o VerifyOptions) window() (time.Time, time.Duration) {
	now, tol := time.Now(), o.Tolerance
	if o.Now != nil {
		now = o.Now()
	}
	if tol <= 0 {
		tol = DefaultTolerance
	}
	return now, tol
}

// VerifyStandard checks the Standard Webhooks headers of a callback: id, timestamp and signature
// are the values of webhook-id, webhook-timestamp and webhook-signature ("" when absent), rawBody
// the body exactly as received and secret the webhook_secret. It returns nil only when the
// timestamp is within the tolerance and one of the signature's "v1," values is the MAC.
//
// Errors: ErrNoSecret (secret is empty: every request is refused), ErrMissing (a header absent), ErrMalformed (an id over 256 bytes, a signature header
// over 1,024 bytes or with more than 8 values, or no well-formed "v1," value), ErrTimestamp, and
// ErrMismatch.
func VerifyStandard(rawBody []byte, id, timestamp, signature, secret string, o VerifyOptions) error {
	if secret == "" {
		return ErrNoSecret
	}
	if id == "" || timestamp == "" || signature == "" {
		return ErrMissing
	}
	if len(id) > maxIDLen || len(signature) > maxSignatureLen {
		return ErrMalformed
	}
	ts, err := parseTimestamp(timestamp)
	if err != nil {
		return err
	}
	now, tol := o.window()
	if d := now.Sub(time.Unix(ts, 0)); d > tol || d < -tol {
		return ErrTimestamp
	}
	want := standardMAC(id, timestamp, rawBody, StandardKey(secret))
	values := strings.Fields(signature)
	if len(values) > maxSignatures {
		return ErrMalformed
	}
	wellFormed := false
	for _, v := range values {
		b64, ok := strings.CutPrefix(v, standardPrefix)
		if !ok {
			continue // another version of the scheme: not ours to judge
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(got) != sha256.Size {
			continue
		}
		wellFormed = true
		if hmac.Equal(got, want) {
			return nil
		}
	}
	if !wellFormed {
		return ErrMalformed
	}
	return ErrMismatch
}

// parseTimestamp reads Unix seconds written as 1 to 12 decimal digits.
func parseTimestamp(s string) (int64, error) {
	if len(s) > 12 {
		return 0, ErrTimestamp
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, ErrTimestamp
		}
	}
	ts, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, ErrTimestamp
	}
	return ts, nil
}

// VerifyRequest checks a callback request with whichever scheme it carries: the Standard
// Webhooks headers when webhook-signature is present (and then only them, so stripping them
// is the only way to reach the older scheme, which RequireStandard closes), else
// X-Service-Signature. header is the request's header, rawBody its body exactly as received.
func VerifyRequest(header http.Header, rawBody []byte, secret string, o VerifyOptions) error {
	if sig := header.Get(HeaderSignature); sig != "" || o.RequireStandard {
		return VerifyStandard(rawBody, header.Get(HeaderID), header.Get(HeaderTimestamp), sig, secret, o)
	}
	return Verify(rawBody, header.Get(Header), secret)
}
