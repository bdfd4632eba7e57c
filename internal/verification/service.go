// Package verification runs a verify request from start to end, with no HTTP in it: the local
// layers, admission, the worker fleet, billing what was delivered and giving back the rest
// (docs/architecture.md, "Verification service"), and the bulk lists' uploads and actions
// (lists.go). The API's handlers and the dashboard's pages are its adapters: they parse a request
// or a form, call the service, write what it returns, and word its typed errors with the one
// error mapping (internal/problem).
package verification

import (
	"context"
	"errors"
	"fmt"
	"github.com/mailvet/mailvet/internal/sealed"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/list"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verdict"
)

// Local runs the local layers (syntax, disposable, signals) in the calling process; final is true
// when they already decide the result, so no worker round trip is needed.
type Local interface {
	Local(raw string) (r verdict.Result, final bool)
}

// Fleet is the verifier workers as the service asks them (queue.Dispatcher).
type Fleet interface {
	// Up reports whether the broker connection is up.
	Up() bool
	// WorkersAlive reports whether any verifier worker was seen recently.
	WorkersAlive(ctx context.Context) bool
	VerifyOne(ctx context.Context, email string) (verdict.Result, error)
	// VerifyMany calls each in completion order; missing is the indexes not answered before ctx
	// ended.
	VerifyMany(ctx context.Context, emails []string, each func(i int, r verdict.Result)) (missing []int, err error)
	PublishJob(ctx context.Context, jobID uuid.UUID) error
}

// Bounds of the verify requests (docs/api.md, "Limits").
const (
	MaxEmailLen    = 1024 // longer is not an address; refused before any work
	MaxBatch       = 100
	MaxStream      = 1000
	MinSecretLen   = 8
	MaxSecretLen   = 256
	SyncDeadline   = 10 * time.Second
	BatchDeadline  = 30 * time.Second
	StreamDeadline = 120 * time.Second
)

// holdMargin is how long a request's hold outlives the request's deadline (usage.Request.
// Lifetime): the time for its last rows and its release to be written behind the response, with
// room for a Postgres failover. A replica killed mid-request has its requests' room back within
// their lifetime plus one sweep (docs/reliability.md, "Metering guarantees").
const holdMargin = time.Minute

// StopGrace is how long a batch or stream may still wait for answers in flight once the service
// has begun to shut down; it stays well inside app.ShutdownGrace so the list can end properly.
const StopGrace = time.Second

// Config is what the service is built from.
type Config struct {
	Local  Local
	Fleet  Fleet
	Ledger *usage.Ledger
	// Pool stores asynchronous jobs and reads rate windows.
	Pool *pgxpool.Pool
	Log  *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// SandboxRatePerMin is sandbox keys' rate limit, emails a minute per account
	// (MAILVET_SANDBOX_RATE_PER_MIN); 0 means DefaultSandboxRatePerMin.
	SandboxRatePerMin int
	// PublishDelivery hands a stored webhook delivery to the webhook workers (webhook.Publish);
	// nil leaves it to their outbox sweep.
	PublishDelivery func(ctx context.Context, deliveryID uuid.UUID) error
	// Secrets seal the jobs' webhook secrets before they are stored (config.Config.Secrets;
	// docs/operations.md, "Secrets at rest"); nil means sealed.Process().
	Secrets *sealed.Keys
	// Lists stores the bulk lists (lists.go); JS and Layout are where their chunks are published.
	Lists      *list.Store
	JS         jetstream.JetStream
	Layout     queue.Layout
	ListLimits ListLimits
	Uploads    UploadLimits
}

// Service verifies requests. It is safe for concurrent use.
type Service struct {
	local    Local
	fleet    Fleet
	ledger   *usage.Ledger
	pool     *pgxpool.Pool
	log      *slog.Logger
	now      func() time.Time
	headroom *headroom
	secrets  *sealed.Keys

	sandboxRate     int
	publishDelivery func(context.Context, uuid.UUID) error

	lists      *list.Store
	js         jetstream.JetStream
	layout     queue.Layout
	listLimits ListLimits
	uploads    uploadSlots // the uploads being received (lists.go)

	// stopping is closed when the service begins to shut down (BeginShutdown): lists in flight
	// then end properly instead of being cut.
	stopping chan struct{}
	stopOnce sync.Once
}

// New returns a service.
func New(c Config) *Service {
	s := &Service{local: c.Local, fleet: c.Fleet, ledger: c.Ledger, pool: c.Pool, log: c.Log, now: c.Now,
		headroom: newHeadroom(), secrets: sealed.Or(c.Secrets), stopping: make(chan struct{}), sandboxRate: c.SandboxRatePerMin, publishDelivery: c.PublishDelivery,
		lists: c.Lists, js: c.JS, layout: c.Layout, listLimits: c.ListLimits}
	if s.sandboxRate <= 0 {
		s.sandboxRate = DefaultSandboxRatePerMin
	}
	s.uploads.limits = c.Uploads
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s
}

// BeginShutdown tells batches and streams in flight that the process is going away: they end
// within StopGrace, a stream with what it could not verify, instead of being cut off.
func (s *Service) BeginShutdown() { s.stopOnce.Do(func() { close(s.stopping) }) }

// Caller is the account a request is made for, with the key it used.
type Caller struct {
	Account string
	Key     string // empty when no key is known
	Tier    plan.Tier
	Limits  plan.Limits
	// Sandbox is true for a sandbox key (sk_test_…): the request is answered by the sandbox,
	// never probed nor billed (docs/sandbox.md).
	Sandbox bool
}

// Request is one verify request: who asks, and the names its usage rows are written under.
type Request struct {
	Caller Caller
	// Key prefixes the usage-log item keys of the request ("<key>:<index>"). The caller makes it
	// unique per request: a reused one would have its later rows skipped as duplicates.
	Key string
	// Start is when the request began, for the results' latency; zero means now.
	Start time.Time
	// Stored, when set, runs inside the transaction that stores an asynchronous job, with the
	// job's id and the caller's window: the API keeps the request's Idempotency-Key answer there,
	// so that the key and the job commit together (docs/api.md, "Idempotency").
	Stored func(ctx context.Context, tx pgx.Tx, job uuid.UUID, w Window) error
}

func (r Request) start() time.Time {
	if r.Start.IsZero() {
		return time.Now()
	}
	return r.Start
}

// item names the email at index i of the request for the usage log.
func (r Request) item(route string, i int) usage.Item {
	return usage.Item{Key: r.Key + ":" + strconv.Itoa(i), AccountID: r.Caller.Account, KeyID: r.Caller.Key, Route: route}
}

// Why a request ended early, named in its error (the API's envelope names them to the client).
var (
	ErrShuttingDown = errors.New("the server is shutting down")
	ErrUnstored     = errors.New("the job could not be stored")
)

// InvalidError is bad input: the message names the field and the rule.
type InvalidError struct{ Message string }

func (e *InvalidError) Error() string { return e.Message }

func invalid(format string, args ...any) error {
	return &InvalidError{Message: fmt.Sprintf(format, args...)}
}

// UnavailableError is a request refused or ended because a dependency (the broker, the workers,
// the job store) is down or saturated; nothing was charged, and the client retries. Cause is the
// failure behind it.
type UnavailableError struct{ Cause error }

func (e *UnavailableError) Error() string { return "verification unavailable: " + e.Cause.Error() }
func (e *UnavailableError) Unwrap() error { return e.Cause }

func unavailable(cause error) error { return &UnavailableError{Cause: cause} }

// CheckEmail bounds one address field; its content is the layers' business.
func CheckEmail(field, e string) error {
	switch {
	case strings.TrimSpace(e) == "":
		return invalid("Field %s is empty; send an email address.", field)
	case len(e) > MaxEmailLen:
		return invalid("Field %s is longer than %d bytes.", field, MaxEmailLen)
	case !utf8.ValidString(e):
		return invalid("Field %s is not valid UTF-8.", field)
	}
	return nil
}

// checkList bounds the emails of a batch or stream.
func checkList(emails []string, limit int) error {
	if len(emails) == 0 {
		return invalid("Field emails is empty; send 1 to %d email addresses.", limit)
	}
	if len(emails) > limit {
		return invalid("Field emails must hold 1 to %d addresses, not %d; split larger lists into several requests.", limit, len(emails))
	}
	for i, e := range emails {
		if err := CheckEmail(fmt.Sprintf("emails[%d]", i), e); err != nil {
			return err
		}
	}
	return nil
}

func elapsedMS(start time.Time) float64 {
	return float64(time.Since(start).Nanoseconds()) / 1e6
}
