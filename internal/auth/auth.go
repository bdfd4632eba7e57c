// Package auth defines Mailvet's API keys: their two families (standard keys for the verify API,
// live sk_live_… or sandbox sk_test_… (docs/sandbox.md); provisioning sk_mgmt_… keys for the
// management API), how they are generated, the
// SHA-256 hash that is the only form the database stores, the masked display form, and the
// look-up that turns a presented key into the Principal a request acts as.
//
// Look-ups are never cached: every request reads the key row, so a revocation made through any
// API replica takes effect on the very next request to every replica.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/plan"
)

// Kind is a key family.
type Kind string

// The two key families (docs/api.md, "Authentication"); the values are those of api_keys.kind.
const (
	KindStandard     Kind = "standard"
	KindProvisioning Kind = "provisioning"
)

// Prefix returns the literal prefix that every live key of kind k starts with.
func (k Kind) Prefix() string {
	if k == KindProvisioning {
		return "sk_mgmt_"
	}
	return "sk_live_"
}

// Mode is whether a standard key verifies for real (live) or answers from the sandbox's magic
// addresses without probing or billing (sandbox; docs/sandbox.md). The values are those of
// api_keys.mode. Provisioning keys are always live.
type Mode string

// The two modes.
const (
	ModeLive    Mode = "live"
	ModeSandbox Mode = "sandbox"
)

// SandboxPrefix is the prefix of every sandbox key: the key tells its mode at a glance, as
// sk_live_ does.
const SandboxPrefix = "sk_test_"

// prefixOf is the prefix of a key of kind k in mode m.
func prefixOf(k Kind, m Mode) string {
	if k == KindStandard && m == ModeSandbox {
		return SandboxPrefix
	}
	return k.Prefix()
}

// prefixes are every key prefix, with the kind and mode each names.
var prefixes = []struct {
	prefix string
	kind   Kind
	mode   Mode
}{
	{"sk_live_", KindStandard, ModeLive},
	{SandboxPrefix, KindStandard, ModeSandbox},
	{"sk_mgmt_", KindProvisioning, ModeLive},
}

// secretLen is the number of base62 characters after the prefix. 43 characters carry
// 43·log2(62) ≈ 256 bits, the 32 random bytes the design asks for.
const secretLen = 43

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// ErrInvalidKey means the presented key is malformed, unknown or revoked. The three cases share
// one error on purpose: telling them apart would help someone guessing keys.
var ErrInvalidKey = errors.New("API key not recognised")

// NewKey is a freshly generated key. Raw is shown to its owner once and then forgotten.
type NewKey struct {
	Raw     string
	Hash    []byte
	Display string
}

// Generate makes a new random live key of kind k.
func Generate(k Kind) (NewKey, error) { return GenerateMode(k, ModeLive) }

// GenerateMode makes a new random key of kind k in mode m; only standard keys can be sandbox
// keys (a provisioning key's mode is ignored).
func GenerateMode(k Kind, m Mode) (NewKey, error) {
	secret := make([]byte, secretLen)
	// Rejection sampling keeps every character uniformly distributed: bytes ≥ 248 (4·62) would
	// favour the first characters of the alphabet, so they are drawn again.
	buf := make([]byte, 64)
	for i := 0; i < secretLen; {
		if _, err := rand.Read(buf); err != nil {
			return NewKey{}, fmt.Errorf("generate key: %w", err)
		}
		for _, b := range buf {
			if b >= 248 || i == secretLen {
				continue
			}
			secret[i] = base62[b%62]
			i++
		}
	}
	raw := prefixOf(k, m) + string(secret)
	return NewKey{Raw: raw, Hash: Hash(raw), Display: Mask(raw)}, nil
}

// Hash is the SHA-256 digest of a raw key, the form stored in api_keys.key_hash. Keys carry 256
// bits of randomness, so a fast unsalted hash is enough: there is nothing to brute-force.
func Hash(raw string) []byte {
	sum := sha256.Sum256([]byte(raw))
	return sum[:]
}

// Mask returns the display form of a raw key: its family prefix, the first and the last four
// characters of the secret (sk_live_ab12…yz89). It identifies a key to its owner without being
// usable.
func Mask(raw string) string {
	for _, p := range prefixes {
		if s, ok := strings.CutPrefix(raw, p.prefix); ok && len(s) >= 8 {
			return p.prefix + s[:4] + "…" + s[len(s)-4:]
		}
	}
	return "…"
}

// KindOf returns the family a raw key claims by its prefix, and whether it is well formed at all.
func KindOf(raw string) (Kind, bool) {
	k, _, ok := parse(raw)
	return k, ok
}

// ModeOf returns the mode a raw key claims by its prefix, and whether it is well formed at all.
func ModeOf(raw string) (Mode, bool) {
	_, m, ok := parse(raw)
	return m, ok
}

func parse(raw string) (Kind, Mode, bool) {
	for _, p := range prefixes {
		if s, ok := strings.CutPrefix(raw, p.prefix); ok && len(s) == secretLen && isBase62(s) {
			return p.kind, p.mode, true
		}
	}
	return "", "", false
}

func isBase62(s string) bool {
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune(base62, rune(s[i])) {
			return false
		}
	}
	return true
}

// Principal is who a request acts as: the account and key it authenticated with.
type Principal struct {
	AccountID string
	KeyID     string
	Tier      plan.Tier
	Kind      Kind
	// Mode is the key's mode: a sandbox key's requests are answered by the sandbox
	// (docs/sandbox.md).
	Mode Mode
	// KeyDisplay is the key's display form (Mask: sk_mgmt_ab12…yz89), never the key: it names
	// the key as the actor of an audit event (docs/security.md, "Audit log").
	KeyDisplay string
	// Unconfirmed: the account's email is not confirmed yet (a dashboard sign-up,
	// docs/dashboard.md, "Email confirmation"); the API refuses it every route.
	Unconfirmed bool
}

// Sandbox reports whether the principal's key is a sandbox key.
func (p Principal) Sandbox() bool { return p.Mode == ModeSandbox }

// Querier is the part of a pgx pool or transaction that Lookup needs.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Lookup finds the active key raw and its account. It returns ErrInvalidKey for malformed,
// unknown and revoked keys alike.
func Lookup(ctx context.Context, db Querier, raw string) (Principal, error) {
	claimed, claimedMode, ok := parse(raw)
	if !ok {
		return Principal{}, ErrInvalidKey
	}
	want := Hash(raw)
	var (
		p      Principal
		stored []byte
		tier   string
		kind   string
		mode   string
	)
	err := db.QueryRow(ctx, `
		SELECT k.id, k.account_id, k.kind, k.mode, k.key_hash, a.tier, a.email_unconfirmed
		FROM api_keys k JOIN accounts a ON a.id = k.account_id
		WHERE k.key_hash = $1 AND k.revoked_at IS NULL`, want).Scan(&p.KeyID, &p.AccountID, &kind, &mode, &stored, &tier, &p.Unconfirmed)
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, ErrInvalidKey
	}
	if err != nil {
		return Principal{}, fmt.Errorf("look up API key: %w", err)
	}
	// The index look-up already matched the hash; comparing again in constant time costs nothing
	// and keeps the final decision free of timing differences.
	if subtle.ConstantTimeCompare(stored, want) != 1 {
		return Principal{}, ErrInvalidKey
	}
	p.Kind, p.Tier, p.Mode, p.KeyDisplay = Kind(kind), plan.Tier(tier), Mode(mode), Mask(raw)
	// The prefix and the stored row always agree for keys this package generated; a key whose
	// prefix claims another family or mode than its row is refused rather than trusted either
	// way, so a sandbox key can never act live nor a live key be answered from the sandbox.
	if p.Kind != claimed || p.Mode != claimedMode {
		return Principal{}, ErrInvalidKey
	}
	return p, nil
}
