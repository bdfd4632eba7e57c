// Package audit is the audit log of security events (docs/security.md, "Audit log"): who signed
// in or failed to, who created or revoked a key, changed a password or the spend cap, deleted
// the account, and from which client address. An account reads its own events on the dashboard's
// security page and at GET /v1/management/audit; operators read every row in Postgres, including
// failed sign-ins for emails without an account. Rows are kept for MAILVET_AUDIT_RETENTION
// (docs/operations.md) and then purged by RunRetention.
//
// Two ways to write, after what the event records (docs/security.md, "When an audit write fails"):
//
//   - Record writes the event of a change with the change's own transaction. If the event cannot
//     be written, the transaction fails and the change is not made: there is never a key, a new
//     password, a session or a deleted account without its event. Use it for every change.
//   - RecordOrLog writes the event of something already over that refusing would not undo or
//     would make worse: a refused sign-in, the throttle starting, a sign-out (a session must end
//     even when the log cannot be written). A failed write is logged at ERROR with the event
//     (never a secret) and counted in mailvet_audit_write_failures_total, for an alert.
package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/keyset"
	"github.com/mailvet/mailvet/internal/safetext"
)

// Kind names what happened. The values are stored and served (docs/api.md,
// "GET /v1/management/audit"), so they never change; a new kind is added to Kinds, the list in
// docs/security.md and the OpenAPI enum.
type Kind string

// The event kinds.
const (
	SignIn           Kind = "signin"           // a dashboard password sign-in; failure: wrong email or password
	SignInThrottled  Kind = "signin_throttled" // the sign-in throttle began delaying attempts (failure)
	SignUp           Kind = "signup"           // a dashboard sign-up created the account
	SignOut          Kind = "signout"          // a dashboard session was ended by its user
	PasswordChange   Kind = "password_change"  // failure: the current password given was wrong
	KeyCreated       Kind = "key_created"      // an API key (standard or provisioning) was created
	KeyRevoked       Kind = "key_revoked"      // an API key was revoked
	SpendCapChanged  Kind = "spend_cap_changed"
	PlanChanged      Kind = "plan_changed" // a Stripe subscription event moved the account to another tier
	AccountDeleted   Kind = "account_deleted"
	EmailConfirmed   Kind = "email_confirmed"   // the account's email was confirmed: by its mailed link, or by an operator (api admin confirm-email)
	AccountExported  Kind = "account_exported"  // the account's data export was downloaded (API or dashboard)
	DeliveryReplayed Kind = "delivery_replayed" // a failed webhook delivery was sent again (API or dashboard)
	HistoryDeleted   Kind = "history_deleted"   // one address's stored results were deleted (DELETE /v1/email/history)
	// BillingPortalOpened: a Stripe billing portal session was opened (API or dashboard). Its URL
	// lets whoever holds it change the card and the subscription, so it is never given out
	// without its event.
	BillingPortalOpened Kind = "billing_portal_opened"
)

// Kinds lists every kind, for the documentation checks and the OpenAPI enum.
var Kinds = []Kind{SignIn, SignInThrottled, SignUp, SignOut, PasswordChange, KeyCreated, KeyRevoked,
	SpendCapChanged, PlanChanged, AccountDeleted, EmailConfirmed, AccountExported, DeliveryReplayed, HistoryDeleted, BillingPortalOpened}

// Outcome says whether what the event records succeeded.
type Outcome string

// The outcomes.
const (
	Success Outcome = "success"
	Failure Outcome = "failure"
)

// ActorType says what Actor names.
type ActorType string

// The actor types.
const (
	ActorUser   ActorType = "dashboard_user" // Actor is the dashboard user's email
	ActorKey    ActorType = "api_key"        // Actor is the key's display form, sk_mgmt_ab12…yz89
	ActorSystem ActorType = "system"         // Actor is a part of Mailvet or a provider, like "stripe"
)

// Bounds of the stored text (migrations/00024_audit_log.sql); longer text is cut, never refused:
// an event is never lost to its own length.
const (
	MaxActorLen  = 254 // characters; a dashboard email is at most 254
	MaxDetailLen = 200 // characters
)

// Event is one audit event.
type Event struct {
	ID uuid.UUID // set by Record when zero
	// At is when it happened; zero means the database's now(), the one clock every replica shares.
	At time.Time
	// AccountID is the account the event belongs to; "" for none (a failed sign-in for an email
	// without an account, which only operators see).
	AccountID string
	ActorType ActorType
	// Actor says who acted (ActorType). Never a secret: a key appears only as its display form.
	Actor string
	// Client is the client's address (internal/clientaddr); the zero Addr when unknown.
	Client  netip.Addr
	Kind    Kind
	Outcome Outcome
	// Detail is a short human sentence (at most MaxDetailLen characters, cut beyond), such as the
	// label and display form of the key created. Never a secret.
	Detail string
}

// ErrInvalidEvent: an event without a kind, with an unknown outcome or actor type, or with an
// account id that is not a UUID. It is a programming error of the caller.
var ErrInvalidEvent = errors.New("invalid audit event")

// ErrInvalidFilter: a List filter with a limit out of range or a cursor this package did not issue.
var ErrInvalidFilter = errors.New("invalid audit filter")

func (e *Event) check() error {
	switch {
	case e.Kind == "" || len(e.Kind) > 40:
		return fmt.Errorf("%w: kind %q", ErrInvalidEvent, e.Kind)
	case e.Outcome != Success && e.Outcome != Failure:
		return fmt.Errorf("%w: outcome %q", ErrInvalidEvent, e.Outcome)
	case e.ActorType != ActorUser && e.ActorType != ActorKey && e.ActorType != ActorSystem:
		return fmt.Errorf("%w: actor type %q", ErrInvalidEvent, e.ActorType)
	case e.AccountID != "" && uuid.Validate(e.AccountID) != nil:
		return fmt.Errorf("%w: account id %q", ErrInvalidEvent, e.AccountID)
	}
	return nil
}

// clip is s without control or bidirectional characters (it reaches pages and terminals as it
// is; package safetext), cut to max characters.
func clip(s string, max int) string {
	s = strings.TrimSpace(safetext.Strip(strings.ToValidUTF8(s, "\uFFFD")))
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}

// Record writes e with db. db should be the transaction that makes the change e records, so that
// the change and its event commit together or not at all; an error from Record must fail that
// transaction (return it from pgx.BeginFunc's function). This is the function to call for every
// security-relevant change, account deletion included:
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if err := deleteAccount(ctx, tx, id); err != nil {
//			return err
//		}
//		return audit.Record(ctx, tx, audit.Event{AccountID: id, ActorType: audit.ActorUser, Actor: email,
//			Client: addr, Kind: audit.AccountDeleted, Outcome: audit.Success})
//	})
func Record(ctx context.Context, db database.DB, e Event) error {
	if err := e.check(); err != nil {
		return err
	}
	if e.ID == uuid.Nil {
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		e.ID = id
	}
	var at *time.Time
	if !e.At.IsZero() {
		at = &e.At
	}
	var account *string
	if e.AccountID != "" {
		account = &e.AccountID
	}
	var client *string
	if e.Client.IsValid() {
		c := e.Client.Unmap().String()
		client = &c
	}
	_, err := db.Exec(ctx, `
		INSERT INTO audit_events (id, at, account_id, actor_type, actor, client_addr, kind, outcome, detail)
		VALUES ($1, coalesce($2, now()), $3, $4, $5, $6::inet, $7, $8, $9)`,
		e.ID, at, account, string(e.ActorType), clip(e.Actor, MaxActorLen), client, string(e.Kind), string(e.Outcome),
		clip(e.Detail, MaxDetailLen))
	if err != nil {
		return fmt.Errorf("write audit event %s: %w", e.Kind, err)
	}
	return nil
}

// writeFailures counts the events RecordOrLog could not write, for
// mailvet_audit_write_failures_total.
var writeFailures atomic.Int64

// RecordOrLog writes e with db, for an event of something that is over and that failing would
// not undo (a refused sign-in, a sign-out). When the write fails, the event is logged at ERROR
// instead (with its fields: no secret is ever in an event) and counted in
// mailvet_audit_write_failures_total, so the gap in the log is seen and alerted on, never silent.
func RecordOrLog(ctx context.Context, db database.DB, log *slog.Logger, e Event) {
	err := Record(ctx, db, e)
	if err == nil {
		return
	}
	writeFailures.Add(1)
	if log == nil {
		log = slog.Default()
	}
	client := ""
	if e.Client.IsValid() {
		client = e.Client.String()
	}
	log.Error("audit event not written", "err", err, "kind", e.Kind, "outcome", e.Outcome, "account_id", e.AccountID,
		"actor_type", e.ActorType, "actor", clip(e.Actor, MaxActorLen), "client", client, "detail", clip(e.Detail, MaxDetailLen))
}

// WriteFailures is how many events RecordOrLog could not write since the process started.
func WriteFailures() int64 { return writeFailures.Load() }

// Metric is mailvet_audit_write_failures_total, for the process's registry.
func Metric() prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "mailvet_audit_write_failures_total",
		Help: "Audit events that could not be written and were logged at ERROR instead (docs/security.md, \"Audit log\").",
	}, func() float64 { return float64(WriteFailures()) })
}

// Page sizes of List.
const (
	DefaultPageSize = 50
	MaxPageSize     = 200
)

// Filter selects a page of an account's events.
type Filter struct {
	Limit  int    // 1–MaxPageSize; 0 means DefaultPageSize
	Cursor string // NextCursor of the previous page; "" for the first
}

// Page is one page of events, newest first. NextCursor is empty on the last page.
type Page struct {
	Events     []Event
	NextCursor string
}

// List returns a page of accountID's events, newest first. Only that account's events are ever
// read: a cursor carries no account, so another account's cursor only positions within this one's.
func List(ctx context.Context, db database.DB, accountID string, f Filter) (Page, error) {
	if uuid.Validate(accountID) != nil {
		return Page{}, fmt.Errorf("%w: account id", ErrInvalidFilter)
	}
	pg, err := keyset.Parse(f.Limit, DefaultPageSize, MaxPageSize, f.Cursor)
	if err != nil {
		return Page{}, fmt.Errorf("%w: %w", ErrInvalidFilter, err)
	}
	// One row more than the page tells whether another page follows.
	rows, err := db.Query(ctx, `
		SELECT id, at, account_id::text, actor_type, actor, host(client_addr), kind, outcome, detail
		FROM audit_events
		WHERE account_id = $1
		  AND ($2::timestamptz IS NULL OR (at, id) < ($2, $3::uuid))
		ORDER BY at DESC, id DESC
		LIMIT $4`, accountID, pg.AfterAt, pg.AfterID, pg.Size+1)
	if err != nil {
		return Page{}, fmt.Errorf("list audit events: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var (
			e                        Event
			client                   *string
			actorType, kind, outcome string
		)
		if err := r.Scan(&e.ID, &e.At, &e.AccountID, &actorType, &e.Actor, &client, &kind, &outcome, &e.Detail); err != nil {
			return e, err
		}
		e.ActorType, e.Kind, e.Outcome = ActorType(actorType), Kind(kind), Outcome(outcome)
		if client != nil {
			e.Client, _ = netip.ParseAddr(*client)
		}
		return e, nil
	})
	if err != nil {
		return Page{}, fmt.Errorf("list audit events: %w", err)
	}
	var page Page
	page.Events, page.NextCursor = keyset.Cut(events, pg.Size, func(e Event) keyset.Cursor { return keyset.Cursor{At: e.At, ID: e.ID} })
	return page, nil
}
