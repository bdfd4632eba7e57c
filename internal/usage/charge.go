package usage

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Ledger admits requests and settles what they owe. It is the one place where a failed or
// partly delivered request is given its money back: handlers take a Charge from Admit and
// `defer charge.Close()`, like a deferred transaction, and mark what they delivered; Close
// refunds the rest. No handler calls a refund itself. See docs/api.md ("Metering").
type Ledger struct {
	db  DB
	log *slog.Logger
	// background counts refunds still being retried behind their responses; Close waits.
	background sync.WaitGroup
}

// NewLedger returns a ledger on db.
func NewLedger(db DB, log *slog.Logger) *Ledger { return &Ledger{db: db, log: log} }

// Close waits for the refunds still being retried.
func (l *Ledger) Close() { l.background.Wait() }

// Admit runs admission (Admit) and returns the request's charge. On refusal the charge is nil
// and nothing is owed (rate-limit units are spent, as Admit explains).
func (l *Ledger) Admit(ctx context.Context, r Request) (*Charge, Decision, error) {
	d, err := Admit(ctx, l.db, r)
	if err != nil {
		return nil, d, err
	}
	return &Charge{ledger: l, d: d, units: r.Units}, d, nil
}

// Charge is what one admitted request owes: its free-tier quota units, the usage rows admission
// wrote, and the rows the handler recorded for results. Each result is owed only once it has
// reached the client (Deliver, Settle); Close gives back everything else.
type Charge struct {
	ledger *Ledger
	d      Decision
	units  int

	mu        sync.Mutex
	settled   bool
	delivered int
	pending   map[string]bool // rows recorded (Record) whose results have not reached the client
	closed    bool
}

// Record writes result rows of this request (Record) and keeps them owed only until Close,
// unless Deliver or Settle says the client got them.
func (c *Charge) Record(ctx context.Context, rows []Row) error {
	if err := Record(ctx, c.ledger.db, rows); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		c.pending = make(map[string]bool, len(rows))
	}
	for _, r := range rows {
		c.pending[r.ItemKey] = true
	}
	return nil
}

// Deliver says the results of these recorded rows reached the client: they are owed.
func (c *Charge) Deliver(itemKeys ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range itemKeys {
		if c.pending[k] {
			delete(c.pending, k)
			c.delivered++
		}
	}
}

// Settle says the request was served in full: everything admitted is owed.
func (c *Charge) Settle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settled = true
}

// Close settles the charge: unless Settle was called, it takes back the rows of results that did
// not reach the client, the quota units of the emails not delivered, and the rows admission wrote
// that still have no verdict. It does not run on the request's context (a client that hung up is
// the commonest reason to get here, and its cancelled context must not leave the charge standing)
// and tries once, briefly, on the response's path; when Postgres does not answer, it goes on
// behind the response with backoff, so a partitioned database does not also hold the error
// response. Close may be called more than once; only the first counts.
func (c *Charge) Close() {
	c.mu.Lock()
	if c.closed || c.settled {
		c.closed = true
		c.mu.Unlock()
		return
	}
	c.closed = true
	withdraw := make([]string, 0, len(c.pending))
	for k := range c.pending {
		withdraw = append(withdraw, k)
	}
	refund := c.d
	refund.QuotaCharged = min(c.d.QuotaCharged, max(0, c.units-c.delivered))
	c.mu.Unlock()
	if len(withdraw) == 0 && refund.QuotaCharged == 0 && len(refund.Logged) == 0 {
		return
	}
	c.ledger.settle(refund, withdraw)
}

const (
	refundWait     = 500 * time.Millisecond // on the response's path
	refundPatience = 2 * time.Minute        // behind it
)

func (l *Ledger) settle(d Decision, withdraw []string) {
	var withdrawn bool
	try := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), refundWait)
		defer cancel()
		if !withdrawn {
			if err := Withdraw(ctx, l.db, d.AccountID, withdraw); err != nil {
				return err
			}
			withdrawn = true
		}
		return Refund(ctx, l.db, d)
	}
	if try() == nil {
		return
	}
	l.background.Add(1)
	go func() {
		defer l.background.Done()
		policy := backoff.NewExponentialBackOff()
		policy.InitialInterval, policy.MaxInterval, policy.MaxElapsedTime = 250*time.Millisecond, 5*time.Second, refundPatience
		if err := backoff.Retry(try, policy); err != nil {
			l.log.Error("usage refund", "account", d.AccountID, "quota_units", d.QuotaCharged,
				"rows", len(d.Logged), "withdrawn", len(withdraw), "err", err)
		}
	}()
}
