package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// SignatureHeader is the request header that carries the signature (docs/api.md, "Signature"). Header names are
// case-insensitive; http.Header.Get takes care of that on the receiving side.
const SignatureHeader = "X-Service-Signature"

const signaturePrefix = "sha256="

// Errors of Verify. Both mean "reject the request"; they are told apart only for logs.
var (
	ErrSignatureMissing   = errors.New("webhook signature header is missing")
	ErrSignatureMalformed = errors.New("webhook signature header is malformed")
	ErrSignatureMismatch  = errors.New("webhook signature does not match the body")
)

// Sign returns the X-Service-Signature value for body: "sha256=" and the lowercase hex of
// HMAC-SHA256 keyed with secret over the exact bytes of body (docs/api.md, "Signature").
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return signaturePrefix + hex.EncodeToString(m.Sum(nil))
}

// Verify is the receiver's check of a callback: header is the X-Service-Signature value and body
// the raw request body as received. It rejects an empty header, a prefix other than "sha256=",
// and anything after it that is not exactly 64 lowercase hex digits; then it compares the MACs in
// constant time.
//
// Uppercase hex is rejected on purpose: the signature is defined in lowercase, Sign never produces anything
// else, and a receiver that tolerates variants only widens what a forger may send.
func Verify(secret, body []byte, header string) error {
	if header == "" {
		return ErrSignatureMissing
	}
	hexPart, ok := strings.CutPrefix(header, signaturePrefix)
	if !ok || len(hexPart) != 2*sha256.Size {
		return ErrSignatureMalformed
	}
	for i := 0; i < len(hexPart); i++ {
		c := hexPart[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return ErrSignatureMalformed
		}
	}
	got, err := hex.DecodeString(hexPart)
	if err != nil {
		return ErrSignatureMalformed
	}
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	if !hmac.Equal(got, m.Sum(nil)) {
		return ErrSignatureMismatch
	}
	return nil
}
