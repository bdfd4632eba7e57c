package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
	"golang.org/x/text/unicode/norm"

	"github.com/mailvet/mailvet/internal/passwords"
)

// Password bounds (docs/dashboard.md, "Passwords"): at least 10 characters, at most 256 bytes, so
// that the hash's input is bounded too, and at least 4 different characters.
const (
	minPasswordChars    = 10
	maxPasswordBytes    = 256
	minDistinctPassword = 4
)

// problem is an error whose text is a sentence for the page, shown to the user as it is.
type problem string

func (p problem) Error() string { return string(p) }

// checkPassword refuses what NIST SP 800-63B asks a verifier to refuse (docs/dashboard.md,
// "Passwords"): passwords too short, blank, made of a character or two repeated, the account's own
// email or its local part, and the most common and breached passwords, which attackers try first.
// It asks for nothing else (no mix of character classes): length is what makes a password strong.
func checkPassword(p, email string) error {
	if !utf8.ValidString(p) {
		return problem("The password must be valid text.")
	}
	if len(p) > maxPasswordBytes {
		return problem(fmt.Sprintf("The password must be at most %d bytes long.", maxPasswordBytes))
	}
	p = normPassword(p) // counted and compared as it is hashed
	switch {
	case strings.TrimSpace(p) == "":
		return problem("The password cannot be only spaces.")
	case utf8.RuneCountInString(p) < minPasswordChars:
		return problem(fmt.Sprintf("The password must have at least %d characters.", minPasswordChars))
	case distinctRunes(p) < minDistinctPassword:
		return problem(fmt.Sprintf("The password repeats too few characters: use at least %d different ones.", minDistinctPassword))
	case isOwnEmail(p, email):
		return problem("The password cannot be your email address or the part of it before the @.")
	case passwords.Common(p):
		return problem("This password is on the list of the most common passwords, which attackers try first. Choose another one, such as a few unrelated words.")
	}
	return nil
}

// distinctRunes counts the different characters of p, up to minDistinctPassword.
func distinctRunes(p string) int {
	seen := make(map[rune]bool, minDistinctPassword)
	for _, c := range p {
		seen[c] = true
		if len(seen) >= minDistinctPassword {
			break
		}
	}
	return len(seen)
}

// isOwnEmail reports whether p, normalised as a password is (normPassword), is the email or its
// local part, whatever the case, the blanks around it and the Unicode form either was typed in.
func isOwnEmail(p, email string) bool {
	p, email = strings.ToLower(strings.TrimSpace(p)), strings.ToLower(normPassword(strings.TrimSpace(email)))
	if email == "" {
		return false
	}
	local := email
	if i := strings.LastIndex(email, "@"); i >= 0 {
		local = email[:i]
	}
	return p == email || p == local
}

// normPassword is the form in which a password is hashed and checked: Unicode NFKC, as NIST SP
// 800-63B asks (docs/dashboard.md, "Passwords"). The same password reaches the form as different
// code points depending on the keyboard, the system and whether it was pasted ("é" as one code
// point or as "e" and a combining accent, full-width letters from an East Asian input method), and
// must sign in whichever it came as. Text that is not valid UTF-8 is left as it is (such a
// password is never set: checkPassword refuses it).
func normPassword(p string) string {
	if !utf8.ValidString(p) {
		return p
	}
	return norm.NFKC.String(p)
}

// hasher holds the argon2id parameters. Hashes are PHC strings that carry their parameters, so
// changing them later still verifies the old hashes.
type hasher struct {
	time, memoryKiB uint32
	threads         uint8
}

// defaultHasher follows OWASP's argon2id minimum: 19 MiB, 2 passes, 1 lane.
var defaultHasher = hasher{time: 2, memoryKiB: 19 * 1024, threads: 1}

func (h hasher) hash(password string) string {
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	key := argon2.IDKey([]byte(normPassword(password)), salt, h.time, h.memoryKiB, h.threads, 32)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, h.memoryKiB, h.time, h.threads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

// verifyPassword checks password, normalised (normPassword), against a PHC argon2id hash in
// constant time. A hash made before passwords were normalised holds the password as it was typed,
// so a password that normalisation changes is also checked as typed: only the typed text decides
// whether that second check runs, never the account, so its time tells nothing about which emails
// have one. A malformed hash never matches.
func verifyPassword(password, encoded string) bool {
	n := normPassword(password)
	return verifyExact(n, encoded) || (n != password && verifyExact(password, encoded))
}

// verifyExact checks password, byte for byte, against a PHC argon2id hash.
func verifyExact(password, encoded string) bool {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false
	}
	var version int
	var m, t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil || m == 0 || m > 1<<20 || t == 0 || t > 10 || p == 0 {
		return false
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil {
		return false
	}
	want, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil || len(want) == 0 || len(want) > 64 {
		return false
	}
	got := argon2.IDKey([]byte(password), salt, t, m, p, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1
}

// hashWait bounds how long a password form waits for a hash slot before it is answered 503.
const hashWait = 5 * time.Second

var errHashBusy = errors.New("every password hash slot is busy")

// withHashSlot runs f, a password hash or check, holding one of a few slots. Each argon2id hash
// takes 19 MiB and a core for tens of milliseconds, and the sign-in and sign-up forms are open to
// anyone: without a bound, a burst of them would hold memory and CPU without limit.
func (h *Handler) withHashSlot(ctx context.Context, f func()) error {
	t := time.NewTimer(hashWait)
	defer t.Stop()
	select {
	case h.hashSlots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return errHashBusy
	}
	defer func() { <-h.hashSlots }()
	f()
	return nil
}

// hash is hasher.hash in a slot.
func (h *Handler) hash(ctx context.Context, password string) (string, error) {
	var out string
	err := h.withHashSlot(ctx, func() { out = h.hasher.hash(password) })
	return out, err
}
