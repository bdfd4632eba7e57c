package database

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestUnreachable(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("read account: %w", err) }
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("some bug"), false},
		{context.Canceled, false}, // the client went away; Postgres may be fine
		{wrap(context.DeadlineExceeded), true},
		{wrap(io.ErrUnexpectedEOF), true},
		{wrap(pgconn.ErrConnClosed), true},
		{wrap(&pgconn.PgError{Code: "42P01"}), false}, // undefined table: a statement refused
		{wrap(&pgconn.PgError{Code: "23505"}), false},
		{wrap(&pgconn.PgError{Code: "57P01"}), true}, // admin shutdown
		{wrap(&pgconn.PgError{Code: "57P03"}), true}, // starting up
		{wrap(&pgconn.PgError{Code: "53300"}), true}, // too many connections
		{wrap(&pgconn.PgError{Code: "08006"}), true},
	}
	for _, c := range cases {
		if got := Unreachable(c.err); got != c.want {
			t.Errorf("Unreachable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// Failed authentication cannot be waited out; Postgres starting up can.
func TestPermanentErrors(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig("postgres://u@127.0.0.1:5432/mailvet")
	if err != nil {
		t.Fatal(err)
	}
	for code, want := range map[string]bool{"28P01": true, "28000": true, "3D000": true, "57P03": false, "53300": false} {
		got := permanent(cfg, fmt.Errorf("connect: %w", &pgconn.PgError{Code: code}))
		if (got != nil) != want {
			t.Errorf("SQLSTATE %s: permanent = %v, want %v", code, got, want)
		}
	}
	if err := permanent(cfg, &pgconn.PgError{Code: "3D000"}); !strings.Contains(err.Error(), `database "mailvet" does not exist: run`) {
		t.Errorf("3D000: %v", err)
	}
	if permanent(cfg, io.ErrUnexpectedEOF) != nil {
		t.Error("a dropped connection is not permanent")
	}
}
