package webhook

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// The golden vectors were computed with OpenSSL, not with this package: see
// testdata/gen-signatures.sh.
func TestSignGolden(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/signatures.json")
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
		if got := Sign([]byte(v.Secret), []byte(v.Body)); got != v.Signature {
			t.Errorf("Sign(%q, %q) = %s, want %s", v.Secret, v.Body, got, v.Signature)
		}
		if err := Verify([]byte(v.Secret), []byte(v.Body), v.Signature); err != nil {
			t.Errorf("Verify of golden vector %q: %v", v.Body, err)
		}
		// One byte more is another body: the MAC is over the exact bytes.
		if err := Verify([]byte(v.Secret), []byte(v.Body+" "), v.Signature); !errors.Is(err, ErrSignatureMismatch) {
			t.Errorf("Verify of altered body = %v, want mismatch", err)
		}
	}
}

func TestVerifyRejects(t *testing.T) {
	t.Parallel()
	secret, body := []byte("whsec_12345678"), []byte(`{"job_id":"x"}`)
	good := Sign(secret, body)
	hexPart := strings.TrimPrefix(good, "sha256=")
	tests := []struct {
		name, header string
		want         error
	}{
		{"missing", "", ErrSignatureMissing},
		{"no prefix", hexPart, ErrSignatureMalformed},
		{"wrong algorithm", "sha1=" + hexPart, ErrSignatureMalformed},
		{"uppercase prefix", "SHA256=" + hexPart, ErrSignatureMalformed},
		{"prefix only", "sha256=", ErrSignatureMalformed},
		{"short", good[:len(good)-2], ErrSignatureMalformed},
		{"long", good + "00", ErrSignatureMalformed},
		{"uppercase hex", "sha256=" + strings.ToUpper(hexPart), ErrSignatureMalformed},
		{"non-hex", "sha256=" + strings.Repeat("zz", 32), ErrSignatureMalformed},
		{"leading space", " " + good, ErrSignatureMalformed},
		{"trailing junk", good[:len(good)-1] + "g", ErrSignatureMalformed},
		{"two values", good + "," + good, ErrSignatureMalformed},
		{"other secret", Sign([]byte("another-secret"), body), ErrSignatureMismatch},
		{"all zero", "sha256=" + strings.Repeat("0", 64), ErrSignatureMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := Verify(secret, body, tt.header); !errors.Is(err, tt.want) {
				t.Errorf("Verify(%q) = %v, want %v", tt.header, err, tt.want)
			}
		})
	}
	if err := Verify(secret, body, good); err != nil {
		t.Errorf("Verify(good) = %v", err)
	}
}
