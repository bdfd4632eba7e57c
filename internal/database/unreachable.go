package database

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unreachable reports whether err means that Postgres could not be reached or did not answer in
// time (a partition, a restart, an overloaded server), as opposed to a statement it refused. Such
// a failure is temporary from the client's point of view: the API answers it with a 503 and
// Retry-After rather than a 500.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return unavailableState(pgErr.Code)
	}
	var (
		netErr     net.Error
		connectErr *pgconn.ConnectError
	)
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) ||
		errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// unavailableState reports whether a server error says the server cannot serve right now: a
// connection exception (class 08), a shutdown or start-up in progress (57P01–57P03), or too many
// connections (53300).
func unavailableState(code string) bool {
	switch code {
	case "57P01", "57P02", "57P03", "53300":
		return true
	}
	return strings.HasPrefix(code, "08")
}

// ReferenceGone reports whether err is a foreign-key violation on a column named column: the row
// it names was deleted while the statement's transaction was being prepared. Mailvet's foreign
// keys keep Postgres's default names (<table>_<column>_fkey), so the column is in the name.
func ReferenceGone(err error, column string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503" && strings.HasSuffix(pgErr.ConstraintName, "_"+column+"_fkey")
}
