package webhook_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/webhook"
)

type standardVector struct{ Secret, ID, Timestamp, Body, Signature string }

// standardVectors are the Standard Webhooks golden vectors, computed with OpenSSL independently
// of this code (internal/webhook/testdata/gen-standard-signatures.sh) and shared with the
// TypeScript client's tests. The first is the scheme's own published example.
func standardVectors(t *testing.T) []standardVector {
	t.Helper()
	raw, err := os.ReadFile("../internal/webhook/testdata/standard-signatures.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []standardVector
	if err := json.Unmarshal(raw, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) < 5 {
		t.Fatalf("only %d vectors", len(vs))
	}
	return vs
}

func at(ts string) webhook.VerifyOptions {
	n, _ := strconv.ParseInt(ts, 10, 64)
	return webhook.VerifyOptions{Now: func() time.Time { return time.Unix(n, 0) }}
}

func TestStandardGoldenVectors(t *testing.T) {
	t.Parallel()
	for _, v := range standardVectors(t) {
		ts, _ := strconv.ParseInt(v.Timestamp, 10, 64)
		if got := webhook.SignStandard(v.ID, ts, []byte(v.Body), v.Secret); got != v.Signature {
			t.Errorf("SignStandard(%q, %s, %q) = %s, want %s", v.ID, v.Timestamp, v.Secret, got, v.Signature)
		}
		if err := webhook.VerifyStandard([]byte(v.Body), v.ID, v.Timestamp, v.Signature, v.Secret, at(v.Timestamp)); err != nil {
			t.Errorf("VerifyStandard of vector %q: %v", v.ID, err)
		}
		for name, err := range map[string]error{
			"body":      webhook.VerifyStandard([]byte(v.Body+" "), v.ID, v.Timestamp, v.Signature, v.Secret, at(v.Timestamp)),
			"secret":    webhook.VerifyStandard([]byte(v.Body), v.ID, v.Timestamp, v.Signature, v.Secret+"x", at(v.Timestamp)),
			"id":        webhook.VerifyStandard([]byte(v.Body), v.ID+"x", v.Timestamp, v.Signature, v.Secret, at(v.Timestamp)),
			"timestamp": webhook.VerifyStandard([]byte(v.Body), v.ID, strconv.FormatInt(ts+1, 10), v.Signature, v.Secret, at(v.Timestamp)),
		} {
			if !errors.Is(err, webhook.ErrMismatch) {
				t.Errorf("vector %q with another %s: %v, want ErrMismatch", v.ID, name, err)
			}
		}
	}
}

// A "whsec_" secret is keyed with its decoded bytes, as Standard Webhooks libraries key it; any
// other secret with its own bytes.
func TestStandardKey(t *testing.T) {
	t.Parallel()
	if got := string(webhook.StandardKey("whsec_aGVsbG8=")); got != "hello" {
		t.Errorf("whsec_ key = %q", got)
	}
	for _, s := range []string{"at-least-8-chars", "whsec_not base64!", "whsec_", "WHSEC_aGVsbG8="} {
		if got := string(webhook.StandardKey(s)); got != s {
			t.Errorf("StandardKey(%q) = %q, want the secret's own bytes", s, got)
		}
	}
}

// The timestamp must be within the tolerance either way: 5 minutes by default.
func TestStandardTolerance(t *testing.T) {
	t.Parallel()
	const secret, id = "at-least-8-chars", "0190f5a2-7c1e-7b3a-9d4e-5f6a7b8c9d0e"
	body := []byte(`{"job_id":"x"}`)
	sent := time.Unix(1767225600, 0)
	sig := webhook.SignStandard(id, sent.Unix(), body, secret)
	ts := strconv.FormatInt(sent.Unix(), 10)
	for _, c := range []struct {
		now       time.Duration
		tolerance time.Duration
		want      error
	}{
		{0, 0, nil},
		{5 * time.Minute, 0, nil},
		{-5 * time.Minute, 0, nil},
		{5*time.Minute + time.Second, 0, webhook.ErrTimestamp},
		{-5*time.Minute - time.Second, 0, webhook.ErrTimestamp},
		{time.Hour, 0, webhook.ErrTimestamp},
		{time.Hour, 2 * time.Hour, nil},
		{2 * time.Minute, time.Minute, webhook.ErrTimestamp},
	} {
		o := webhook.VerifyOptions{Now: func() time.Time { return sent.Add(c.now) }, Tolerance: c.tolerance}
		if err := webhook.VerifyStandard(body, id, ts, sig, secret, o); !errors.Is(err, c.want) && !(err == nil && c.want == nil) {
			t.Errorf("received %v after sending, tolerance %v: %v, want %v", c.now, c.tolerance, err, c.want)
		}
	}
}

func TestStandardRejects(t *testing.T) {
	t.Parallel()
	const secret, id, ts = "at-least-8-chars", "0190f5a2", "1767225600"
	body := []byte(`{"job_id":"x"}`)
	good := webhook.SignStandard(id, 1767225600, body, secret)
	other := webhook.SignStandard(id, 1767225600, body, "another secret")
	cases := []struct {
		name, id, ts, sig string
		want              error
	}{
		{"no id", "", ts, good, webhook.ErrMissing},
		{"no timestamp", id, "", good, webhook.ErrMissing},
		{"no signature", id, ts, "", webhook.ErrMissing},
		{"long id", strings.Repeat("a", 257), ts, good, webhook.ErrMalformed},
		{"long signature", id, ts, strings.Repeat(good+" ", 40), webhook.ErrMalformed},
		{"nine values", id, ts, strings.TrimSpace(strings.Repeat(other+" ", 8) + good), webhook.ErrMalformed},
		{"no v1 value", id, ts, "v2," + strings.TrimPrefix(good, "v1,"), webhook.ErrMalformed},
		{"not base64", id, ts, "v1,!!!!", webhook.ErrMalformed},
		{"short MAC", id, ts, "v1,AAAA", webhook.ErrMalformed},
		{"signed timestamp", id, "+1767225600", good, webhook.ErrTimestamp},
		{"fractional timestamp", id, "1767225600.0", good, webhook.ErrTimestamp},
		{"milliseconds", id, "1767225600000", good, webhook.ErrTimestamp},
		{"wrong secret", id, ts, other, webhook.ErrMismatch},
	}
	for _, c := range cases {
		if err := webhook.VerifyStandard(body, c.id, c.ts, c.sig, secret, at(ts)); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// Several values, as during a sender's secret rotation: one match is enough.
	if err := webhook.VerifyStandard(body, id, ts, other+" "+good, secret, at(ts)); err != nil {
		t.Errorf("two values, the second right: %v", err)
	}
}

// VerifyRequest checks the Standard Webhooks headers when they are there, else
// X-Service-Signature, unless the receiver requires the standard scheme.
func TestVerifyRequest(t *testing.T) {
	t.Parallel()
	const secret, id = "at-least-8-chars", "0190f5a2"
	body := []byte(`{"job_id":"x"}`)
	now := time.Unix(1767225600, 0)
	o := webhook.VerifyOptions{Now: func() time.Time { return now }}
	both := http.Header{}
	both.Set(webhook.Header, webhook.Sign(body, secret))
	both.Set(webhook.HeaderID, id)
	both.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	both.Set(webhook.HeaderSignature, webhook.SignStandard(id, now.Unix(), body, secret))
	if err := webhook.VerifyRequest(both, body, secret, o); err != nil {
		t.Fatalf("both schemes: %v", err)
	}
	// A replay of the same request ten minutes later fails on its timestamp, although its
	// X-Service-Signature is still right: the standard headers, once present, decide.
	late := webhook.VerifyOptions{Now: func() time.Time { return now.Add(10 * time.Minute) }}
	if err := webhook.VerifyRequest(both, body, secret, late); !errors.Is(err, webhook.ErrTimestamp) {
		t.Errorf("replayed late: %v, want ErrTimestamp", err)
	}
	legacy := http.Header{}
	legacy.Set(webhook.Header, both.Get(webhook.Header))
	if err := webhook.VerifyRequest(legacy, body, secret, late); err != nil {
		t.Errorf("X-Service-Signature alone: %v", err)
	}
	late.RequireStandard = true
	if err := webhook.VerifyRequest(legacy, body, secret, late); !errors.Is(err, webhook.ErrMissing) {
		t.Errorf("X-Service-Signature alone with RequireStandard: %v, want ErrMissing", err)
	}
	if err := webhook.VerifyRequest(http.Header{}, body, secret, o); !errors.Is(err, webhook.ErrMissing) {
		t.Errorf("no headers: %v, want ErrMissing", err)
	}
}

// The Python receiver of docs/api.md ("Signature") accepts the golden vectors within the
// tolerance and refuses them outside it, so the documented code is code that works.
func TestDocumentedPythonReceiver(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "Python, standard library only:\n\n```python\n")
	code, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatal("docs/api.md has no Python receiver under \"Python, standard library only:\"")
	}
	harness := code + `
import json, sys, time
class Headers(dict):
    def get(self, k): return dict.get(self, k.lower())
for v in json.load(open(sys.argv[1])):
    h = Headers({"webhook-id": v["id"], "webhook-timestamp": v["timestamp"], "webhook-signature": v["signature"]})
    time.time = lambda: int(v["timestamp"]) + 299
    assert webhook_ok(v["secret"], v["body"].encode(), h), v["id"]
    time.time = lambda: int(v["timestamp"]) + 301
    assert not webhook_ok(v["secret"], v["body"].encode(), h), v["id"] + " replayed late"
    time.time = lambda: int(v["timestamp"])
    assert not webhook_ok(v["secret"], v["body"].encode() + b" ", h), v["id"] + " altered"
    # A receiver whose secret is empty refuses a request signed with the empty key.
    forged = "v1," + base64.b64encode(hmac.new(b"", f'{v["id"]}.{v["timestamp"]}.'.encode() + v["body"].encode(), hashlib.sha256).digest()).decode()
    assert not webhook_ok("", v["body"].encode(), Headers({"webhook-id": v["id"], "webhook-timestamp": v["timestamp"], "webhook-signature": forged})), v["id"] + " empty secret"
for v in json.load(open(sys.argv[2])):
    assert service_signature_ok(v["secret"], v["body"].encode(), v["signature"])
    forged = "sha256=" + hmac.new(b"", v["body"].encode(), hashlib.sha256).hexdigest()
    assert not service_signature_ok("", v["body"].encode(), forged), "empty secret"
print("ok")
`
	out, err := exec.Command(python, "-c", harness,
		"../internal/webhook/testdata/standard-signatures.json", "../internal/webhook/testdata/signatures.json").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("python receiver: %v\n%s", err, out)
	}
}
