package idempotency

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// A kept response can hold a secret (the answer to a key creation holds the new API key in
// full), so the table keeps neither the Idempotency-Key nor the response in the clear: the row is
// found by a hash of the key (lookupOf), and the body is sealed with AES-256-GCM under a key
// derived from the account and the Idempotency-Key itself (sealKeyOf). Only the caller, who
// holds the Idempotency-Key, can make a replay; a copy of the database cannot read the
// responses, and neither can an operator holding the process's own secrets. docs/api.md,
// "Idempotency", says how strong that is: as strong as the Idempotency-Key is unguessable.

const (
	lookupLabel = "mailvet idempotency lookup v1:"
	sealLabel   = "mailvet idempotency seal v1:"
)

// lookupOf is the column value that names key: hex SHA-256, as migrations/00028 converts the
// rows kept before sealing.
func lookupOf(key string) string {
	sum := sha256.Sum256([]byte(lookupLabel + key))
	return hex.EncodeToString(sum[:])
}

// sealKeyOf is the AES-256 key of the responses kept for account's key. The account is part of
// it because keys are per account: two accounts' same key seal apart.
func sealKeyOf(account, key string) [32]byte {
	return sha256.Sum256([]byte(sealLabel + account + ":" + key))
}

func aeadOf(account, key string) cipher.AEAD {
	k := sealKeyOf(account, key)
	block, err := aes.NewCipher(k[:])
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return gcm
}

// seal returns nonce‖ciphertext of body; the lookup value is the additional data, so that a
// sealed body moved to another row does not open.
func seal(account, key string, body []byte) []byte {
	gcm := aeadOf(account, key)
	nonce := make([]byte, gcm.NonceSize(), gcm.NonceSize()+len(body)+gcm.Overhead())
	_, _ = rand.Read(nonce)
	return gcm.Seal(nonce, nonce, body, []byte(lookupOf(key)))
}

var errSealed = errors.New("idempotency: kept response does not open with this key")

// open reverses seal.
func open(account, key string, sealed []byte) ([]byte, error) {
	gcm := aeadOf(account, key)
	if len(sealed) < gcm.NonceSize() {
		return nil, errSealed
	}
	body, err := gcm.Open(nil, sealed[:gcm.NonceSize()], sealed[gcm.NonceSize():], []byte(lookupOf(key)))
	if err != nil {
		return nil, errSealed
	}
	return body, nil
}

// keyedHash is what is stored of a request's SHA-256: an HMAC of it under the same derived key.
// The request can carry a secret (a list's Mailvet-Webhook-Secret header, an async verify's
// webhook_secret); a plain hash of it in a copy of the database, beside the request's other
// fields, would let a weak secret be guessed offline. Keyed, it is useless without the
// Idempotency-Key, and a retry, which carries that key, still compares equal.
func keyedHash(account, key string, sum []byte) []byte {
	k := sealKeyOf(account, key)
	m := hmac.New(sha256.New, k[:])
	_, _ = m.Write([]byte("request:"))
	_, _ = m.Write(sum)
	return m.Sum(nil)
}
