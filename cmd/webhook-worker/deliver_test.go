package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/sealed"
	"github.com/mailvet/mailvet/internal/testkit/dnstest"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/tlstest"
	"github.com/mailvet/mailvet/internal/webhook"
)

// The binary's wiring end to end: configuration from the environment, the consumer, the DNS
// resolver of MAILVET_DNS_RESOLVER, trust from SSL_CERT_FILE (read by crypto/x509, no option of
// ours), delivery and metrics. Not parallel: SSL_CERT_FILE is process-wide.
func TestWorkerDeliversWithSSLCertFile(t *testing.T) {
	// One CA per process: crypto/x509 reads SSL_CERT_FILE once, so a second run of this test
	// (-count=2) must trust the same CA as the first.
	pkiOnce.Do(func() { ca := tlstest.New(t, "hooks.test"); pkiCA, pkiLeaf = ca.PEM, ca.Leaf })
	caPEM, leaf := pkiCA, pkiLeaf
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", caFile)

	var got, gotHeader atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(b)
		gotHeader.Store(r.Header.Clone())
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}}
	srv.StartTLS()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ops := ln.Addr().String()
	ln.Close()
	dbURL, natsURL := pgtest.URL(t), natstest.URL(t)
	env := map[string]string{
		"DATABASE_URL": dbURL, "NATS_URL": natsURL, "MAILVET_METRICS_ADDR": ops,
		"MAILVET_DNS_RESOLVER": dnstest.Loopback(t), "MAILVET_WEBHOOK_ALLOW_PRIVATE": "true",
		"MAILVET_SECRETS_KEY": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-concurrency", "8"}, func(k string) string { return env[k] }, io.Discard, &stderr)
	}()
	waitHTTP(t, "http://"+ops+"/readyz", &stderr)

	pool := pgtest.Pool(t, dbURL)
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	account, job := uuid.New(), uuid.New()
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier) VALUES ($1, 'builder')`, account)
	pgtest.Exec(t, pool, `INSERT INTO jobs (id, account_id, email, webhook_url) VALUES ($1, $2, 'a@example.com', 'https://hooks.test/')`, job, account)
	body := []byte(`{"email":"a@example.com","valid":false,"status":"unknown","job_id":"` + job.String() + `","error":"internal"}`)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The secret is sealed as the API stores it, under the key the worker gets from
	// MAILVET_SECRETS_KEY: the worker must open it with that key to sign.
	keyBytes, err := sealed.ParseKey(env["MAILVET_SECRETS_KEY"])
	if err != nil {
		t.Fatal(err)
	}
	keys, err := sealed.New(keyBytes, nil)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "whsec_12345678"
	sealedSecret, err := keys.Seal(secret)
	if err != nil {
		t.Fatal(err)
	}
	id, err := webhook.CreateDelivery(ctx, tx, job, account, "https://hooks.test:"+port+"/cb", sealedSecret, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := webhook.Publish(ctx, js, queue.Layout{}, id); err != nil {
		t.Fatal(err)
	}

	deadline := time.Now().Add(15 * time.Second)
	for {
		var state string
		if err := pool.QueryRow(ctx, `SELECT state FROM deliveries WHERE id = $1`, id).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if state == "delivered" {
			break
		}
		if time.Now().After(deadline) {
			var lastErr *string
			_ = pool.QueryRow(ctx, `SELECT last_error FROM deliveries WHERE id = $1`, id).Scan(&lastErr)
			t.Fatalf("delivery still %s (last error %v)\n%s", state, lastErr, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if b, _ := got.Load().([]byte); !bytes.Equal(b, body) {
		t.Errorf("receiver got %q, want %q", b, body)
	}
	// Both schemes verify on the receiver's side: X-Service-Signature, and the Standard Webhooks
	// headers within the tolerance.
	h, _ := gotHeader.Load().(http.Header)
	if err := webhook.Verify([]byte(secret), body, h.Get(webhook.SignatureHeader)); err != nil {
		t.Errorf("X-Service-Signature: %v", err)
	}
	if err := webhook.VerifyWebhook([]byte(secret), body, h, time.Now(), 0); err != nil || h.Get("webhook-signature") == "" {
		t.Errorf("Standard Webhooks signature %q: %v", h.Get("webhook-signature"), err)
	}
	resp, err := http.Get("http://" + ops + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `mailvet_webhook_attempts_total{outcome="success"} 1`) {
		t.Errorf("metrics lack the successful attempt:\n%s", metrics)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("worker did not stop")
	}
}

func waitHTTP(t *testing.T, url string, stderr *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never ready: %v\n%s", url, err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var (
	pkiOnce sync.Once
	pkiCA   []byte
	pkiLeaf tls.Certificate
)
