package webhook_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/mailvet/mailvet/webhook"
)

// A receiver whose secret is empty — WEBHOOK_SECRET unset in its environment, the usual way
// this happens — must refuse every callback, not accept whatever a forger signs with the empty
// key. The service never signs with one (webhook_secret has at least 8 characters), and the
// TypeScript client throws on it (clients/typescript/src/webhook.ts).
func TestEmptySecretAcceptsNothing(t *testing.T) {
	t.Parallel()
	secret := "" // the receiver's misconfiguration
	var accepted []string
	verdicts := make(chan error, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		err = webhook.VerifyRequest(r.Header, body, secret, webhook.VerifyOptions{RequireStandard: r.URL.Query().Has("standard")})
		verdicts <- err
		if err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	body := []byte(`{"job_id":"0b8f5a3c-7f3e-4f53-9a53-0c1a4f0f2f11","email":"ann@acme.example","status":"deliverable"}`)
	now := time.Now().Unix()
	forged := map[string]http.Header{
		"X-Service-Signature": {webhook.Header: {webhook.Sign(body, "")}},
		"Standard Webhooks": {
			webhook.HeaderID:        {"forged"},
			webhook.HeaderTimestamp: {strconv.FormatInt(now, 10)},
			webhook.HeaderSignature: {webhook.SignStandard("forged", now, body, "")},
		},
	}
	for name, h := range forged {
		for _, path := range []string{"/cb", "/cb?standard"} {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader(body))
			for k, v := range h {
				req.Header[http.CanonicalHeaderKey(k)] = v
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			verdict := <-verdicts
			if resp.StatusCode == http.StatusNoContent {
				accepted = append(accepted, name+" "+path)
			}
			if verdict != nil && !errors.Is(verdict, webhook.ErrNoSecret) && !errors.Is(verdict, webhook.ErrMissing) {
				t.Errorf("%s %s: %v, want ErrNoSecret", name, path, verdict)
			}
		}
	}
	if len(accepted) > 0 {
		t.Fatalf("a receiver with an empty secret accepted forged callbacks: %q", accepted)
	}
	// The helpers say why, whatever the header.
	if err := webhook.Verify(body, webhook.Sign(body, ""), ""); !errors.Is(err, webhook.ErrNoSecret) {
		t.Errorf("Verify with an empty secret: %v, want ErrNoSecret", err)
	}
	if err := webhook.VerifyStandard(body, "id", strconv.FormatInt(now, 10), webhook.SignStandard("id", now, body, ""), "", webhook.VerifyOptions{}); !errors.Is(err, webhook.ErrNoSecret) {
		t.Errorf("VerifyStandard with an empty secret: %v, want ErrNoSecret", err)
	}
}
