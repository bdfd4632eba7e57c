package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/sealed"
)

// MAILVET_SECRETS_KEY and MAILVET_SECRETS_KEY_OLD (docs/operations.md, "Secrets at rest"): base64
// or hex keys, the old one only beside a current one, errors that never repeat a key, and the
// requirement of the processes that seal or open.
func TestLoadSecretsKey(t *testing.T) {
	t.Parallel()
	const b64 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	const hexKey = "1f1e1d1c1b1a191817161514131211100f0e0d0c0b0a09080706050403020100"

	c, err := Load(RoleAPI, false, envOf(map[string]string{"MAILVET_SECRETS_KEY": b64, "MAILVET_SECRETS_KEY_OLD": hexKey}))
	if err != nil || !c.SecretsKeySet || c.RequireSecretsKey() != nil {
		t.Fatalf("both keys: %v, set %v", err, c.SecretsKeySet)
	}
	cur, _ := sealed.ParseKey(b64)
	old, _ := sealed.ParseKey(hexKey)
	if c.Secrets.CurrentID() != sealed.KeyID(cur) || c.Secrets.OldID() != sealed.KeyID(old) {
		t.Errorf("key ids %s %s", c.Secrets.CurrentID(), c.Secrets.OldID())
	}

	c, err = Load(RoleWebhook, false, envOf(nil))
	if err != nil || c.SecretsKeySet || c.Secrets == nil {
		t.Fatalf("no key: %v, set %v", err, c.SecretsKeySet)
	}
	if err := c.RequireSecretsKey(); !errors.Is(err, ErrNoSecretsKey) {
		t.Errorf("RequireSecretsKey without a key: %v", err)
	}
	if c, _ := Load(RoleAPI, true, envOf(nil)); c.RequireSecretsKey() != nil {
		t.Error("dev mode needs no MAILVET_SECRETS_KEY (it keeps one under .data/)")
	}

	for name, env := range map[string]map[string]string{
		"MAILVET_SECRETS_KEY":     {"MAILVET_SECRETS_KEY": "short-and-secret"},
		"MAILVET_SECRETS_KEY_OLD": {"MAILVET_SECRETS_KEY": b64, "MAILVET_SECRETS_KEY_OLD": "short-and-secret"},
	} {
		_, err := Load(RoleAPI, false, envOf(env))
		if err == nil || !strings.Contains(err.Error(), name+": must be 32 random bytes") || strings.Contains(err.Error(), "short-and-secret") {
			t.Errorf("bad %s: %v", name, err)
		}
	}
	_, err = Load(RoleAPI, false, envOf(map[string]string{"MAILVET_SECRETS_KEY_OLD": b64}))
	if err == nil || !strings.Contains(err.Error(), "MAILVET_SECRETS_KEY_OLD: needs MAILVET_SECRETS_KEY") || strings.Contains(err.Error(), b64) {
		t.Errorf("old key alone: %v", err)
	}
}
