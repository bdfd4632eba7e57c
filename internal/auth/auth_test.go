package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

func TestGenerate(t *testing.T) {
	t.Parallel()
	for _, kind := range []Kind{KindStandard, KindProvisioning} {
		seen := map[string]bool{}
		for range 200 {
			k, err := Generate(kind)
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := KindOf(k.Raw); !ok || got != kind {
				t.Fatalf("KindOf(%q) = %v, %v", k.Raw, got, ok)
			}
			if len(k.Raw) != len(kind.Prefix())+secretLen {
				t.Fatalf("length %d", len(k.Raw))
			}
			sum := sha256.Sum256([]byte(k.Raw))
			if !bytes.Equal(k.Hash, sum[:]) {
				t.Fatal("hash is not SHA-256 of the raw key")
			}
			if seen[k.Raw] {
				t.Fatal("duplicate key")
			}
			seen[k.Raw] = true
		}
	}
}

func TestMaskAndKindOf(t *testing.T) {
	t.Parallel()
	secret := "ab12" + strings.Repeat("x", secretLen-8) + "yz89"
	tests := []struct {
		raw    string
		mask   string
		kind   Kind
		wellOK bool
	}{
		{"sk_live_" + secret, "sk_live_ab12…yz89", KindStandard, true},
		{"sk_mgmt_" + secret, "sk_mgmt_ab12…yz89", KindProvisioning, true},
		{"sk_test_" + secret, "sk_test_ab12…yz89", KindStandard, true}, // a sandbox key (docs/sandbox.md)
		{"sk_prod_" + secret, "…", "", false},
		{"sk_live_" + secret[1:], "sk_live_b12x…yz89", "", false},
		{"sk_live_" + secret[:secretLen-1] + "!", "sk_live_ab12…yz8!", "", false},
		{"", "…", "", false},
	}
	for _, tt := range tests {
		if got := Mask(tt.raw); got != tt.mask {
			t.Errorf("Mask(%q) = %q, want %q", tt.raw, got, tt.mask)
		}
		if kind, ok := KindOf(tt.raw); kind != tt.kind || ok != tt.wellOK {
			t.Errorf("KindOf(%q) = %q, %v", tt.raw, kind, ok)
		}
	}
	if m, ok := ModeOf("sk_test_" + secret); m != ModeSandbox || !ok {
		t.Errorf("ModeOf(sk_test_…) = %q, %v", m, ok)
	}
	if m, ok := ModeOf("sk_live_" + secret); m != ModeLive || !ok {
		t.Errorf("ModeOf(sk_live_…) = %q, %v", m, ok)
	}
}

// TestLookupMode: a sandbox key's principal is a sandbox one, and a key whose prefix claims
// another mode than its row (a row written by hand) is refused rather than trusted either way.
func TestLookupMode(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	const acct = "0b6f7d8e-2222-4c3e-9a55-000000000002"
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier) VALUES ($1, 'free')`, acct)
	test, _ := GenerateMode(KindStandard, ModeSandbox)
	live, _ := GenerateMode(KindStandard, ModeLive)
	mismatched, _ := GenerateMode(KindStandard, ModeSandbox)
	if !strings.HasPrefix(test.Raw, "sk_test_") || !strings.HasPrefix(live.Raw, "sk_live_") {
		t.Fatalf("prefixes %s %s", test.Display, live.Display)
	}
	for _, k := range []struct {
		key  NewKey
		mode Mode
	}{{test, ModeSandbox}, {live, ModeLive}, {mismatched, ModeLive}} {
		pgtest.Exec(t, pool, `INSERT INTO api_keys (id, account_id, kind, mode, key_hash, prefix) VALUES (gen_random_uuid(), $1, 'standard', $2, $3, $4)`,
			acct, k.mode, k.key.Hash, k.key.Display)
	}
	p, err := Lookup(ctx, pool, test.Raw)
	if err != nil || !p.Sandbox() || p.Mode != ModeSandbox || p.Kind != KindStandard {
		t.Errorf("sandbox key: %+v, %v", p, err)
	}
	p, err = Lookup(ctx, pool, live.Raw)
	if err != nil || p.Sandbox() {
		t.Errorf("live key: %+v, %v", p, err)
	}
	if _, err := Lookup(ctx, pool, mismatched.Raw); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("sk_test_ key stored live: %v, want ErrInvalidKey", err)
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	const acct = "0b6f7d8e-2222-4c3e-9a55-000000000001"
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier) VALUES ($1, 'scale')`, acct)
	active, _ := Generate(KindStandard)
	revoked, _ := Generate(KindProvisioning)
	unknown, _ := Generate(KindStandard)
	pgtest.Exec(t, pool, `INSERT INTO api_keys (id, account_id, kind, key_hash, prefix) VALUES
		('0b6f7d8e-2222-4c3e-9a55-00000000000a', $1, 'standard', $2, 'p'),
		('0b6f7d8e-2222-4c3e-9a55-00000000000b', $1, 'provisioning', $3, 'p')`, acct, active.Hash, revoked.Hash)
	pgtest.Exec(t, pool, `UPDATE api_keys SET revoked_at = now() WHERE id = '0b6f7d8e-2222-4c3e-9a55-00000000000b'`)

	p, err := Lookup(ctx, pool, active.Raw)
	if err != nil || p.AccountID != acct || p.KeyID != "0b6f7d8e-2222-4c3e-9a55-00000000000a" || p.Kind != KindStandard || p.Tier != "scale" {
		t.Fatalf("Lookup = %+v, %v", p, err)
	}
	for name, raw := range map[string]string{"revoked": revoked.Raw, "unknown": unknown.Raw, "malformed": "sk_live_short"} {
		if _, err := Lookup(ctx, pool, raw); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%s: err = %v, want ErrInvalidKey", name, err)
		}
	}
}
