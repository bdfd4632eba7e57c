package usage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Request describes what a verify request, a bulk list or an asynchronous job asks to hold.
type Request struct {
	AccountID string
	Free      bool // free tier: monthly quota applies; paid tiers: spend cap applies
	// Units is the number of emails: each needs one rate-limit unit and one unit of the hold.
	Units int
	// RatePerMin and MonthlyCalls are the account's plan limits.
	RatePerMin   int
	MonthlyCalls int
	OverageEUR   float64 // price of one billable call over MonthlyCalls
	Now          time.Time
	// NoRate leaves the per-minute rate limit out: a bulk list is paced by the fleet, not by the
	// caller (docs/lists.md, "Metering"), and its units must not use up the rate window of the
	// account's other requests. The month's limit is checked the same way.
	NoRate bool
	// Hold is the hold's id: a list's or a job's own id, so that its transactions bill and
	// release it by that id. The zero id makes a new one.
	Hold uuid.UUID
	// Lifetime is how long the hold lives unless released: past it, the sweep gives its units
	// back (Expire). Zero: the hold never expires, for a list or a job whose end releases it.
	Lifetime time.Duration
}

// Decision is the outcome of a successful admission, for the RateLimit-* response headers.
type Decision struct {
	AccountID string
	Limit     int
	Remaining int
	// RateRead says Remaining was read from the rate window: admission got past its rate step,
	// also when a later step refused or failed. Without it Remaining is not known.
	RateRead bool
	Reset    time.Time // end of the current one-minute window
	Month    time.Time
	// Room is how many more emails the account could send now: the least of the rate window's
	// remaining units and the free quota left or, on paid tiers, the emails the spend cap still
	// allows. A hint (the API's headroom), not a promise.
	Room int
	// Hold is the admitted request's hold.
	Hold uuid.UUID
}

// RateLimited is returned when the per-minute limit would be exceeded.
type RateLimited struct {
	Limit int
	Used  int
	Asked int // the emails of the refused request
	Reset time.Time
	// At is when admission decided, on the clock Reset is on: Retry-After counts from it, as
	// RateLimit-Reset does (docs/api.md, "Headers"). Zero: the wall clock.
	At time.Time
	// Sandbox is set when the limit is the sandbox keys' own (docs/sandbox.md, "Limits").
	Sandbox bool
}

func (e *RateLimited) Error() string {
	return fmt.Sprintf("rate limit of %d per minute exceeded", e.Limit)
}

// QuotaExceeded is returned when the free tier's monthly quota would be exceeded.
type QuotaExceeded struct {
	Limit int
	Used  int       // units delivered or held this month
	Asked int       // the verifications of the refused request
	Reset time.Time // start of the next UTC month
	At    time.Time // when admission decided, as RateLimited.At
}

func (e *QuotaExceeded) Error() string {
	return fmt.Sprintf("monthly quota of %d verifications exceeded (%d used)", e.Limit, e.Used)
}

// SpendCapExceeded is returned when a paid request could take the period's overage past the cap.
type SpendCapExceeded struct {
	HardCapEUR        *float64
	CurrentOverageEUR float64
	// Asked is the emails of the refused request; Room how many the cap still allows now, all
	// assumed billable (docs/errors.md, "payment_required"): a request of at most Room passes.
	Asked int
	Room  int
	Reset time.Time // start of the next UTC month, when the period's overage starts again at 0
}

func (e *SpendCapExceeded) Error() string { return "hard spend cap would be exceeded" }

// Admit runs the admission statement (sql/admit.sql): it takes the request's rate-limit units
// and, when the request fits under the month's limit, holds its units, or says why not. One
// round trip and one commit on a pool; inside a caller's transaction (a list upload), the hold
// commits with it. An Admitter runs the same statement for many requests in one transaction.
func Admit(ctx context.Context, db DB, r Request) (Decision, error) {
	a := newAdmission(r)
	if err := ctx.Err(); err != nil {
		return a.d, notSent{a.failed(err)} // the caller has gone: nothing is sent
	}
	if err := a.scan(db.QueryRow(ctx, admitSQL, a.args...)); err != nil {
		return a.d, a.failed(err)
	}
	return a.decide(ctx, db)
}

// admission is one request on its way through the admission statement: its arguments, then what
// the statement returned. Admit runs it alone and an Admitter many in one transaction; both read
// the outcome with decide, so the rules are written once.
type admission struct {
	r    Request
	now  time.Time
	d    Decision
	args []any

	// The statement's answer: the rate window's count (nil: refused), the cap, whether the month
	// took the hold, and the month's counts (after the hold, or as they were on a refusal).
	used                  *int
	capEUR                *float64
	ok                    bool
	quota, billable, held int
}

func newAdmission(r Request) *admission {
	now := r.Now.UTC()
	if r.Hold == uuid.Nil {
		r.Hold = uuid.New()
	}
	a := &admission{r: r, now: now,
		d: Decision{AccountID: r.AccountID, Limit: r.RatePerMin, Reset: WindowEnd(now), Month: MonthStart(now)}}
	var limit, lifetime any // NULL: no rate step; no expiry
	if !r.NoRate {
		limit = r.RatePerMin
	}
	if r.Lifetime > 0 {
		lifetime = r.Lifetime
	}
	a.args = []any{r.AccountID, now.Truncate(time.Minute), r.Units, limit, a.d.Month, r.Free,
		r.MonthlyCalls, r.OverageEUR, r.Hold, lifetime}
	return a
}

// scan reads the admission statement's answer from row.
func (a *admission) scan(row pgx.Row) error {
	return row.Scan(&a.used, &a.capEUR, &a.ok, &a.quota, &a.billable, &a.held)
}

// failed is the error of an admission whose statement failed: on the free tier the statement is
// the monthly-quota check (docs/errors.md: 503 quota_check_failed). Whether or not it committed,
// nothing needs taking back: a hold it may have made expires (Request.Lifetime).
func (a *admission) failed(err error) error {
	out := fmt.Errorf("%w: %v", ErrUnavailable, err)
	if a.r.Free {
		out = fmt.Errorf("%w: %v", ErrQuotaCheck, err)
	}
	if pgconn.SafeToRetry(err) {
		return notSent{out}
	}
	return out
}

// notSent marks the error of an admission whose statement never reached Postgres (its context
// ended first, its connection could not be had): it holds nothing.
type notSent struct{ error }

func (e notSent) Unwrap() error { return e.error }

// admitted reports whether the statement admitted the request (and inserted its hold).
func (a *admission) admitted() bool { return a.used != nil && a.ok }

// RateUsed is how many emails the account has used of the one-minute rate window that holds now
// (0 when it has none yet).
func RateUsed(ctx context.Context, db DB, account string, now time.Time) (int, error) {
	used := 0
	err := db.QueryRow(ctx, rateSQL, account, now.UTC().Truncate(time.Minute)).Scan(&used)
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	return used, err
}

// decide turns the statement's answer into the decision or the refusal; a refusal by the rate
// window reads the count it reports from db.
func (a *admission) decide(ctx context.Context, db DB) (Decision, error) {
	r, d := a.r, a.d
	if a.used == nil {
		cur, err := RateUsed(ctx, db, r.AccountID, a.now)
		if err != nil {
			return d, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return d, &RateLimited{Limit: r.RatePerMin, Used: cur, Asked: r.Units, Reset: d.Reset, At: a.now}
	}
	d.Remaining, d.RateRead = max(0, r.RatePerMin-*a.used), true
	if r.NoRate {
		d.Remaining = math.MaxInt32
	}
	switch {
	case r.Free && !a.ok:
		return d, &QuotaExceeded{Limit: r.MonthlyCalls, Used: a.quota + a.held, Asked: r.Units, Reset: d.Month.AddDate(0, 1, 0), At: a.now}
	case !a.ok:
		// On a refusal the month's counts are as they were without this request's hold.
		return d, &SpendCapExceeded{HardCapEUR: a.capEUR, CurrentOverageEUR: overageEUR(a.billable, r.MonthlyCalls, r.OverageEUR),
			Asked: r.Units, Room: capRoom(a.capEUR, a.billable+a.held, r.MonthlyCalls, r.OverageEUR), Reset: d.Month.AddDate(0, 1, 0)}
	case r.Free:
		d.Room = min(d.Remaining, max(0, r.MonthlyCalls-a.quota-a.held))
	default:
		d.Room = min(d.Remaining, capRoom(a.capEUR, a.billable+a.held, r.MonthlyCalls, r.OverageEUR))
	}
	d.Hold = r.Hold
	return d, nil
}

// overageEUR prices the billable calls beyond the included volume, rounded to the cent.
func overageEUR(billable, included int, price float64) float64 {
	over := max(0, billable-included)
	return math.Round(float64(over)*price*100) / 100
}

// capRoom is how many more emails a paid account may send, all assumed billable, before the
// worst case would cross its spend cap: taken is the month's billed and held count after the
// request.
func capRoom(capEUR *float64, taken, included int, price float64) int {
	if capEUR == nil || price <= 0 {
		return math.MaxInt32
	}
	most := included + int(math.Floor((*capEUR+1e-9)/price))
	return max(0, most-taken)
}
