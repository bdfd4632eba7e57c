package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadNATSOptions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	creds, ca, cert, key := file("a.creds"), file("ca.pem"), file("c.pem"), file("c.key")
	c, err := Load(RoleAPI, false, envOf(map[string]string{
		"MAILVET_DNS_RESOLVER": "127.0.0.1:53",
		"NATS_URL":             "nats://n1:4222, tls://user:pw@n2:4222,n3:4222",
		"MAILVET_NATS_PREFIX":  "staging-2",
		"MAILVET_NATS_CREDS":   creds, "MAILVET_NATS_TLS_CA": ca, "MAILVET_NATS_TLS_CERT": cert, "MAILVET_NATS_TLS_KEY": key,
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := NATSOptions{Prefix: "staging-2", CredsFile: creds, TLSCAFile: ca, TLSCertFile: cert, TLSKeyFile: key}
	if c.NATS != want || c.NatsURL != "nats://n1:4222, tls://user:pw@n2:4222,n3:4222" {
		t.Errorf("NATS %+v url %q", c.NATS, c.NatsURL)
	}
}

func TestLoadNATSOptionsRefused(t *testing.T) {
	t.Parallel()
	cert := filepath.Join(t.TempDir(), "client.pem")
	if err := os.WriteFile(cert, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env       map[string]string
		variable  string
		notInText string
	}{
		{map[string]string{"MAILVET_NATS_PREFIX": "a.b"}, "MAILVET_NATS_PREFIX", ""},
		{map[string]string{"MAILVET_NATS_PREFIX": "prod*"}, "MAILVET_NATS_PREFIX", ""},
		{map[string]string{"MAILVET_NATS_PREFIX": strings.Repeat("p", 33)}, "MAILVET_NATS_PREFIX", ""},
		{map[string]string{"NATS_URL": "nats://n1:4222,http://user:hunter2@n2:4222"}, "NATS_URL", "hunter2"},
		{map[string]string{"NATS_URL": "nats://n1:4222,"}, "NATS_URL", ""},
		{map[string]string{"MAILVET_NATS_CREDS": "/does/not/exist.creds"}, "MAILVET_NATS_CREDS", ""},
		{map[string]string{"MAILVET_NATS_TLS_CERT": cert}, "MAILVET_NATS_TLS_CERT", ""},
	} {
		tc.env["MAILVET_DNS_RESOLVER"] = "127.0.0.1:53"
		_, err := Load(RoleVerifier, false, envOf(tc.env))
		if err == nil || !strings.Contains(err.Error(), tc.variable) {
			t.Errorf("%v: error %v, want one naming %s", tc.env, err, tc.variable)
			continue
		}
		if tc.notInText != "" && strings.Contains(err.Error(), tc.notInText) {
			t.Errorf("%v: the error shows a secret: %v", tc.env, err)
		}
	}
}
