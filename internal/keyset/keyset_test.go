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

// A page request: 0 is the default size, the size is 1 to max, and a cursor positions the page
// after the row it was issued for.
func TestParse(t *testing.T) {
	p, err := Parse(0, 20, 100, "")
	if err != nil || p.Size != 20 || p.AfterAt != nil || p.AfterID != nil {
		t.Errorf("Parse(0, 20, 100, \"\") = %+v, %v; want the first page of 20", p, err)
	}
	for _, limit := range []int{-1, 101} {
		if _, err := Parse(limit, 20, 100, ""); err == nil || err.Error() != "limit must be from 1 to 100" {
			t.Errorf("Parse(%d, 20, 100) = %v; want the limit's bounds", limit, err)
		}
	}
	c := Cursor{At: time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC), ID: uuid.New()}
	p, err = Parse(100, 20, 100, c.Encode())
	if err != nil || p.Size != 100 || p.AfterAt == nil || !p.AfterAt.Equal(c.At) || p.AfterID == nil || *p.AfterID != c.ID {
		t.Errorf("Parse with a cursor = %+v, %v; want size 100 after %v", p, err, c)
	}
	if _, err := Parse(10, 20, 100, "bad"); !errors.Is(err, ErrBadCursor) {
		t.Errorf("Parse with a bad cursor = %v, want ErrBadCursor", err)
	}
}

// Cut keeps the page and names the next one only when the extra row came back.
func TestCut(t *testing.T) {
	at := func(i int) Cursor { return Cursor{At: time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)} }
	rows, next := Cut([]int{5, 4, 3}, 2, at)
	if len(rows) != 2 || next != at(4).Encode() {
		t.Errorf("Cut of 3 rows to 2 = %v, %q; want [5 4] and the cursor of 4", rows, next)
	}
	rows, next = Cut([]int{5, 4}, 2, at)
	if len(rows) != 2 || next != "" {
		t.Errorf("Cut of 2 rows to 2 = %v, %q; want both and no next page", rows, next)
	}
}
