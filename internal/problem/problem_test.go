package problem_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/problem"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verification"
)

// A request that can never pass as it is — larger than the whole per-minute limit, or than the
// whole monthly quota — gets no Retry-After, and an action that says to split it; one that only
// has to wait gets the wait (docs/errors.md).
func TestAdmissionSplitOrWait(t *testing.T) {
	reset := time.Now().Add(30 * time.Second)
	cases := []struct {
		name        string
		err         error
		retry       bool
		actionStart string
	}{
		{"rate, wait", &usage.RateLimited{Limit: 10, Used: 10, Asked: 1, Reset: reset}, true, "Wait until reset_at"},
		{"rate, too large", &usage.RateLimited{Limit: 10, Used: 0, Asked: 11, Reset: reset}, false, "Split the request into requests of at most 10 emails"},
		{"quota, wait", &usage.QuotaExceeded{Limit: 100, Used: 100, Asked: 1, Reset: reset}, true, "Wait until reset_at"},
		{"quota, less left", &usage.QuotaExceeded{Limit: 100, Used: 90, Asked: 20, Reset: reset}, true, "Send at most 10 emails"},
		{"quota, too large", &usage.QuotaExceeded{Limit: 100, Used: 0, Asked: 101, Reset: reset}, false, "Split the request into requests of at most 100 emails"},
	}
	for _, c := range cases {
		// Wrapped, as the verification service and the list store return them.
		p := problem.Of(fmt.Errorf("admit: %w", c.err))
		if p == nil || p.Status != http.StatusTooManyRequests {
			t.Fatalf("%s: %+v, want a 429", c.name, p)
		}
		if got := p.Header.Get("Retry-After") != ""; got != c.retry {
			t.Errorf("%s: Retry-After %q, want one: %v", c.name, p.Header.Get("Retry-After"), c.retry)
		}
		if !strings.HasPrefix(p.Action, c.actionStart) {
			t.Errorf("%s: action %q, want it to start %q", c.name, p.Action, c.actionStart)
		}
		if p.Extra["limit"] == nil || p.Extra["reset_at"] == nil {
			t.Errorf("%s: extra fields %v, want limit and reset_at", c.name, p.Extra)
		}
	}
}

// The errors of receiving an upload close the connection, and say what the file did wrong;
// errors that are not the upload's own are left to Of.
func TestUploadProblems(t *testing.T) {
	cases := []struct {
		err    error
		status int
		says   string
	}{
		{&list.InputError{Line: 3, Msg: "no email column"}, http.StatusBadRequest, "line 3"},
		{&list.TooManyRowsError{Limit: 5}, http.StatusRequestEntityTooLarge, "more than 5 rows"},
		{&verification.FileTooLargeError{Size: 2048, Limit: 1024}, http.StatusRequestEntityTooLarge, "The file is 2048 bytes"},
		{fmt.Errorf("%w: %w", verification.ErrUploadRead, &verification.FileTooLargeError{Limit: 1024}), http.StatusRequestEntityTooLarge, "larger than 1024 bytes"},
		{fmt.Errorf("%w: unexpected EOF", verification.ErrUploadRead), http.StatusBadRequest, "(unexpected EOF)"},
	}
	for _, c := range cases {
		p := problem.Upload(c.err)
		if p == nil || p.Status != c.status || !strings.Contains(p.Message, c.says) || p.Header.Get("Connection") != "close" {
			t.Errorf("%v: %+v, want %d saying %q, closing the connection", c.err, p, c.status, c.says)
		}
	}
	busy := problem.Upload(&verification.UploadBusyError{Reason: errors.New("no slot")})
	if busy == nil || busy.Status != http.StatusServiceUnavailable || busy.Header.Get("Retry-After") != problem.RetryAfterSeconds {
		t.Errorf("a busy upload: %+v, want a 503 with Retry-After", busy)
	}
	if p := problem.Upload(list.ErrNotFound); p != nil {
		t.Errorf("a list error as an upload's: %+v", p)
	}
}

// A 503 names only a public cause; the chain behind any other goes to the log (Cause).
func TestUnavailableNamesPublicCausesOnly(t *testing.T) {
	p := problem.Of(&verification.UnavailableError{Cause: queue.ErrNoWorkers})
	if p == nil || p.Message != "Verification is temporarily unavailable: no verifier worker is running." || p.Cause != nil {
		t.Errorf("no workers: %+v", p)
	}
	secret := errors.New("nats: connection to 10.0.0.7 refused")
	p = problem.Of(&verification.UnavailableError{Cause: secret})
	if p == nil || strings.Contains(p.Message, "10.0.0.7") || !errors.Is(p.Cause, secret) {
		t.Errorf("an internal cause: %+v, want it kept for the log only", p)
	}
}

// A list store whose Postgres did not answer is a 503 to retry; a missing list is the list's 404.
func TestOfList(t *testing.T) {
	if p := problem.OfList(fmt.Errorf("get list: %w", &pgconn.ConnectError{})); p == nil || p.Status != http.StatusServiceUnavailable {
		t.Errorf("an unreachable store: %+v, want a 503", p)
	}
	if p := problem.OfList(list.ErrNotFound); p == nil || p.Status != http.StatusNotFound || p.Code != problem.CodeListNotFound {
		t.Errorf("a missing list: %+v", p)
	}
	if p := problem.Of(errors.New("something new")); p != nil {
		t.Errorf("an unknown error: %+v, want nil (the caller's internal error)", p)
	}
}
