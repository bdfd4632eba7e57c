package keyset

import (
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
)

// A cursor comes back as it was issued, to the microsecond Postgres keeps.
func TestRoundTrip(t *testing.T) {
	c := Cursor{At: time.Date(2026, 11, 29, 6, 32, 18, 123456000, time.UTC), ID: uuid.New()}
	got, err := Decode(c.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !got.At.Equal(c.At) || got.ID != c.ID {
		t.Errorf("Decode(Encode(%v)) = %v", c, got)
	}
}

// Text Encode did not issue is refused: not base64url, the wrong length, or a time outside what
// a stored row holds (which would also be outside what Postgres can compare).
func TestRefusesWhatWasNotIssued(t *testing.T) {
	id := uuid.New()
	for name, s := range map[string]string{
		"empty":       "",
		"not base64":  "not a cursor!",
		"short":       base64.RawURLEncoding.EncodeToString(make([]byte, 23)),
		"long":        base64.RawURLEncoding.EncodeToString(make([]byte, 25)),
		"before 2000": Cursor{At: time.Date(1999, 12, 31, 23, 59, 59, 0, time.UTC), ID: id}.Encode(),
		"year 10000":  Cursor{At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), ID: id}.Encode(),
	} {
		if _, err := Decode(s); !errors.Is(err, ErrBadCursor) {
			t.Errorf("%s: Decode(%q) = %v, want ErrBadCursor", name, s, err)
		}
	}
}
