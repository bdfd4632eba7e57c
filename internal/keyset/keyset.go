// Package keyset pages the logs read newest first by (time, id): the audit log (internal/audit)
// and the delivery log (internal/webhook). Both take a limit and an opaque cursor, fetch one row
// more than the page, and hand clients the same next_cursor (docs/api.md): base64url of the last
// row's time in Unix microseconds, Postgres' precision so that the (time, id) comparison is
// exact, followed by its id. One package serves both, so a rule about a page request or what a
// cursor may hold is kept in one place.
package keyset

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Cursor is the keyset position after the last row of a page: its time and id.
type Cursor struct {
	At time.Time
	ID uuid.UUID
}

// ErrBadCursor: the text was not issued by Encode. Callers wrap their own invalid-filter error
// around it, so a client is told which request was wrong.
var ErrBadCursor = errors.New("bad cursor")

// Issued cursors hold a stored row's time, so a time outside these bounds was not issued here.
// The bounds also keep the query's timestamp within what Postgres can hold (4713 BC to
// 294276 AD); beyond that the query would fail instead of the cursor being refused.
var (
	minTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Encode is the cursor's opaque text for a page's next_cursor.
func (c Cursor) Encode() string {
	b := make([]byte, 8, 24)
	binary.BigEndian.PutUint64(b, uint64(c.At.UnixMicro()))
	b = append(b, c.ID[:]...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Decode reads a cursor Encode issued, or returns ErrBadCursor.
func Decode(s string) (Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 24 {
		return Cursor{}, ErrBadCursor
	}
	c := Cursor{At: time.UnixMicro(int64(binary.BigEndian.Uint64(b[:8])))}
	if c.At.Before(minTime) || !c.At.Before(maxTime) {
		return Cursor{}, ErrBadCursor
	}
	copy(c.ID[:], b[8:])
	return c, nil
}

// Page is a page request as the query takes it: the page's size, and the time and id of the
// previous page's last row (both nil for the first page).
type Page struct {
	Size    int
	AfterAt *time.Time
	AfterID *uuid.UUID
}

// Parse reads a page request: limit is 0 for def, else 1 to max; cursor is "" for the first page,
// else what Encode issued. Its error says what is wrong, for the caller to wrap in its own
// invalid-filter error.
func Parse(limit, def, max int, cursor string) (Page, error) {
	p := Page{Size: limit}
	if p.Size == 0 {
		p.Size = def
	}
	if p.Size < 1 || p.Size > max {
		return Page{}, fmt.Errorf("limit must be from 1 to %d", max)
	}
	if cursor != "" {
		c, err := Decode(cursor)
		if err != nil {
			return Page{}, err
		}
		p.AfterAt, p.AfterID = &c.At, &c.ID
	}
	return p, nil
}

// Cut trims rows, fetched with one row more than size, to the page, and returns the cursor of
// the next page: "" when no row was left over, as then no page follows. at gives a row's
// position.
func Cut[T any](rows []T, size int, at func(T) Cursor) ([]T, string) {
	if len(rows) <= size {
		return rows, ""
	}
	return rows[:size], at(rows[size-1]).Encode()
}
