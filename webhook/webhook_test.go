package webhook_test

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/webhook"
)

// The golden vectors were computed with OpenSSL, independently of this code
// (internal/webhook/testdata/gen-signatures.sh); they are the ones the service's own tests use, so
// this package accepts exactly what the service signs.
func TestGoldenVectors(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../internal/webhook/testdata/signatures.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors []struct{ Secret, Body, Signature string }
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors) < 5 {
		t.Fatalf("only %d vectors", len(vectors))
	}
	for _, v := range vectors {
		if got := webhook.Sign([]byte(v.Body), v.Secret); got != v.Signature {
			t.Errorf("Sign(%q, %q) = %s, want %s", v.Body, v.Secret, got, v.Signature)
		}
		if err := webhook.Verify([]byte(v.Body), v.Signature, v.Secret); err != nil {
			t.Errorf("Verify of golden vector %q: %v", v.Body, err)
		}
		// One byte more is another body: the MAC is over the exact bytes.
		if err := webhook.Verify([]byte(v.Body+" "), v.Signature, v.Secret); !errors.Is(err, webhook.ErrMismatch) {
			t.Errorf("Verify of altered body %q = %v, want ErrMismatch", v.Body, err)
		}
		if err := webhook.Verify([]byte(v.Body), v.Signature, v.Secret+"x"); !errors.Is(err, webhook.ErrMismatch) {
			t.Errorf("Verify with another secret = %v, want ErrMismatch", err)
		}
	}
}

func TestVerifyRejects(t *testing.T) {
	t.Parallel()
	secret, body := "whsec_12345678", []byte(`{"job_id":"x"}`)
	good := webhook.Sign(body, secret)
	hexPart := strings.TrimPrefix(good, "sha256=")
	tests := []struct {
		name, header string
		want         error
	}{
		{"missing", "", webhook.ErrMissing},
		{"no prefix", hexPart, webhook.ErrMalformed},
		{"wrong algorithm", "sha1=" + hexPart, webhook.ErrMalformed},
		{"uppercase prefix", "SHA256=" + hexPart, webhook.ErrMalformed},
		{"prefix only", "sha256=", webhook.ErrMalformed},
		{"short", good[:len(good)-2], webhook.ErrMalformed},
		{"long", good + "00", webhook.ErrMalformed},
		{"uppercase hex", "sha256=" + strings.ToUpper(hexPart), webhook.ErrMalformed},
		{"non-hex", "sha256=" + strings.Repeat("zz", 32), webhook.ErrMalformed},
		{"leading space", " " + good, webhook.ErrMalformed},
		{"trailing newline", good + "\n", webhook.ErrMalformed},
		{"two values", good + "," + good, webhook.ErrMalformed},
		{"other secret", webhook.Sign(body, "another-secret"), webhook.ErrMismatch},
		{"all zero", "sha256=" + strings.Repeat("0", 64), webhook.ErrMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := webhook.Verify(body, tt.header, secret); !errors.Is(err, tt.want) {
				t.Errorf("Verify(%q) = %v, want %v", tt.header, err, tt.want)
			}
		})
	}
	if err := webhook.Verify(body, good, secret); err != nil {
		t.Errorf("Verify(good) = %v", err)
	}
}
