// Package sealed encrypts the secrets Mailvet must keep but never show: the webhook secrets
// of jobs, lists and deliveries, so that a copy of the database alone cannot sign a callback
// (docs/operations.md, "Secrets at rest"; docs/reliability.md, "Webhook secrets at rest").
//
// A sealed value is text that describes itself:
//
//	mvs1:<key id>:<base64 of nonce ‖ AES-256-GCM ciphertext and tag>
//
// The key id (8 hex digits derived from the key, not the key) tells which key sealed it, so a
// process that holds the current key and, during a rotation, the old one (MAILVET_SECRETS_KEY and
// MAILVET_SECRETS_KEY_OLD) opens both, and the re-seal loop finds the values still under the old
// key with a plain LIKE on the prefix. The prefix and key id are authenticated as additional
// data, so a value cannot be moved under another key id.
package sealed

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Prefix starts every sealed value; the "1" is the format's version.
const Prefix = "mvs1:"

// KeySize is the length of a key: AES-256.
const KeySize = 32

// The errors of Open. Neither says anything about the value beyond its key id.
var (
	// ErrUnknownKey: the value was sealed under a key this process does not hold (a replica
	// started without the rotation's MAILVET_SECRETS_KEY_OLD, or a value from another deployment).
	ErrUnknownKey = errors.New("sealed: the value was sealed under a key this process does not hold")
	// ErrCorrupt: the value is not a well-formed sealed value, or fails authentication.
	ErrCorrupt = errors.New("sealed: the value is malformed or was altered")
)

type key struct {
	id   string
	aead cipher.AEAD
}

// Keys seal under the current key and open under the current or the old one.
type Keys struct {
	cur key
	old *key
}

// ParseKey decodes a key as MAILVET_SECRETS_KEY takes it: 32 bytes written as standard base64
// (44 characters with the padding, as `openssl rand -base64 32` prints) or as 64 hex digits. The
// error never repeats the value: it is a secret.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	var b []byte
	var err error
	if len(s) == 2*KeySize {
		b, err = hex.DecodeString(s)
	} else {
		b, err = base64.StdEncoding.DecodeString(s)
	}
	if err != nil || len(b) != KeySize {
		return nil, fmt.Errorf("must be %d random bytes as base64 (44 characters, e.g. `openssl rand -base64 32`) or as 64 hex digits", KeySize)
	}
	return b, nil
}

// New returns Keys sealing under current and also opening what old sealed (old may be nil).
func New(current, old []byte) (*Keys, error) {
	c, err := newKey(current)
	if err != nil {
		return nil, err
	}
	k := &Keys{cur: c}
	if old != nil {
		o, err := newKey(old)
		if err != nil {
			return nil, err
		}
		if o.id != c.id {
			k.old = &o
		}
	}
	return k, nil
}

func newKey(b []byte) (key, error) {
	if len(b) != KeySize {
		return key{}, fmt.Errorf("sealed: a key has %d bytes, not %d", KeySize, len(b))
	}
	block, err := aes.NewCipher(b)
	if err != nil {
		return key{}, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return key{}, err
	}
	return key{id: KeyID(b), aead: aead}, nil
}

// KeyID is the id written into the values a key seals: the first 4 bytes of a SHA-256 of the key
// under a label of its own, in hex. It tells keys apart without telling anything about them.
func KeyID(b []byte) string {
	h := sha256.Sum256(append([]byte("mailvet sealed key id\x00"), b...))
	return hex.EncodeToString(h[:4])
}

// CurrentID is the id of the key values are sealed under.
func (k *Keys) CurrentID() string { return k.cur.id }

// OldID is the id of the old key, "" when there is none.
func (k *Keys) OldID() string {
	if k.old == nil {
		return ""
	}
	return k.old.id
}

// Seal encrypts plain under the current key with a fresh random nonce.
func (k *Keys) Seal(plain string) (string, error) {
	nonce := make([]byte, k.cur.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	head := Prefix + k.cur.id + ":"
	out := k.cur.aead.Seal(nonce, nonce, []byte(plain), []byte(head))
	return head + base64.RawStdEncoding.EncodeToString(out), nil
}

// IsSealed reports whether v has the sealed format's prefix. A webhook secret stored before
// secrets were sealed (migration 00023) does not: Open returns it as it is, and the re-seal loop
// seals it.
func IsSealed(v string) bool { return strings.HasPrefix(v, Prefix) }

// Open returns the secret v holds. A value without the prefix is a secret stored before sealing
// existed and is returned unchanged.
func (k *Keys) Open(v string) (string, error) {
	if !IsSealed(v) {
		return v, nil
	}
	rest := v[len(Prefix):]
	id, data, ok := strings.Cut(rest, ":")
	if !ok {
		return "", ErrCorrupt
	}
	var use *key
	switch {
	case id == k.cur.id:
		use = &k.cur
	case k.old != nil && id == k.old.id:
		use = k.old
	default:
		return "", ErrUnknownKey
	}
	raw, err := base64.RawStdEncoding.DecodeString(data)
	ns := use.aead.NonceSize()
	if err != nil || len(raw) < ns+use.aead.Overhead() {
		return "", ErrCorrupt
	}
	plain, err := use.aead.Open(nil, raw[:ns], raw[ns:], []byte(Prefix+id+":"))
	if err != nil {
		return "", ErrCorrupt
	}
	return string(plain), nil
}

// Current reports whether v is sealed under the current key, i.e. needs no re-sealing.
func (k *Keys) Current(v string) bool { return strings.HasPrefix(v, Prefix+k.cur.id+":") }

// Generate returns a new random key written as MAILVET_SECRETS_KEY takes it (base64).
func Generate() (string, error) {
	b := make([]byte, KeySize)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// DevKeyFile is the file under the dev data directory (.data/, git-ignored) where `api -dev`
// keeps the key it generated, so that secrets sealed in one run open in the next.
const DevKeyFile = "secrets.key"

// DevKey returns the dev-mode key kept in dir, creating dir and the key (mode 0600) on first use.
func DevKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, DevKeyFile)
	if b, err := os.ReadFile(path); err == nil {
		k, perr := ParseKey(string(b))
		if perr != nil {
			return nil, fmt.Errorf("%s: %w (delete the file to have a new key made; secrets sealed under the old one are lost)", path, perr)
		}
		return k, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s, err := Generate()
	if err != nil {
		return nil, err
	}
	// O_EXCL: two dev processes started at once must not each write a key of their own.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return DevKey(dir)
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.WriteString(s + "\n"); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return ParseKey(s)
}

var (
	processOnce sync.Once
	processKeys *Keys
)

// Process returns a key made at random for the life of this process. It is what library callers
// that configure no key get (config.Load without MAILVET_SECRETS_KEY, a test's server and worker in
// one process): values sealed under it are unreadable after the process ends. The API and the
// webhook worker binaries never run on it: outside dev mode they refuse to start without
// MAILVET_SECRETS_KEY (docs/operations.md, "Secrets at rest").
func Process() *Keys {
	processOnce.Do(func() {
		b := make([]byte, KeySize)
		if _, err := rand.Read(b); err != nil {
			panic(err) // crypto/rand does not fail on supported platforms
		}
		processKeys, _ = New(b, nil)
	})
	return processKeys
}

// Or returns k, or Process() when k is nil.
func Or(k *Keys) *Keys {
	if k == nil {
		return Process()
	}
	return k
}
