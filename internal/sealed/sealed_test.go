package sealed

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mustKeys(t *testing.T, cur, old []byte) *Keys {
	t.Helper()
	k, err := New(cur, old)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpenRoundTripAndFormat(t *testing.T) {
	a := bytes.Repeat([]byte{1}, KeySize)
	k := mustKeys(t, a, nil)
	v, err := k.Seal("correct horse battery staple")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v, "mvs1:"+KeyID(a)+":") || strings.Contains(v, "horse") {
		t.Fatalf("sealed value %q", v)
	}
	if len(KeyID(a)) != 8 {
		t.Fatalf("key id %q", KeyID(a))
	}
	w, _ := k.Seal("correct horse battery staple")
	if v == w {
		t.Fatal("two seals of one secret are equal: the nonce is not fresh")
	}
	got, err := k.Open(v)
	if err != nil || got != "correct horse battery staple" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if !k.Current(v) {
		t.Fatal("Current of a value sealed under the current key")
	}
}

func TestOpenDuringRotation(t *testing.T) {
	oldKey, newKey := bytes.Repeat([]byte{1}, KeySize), bytes.Repeat([]byte{2}, KeySize)
	before := mustKeys(t, oldKey, nil)
	v, _ := before.Seal("s3cret-value")

	rotating := mustKeys(t, newKey, oldKey)
	if got, err := rotating.Open(v); err != nil || got != "s3cret-value" {
		t.Fatalf("old value under rotation keys: %q, %v", got, err)
	}
	if rotating.Current(v) {
		t.Fatal("a value under the old key is not current")
	}
	if rotating.OldID() != KeyID(oldKey) || rotating.CurrentID() != KeyID(newKey) {
		t.Fatal("key ids")
	}
	after := mustKeys(t, newKey, nil)
	if _, err := after.Open(v); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("old value once the old key is gone: %v", err)
	}
}

func TestOpenRejectsTampering(t *testing.T) {
	a, b := bytes.Repeat([]byte{1}, KeySize), bytes.Repeat([]byte{2}, KeySize)
	k := mustKeys(t, a, b)
	v, _ := k.Seal("s3cret-value")
	body := v[len("mvs1:")+9:]
	raw, _ := base64.RawStdEncoding.DecodeString(body)
	raw[len(raw)-1] ^= 1
	flipped := "mvs1:" + KeyID(a) + ":" + base64.RawStdEncoding.EncodeToString(raw)
	// The same ciphertext relabelled with the other key's id fails too: the label is authenticated.
	relabelled := "mvs1:" + KeyID(b) + ":" + body
	for _, bad := range []string{flipped, relabelled, "mvs1:" + KeyID(a), "mvs1:" + KeyID(a) + ":!!", "mvs1:" + KeyID(a) + ":AAAA"} {
		if _, err := k.Open(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Open(%q) = %v, want ErrCorrupt", bad, err)
		}
	}
}

func TestOpenPassesLegacyPlaintext(t *testing.T) {
	k := mustKeys(t, bytes.Repeat([]byte{1}, KeySize), nil)
	if got, err := k.Open("stored-before-00023"); err != nil || got != "stored-before-00023" {
		t.Fatalf("Open legacy = %q, %v", got, err)
	}
	if k.Current("stored-before-00023") || IsSealed("stored-before-00023") {
		t.Fatal("a plaintext value is neither sealed nor current")
	}
}

func TestParseKey(t *testing.T) {
	raw := bytes.Repeat([]byte{0xab}, KeySize)
	for _, s := range []string{base64.StdEncoding.EncodeToString(raw), hex.EncodeToString(raw), " " + hex.EncodeToString(raw) + "\n"} {
		got, err := ParseKey(s)
		if err != nil || !bytes.Equal(got, raw) {
			t.Errorf("ParseKey(%q) = %x, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "short", base64.StdEncoding.EncodeToString(raw[:16]), strings.Repeat("zz", KeySize)} {
		_, err := ParseKey(s)
		if err == nil {
			t.Errorf("ParseKey(%q) accepted", s)
		} else if s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("the error repeats the value: %v", err)
		}
	}
	g, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := ParseKey(g); err != nil || len(b) != KeySize {
		t.Fatalf("a generated key does not parse: %v", err)
	}
}

func TestDevKeyIsKeptAcrossRuns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), ".data")
	a, err := DevKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := DevKey(dir)
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("second run got another key: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dir, DevKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
}

func TestProcessKeysAreOneKey(t *testing.T) {
	v, _ := Or(nil).Seal("x-secret-1")
	if got, err := Process().Open(v); err != nil || got != "x-secret-1" {
		t.Fatalf("%q %v", got, err)
	}
}
