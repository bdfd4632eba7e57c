package config

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/mailvet/mailvet/internal/testkit/tlstest"
)

// natsFiles writes a NATS credentials file, a CA certificate and a client certificate with its
// key, each as the NATS client reads it.
func natsFiles(t *testing.T) (creds, ca, cert, key string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := user.Seed()
	if err != nil {
		t.Fatal(err)
	}
	creds = write("a.creds", []byte("-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.c2ln\n------END NATS USER JWT------\n\n"+
		"-----BEGIN USER NKEY SEED-----\n"+string(seed)+"\n------END USER NKEY SEED------\n"))
	tc := tlstest.New(t, "nats.example")
	keyDER, err := x509.MarshalPKCS8PrivateKey(tc.Leaf.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	ca = write("ca.pem", tc.PEM)
	cert = write("c.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tc.Leaf.Certificate[0]}))
	key = write("c.key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	return creds, ca, cert, key
}

func TestLoadNATSOptions(t *testing.T) {
	t.Parallel()
	creds, ca, cert, key := natsFiles(t)
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
	junk := filepath.Join(t.TempDir(), "client.pem")
	if err := os.WriteFile(junk, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cert := junk
	_, _, goodCert, key := natsFiles(t)
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
		// Files that exist but hold nothing the client can use: refused at start-up, not waited
		// for at every connection attempt.
		{map[string]string{"MAILVET_NATS_CREDS": cert}, "MAILVET_NATS_CREDS", ""},
		{map[string]string{"MAILVET_NATS_TLS_CA": cert + "x"}, "MAILVET_NATS_TLS_CA", ""},
		{map[string]string{"MAILVET_NATS_TLS_CA": junk}, "MAILVET_NATS_TLS_CA", ""},
		{map[string]string{"MAILVET_NATS_TLS_CERT": junk, "MAILVET_NATS_TLS_KEY": key}, "MAILVET_NATS_TLS_CERT", ""},
		{map[string]string{"MAILVET_NATS_TLS_CERT": goodCert, "MAILVET_NATS_TLS_KEY": junk}, "MAILVET_NATS_TLS_CERT", ""},
		// A port no client can dial.
		{map[string]string{"NATS_URL": "nats://n1:99999"}, "NATS_URL", ""},
		{map[string]string{"NATS_URL": "nats://n1:4222,n2:0"}, "NATS_URL", ""},
		{map[string]string{"NATS_URL": "nats://n1:"}, "NATS_URL", ""},
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
