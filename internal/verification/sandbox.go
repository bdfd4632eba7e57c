package verification

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/job"
	"github.com/mailvet/mailvet/internal/sandbox"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/webhook"
)

// The sandbox twin of the verify flow (docs/sandbox.md): a caller with a sandbox key is answered
// from package sandbox, never by the worker fleet, and never billed — no hold, no usage row, no
// quota or spend cap. Its only admission is the sandbox rate limit, one window per account and
// minute in sandbox_rate_windows, shared by every API replica as the live windows are.

// DefaultSandboxRatePerMin is the sandbox rate limit when Config.SandboxRatePerMin is 0.
const DefaultSandboxRatePerMin = 1000

// sandboxAdmitSQL takes $3 units of account $1's sandbox window starting at $2 if the window
// stays within the limit $4; no row means refused. A request larger than the whole limit never
// passes.
const sandboxAdmitSQL = `INSERT INTO sandbox_rate_windows AS w (account_id, window_start, used)
	SELECT $1, $2, $3::int WHERE $3::int <= $4::int
	ON CONFLICT (account_id, window_start) DO UPDATE SET used = w.used + EXCLUDED.used
	WHERE w.used + EXCLUDED.used <= $4::int
	RETURNING used`

const sandboxUsedSQL = `SELECT used FROM sandbox_rate_windows WHERE account_id = $1 AND window_start = $2`

// sandboxAdmit takes n emails from the caller's sandbox rate window. A refusal is a
// *usage.RateLimited, mapped as the live one is (429 rate_limit_exceeded); a datastore failure
// wraps usage.ErrUnavailable (503).
func (s *Service) sandboxAdmit(ctx context.Context, who Caller, n int) (Window, error) {
	now := s.now()
	start := now.UTC().Truncate(time.Minute)
	w := Window{Known: true, Limit: s.sandboxRate, At: now, Reset: usage.WindowEnd(now)}
	var used int
	err := s.pool.QueryRow(ctx, sandboxAdmitSQL, who.Account, start, n, s.sandboxRate).Scan(&used)
	if err == nil {
		w.Remaining, w.RemainingKnown = max(0, s.sandboxRate-used), true
		return w, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return w, fmt.Errorf("%w: sandbox rate window: %v", usage.ErrUnavailable, err)
	}
	used, err = s.sandboxUsed(ctx, who.Account, now)
	if err != nil {
		return w, fmt.Errorf("%w: sandbox rate window: %v", usage.ErrUnavailable, err)
	}
	w.Remaining, w.RemainingKnown = max(0, s.sandboxRate-used), true
	return w, &usage.RateLimited{Limit: s.sandboxRate, Used: used, Asked: n, Reset: w.Reset, At: w.At, Sandbox: true}
}

func (s *Service) sandboxUsed(ctx context.Context, account string, now time.Time) (int, error) {
	used := 0
	err := s.pool.QueryRow(ctx, sandboxUsedSQL, account, now.UTC().Truncate(time.Minute)).Scan(&used)
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	return used, err
}

// sandboxSyntax is the engine's syntax check as the sandbox needs it, through the local layers
// (which do no I/O): an address fails it when Local fails it at the syntax check.
func (s *Service) sandboxSyntax(raw string) (string, bool) {
	r, final := s.local.Local(raw)
	if final && r.FailedCheck != nil && *r.FailedCheck == verdict.CheckSyntax {
		return "", false
	}
	return r.Email, true
}

// sandboxResults answers emails from the sandbox, all with latency since start.
func (s *Service) sandboxResults(emails []string, start time.Time) []verdict.Result {
	out := make([]verdict.Result, len(emails))
	for i, e := range emails {
		out[i] = sandbox.Verify(e, s.sandboxSyntax)
	}
	lat := elapsedMS(start)
	for i := range out {
		out[i].LatencyMS = lat
	}
	return out
}

func (s *Service) sandboxOne(ctx context.Context, req Request, email string) (*Answer, Window, error) {
	start := req.start()
	w, err := s.sandboxAdmit(ctx, req.Caller, 1)
	if err != nil {
		return nil, w, err
	}
	return &Answer{Results: s.sandboxResults([]string{email}, start), req: req, route: "verify"}, w, nil
}

func (s *Service) sandboxBatch(ctx context.Context, req Request, emails []string) (*Answer, Window, error) {
	start := req.start()
	if err := checkList(emails, MaxBatch); err != nil {
		return nil, Window{}, err
	}
	w, err := s.sandboxAdmit(ctx, req.Caller, len(emails))
	if err != nil {
		return nil, w, err
	}
	return &Answer{Results: s.sandboxResults(emails, start), req: req, route: "verify_batch"}, w, nil
}

func (s *Service) sandboxStream(ctx context.Context, req Request, emails []string) (*Stream, Window, error) {
	start := req.start()
	if err := checkList(emails, MaxStream); err != nil {
		return nil, Window{}, err
	}
	w, err := s.sandboxAdmit(ctx, req.Caller, len(emails))
	if err != nil {
		return nil, w, err
	}
	return &Stream{s: s, ctx: ctx, req: req, emails: emails, start: start, sandbox: true}, w, nil
}

// runSandbox is Stream.Run for a sandbox stream: every answer is ready at once, written in input
// order in one go, and nothing is billed.
func (st *Stream) runSandbox(write func([]Line) (int, error)) (undelivered []int, cause error) {
	results := st.s.sandboxResults(st.emails, st.start)
	lines := make([]Line, len(results))
	for i, r := range results {
		lines[i] = Line{Index: i, Result: r}
	}
	if n, err := write(lines); err != nil {
		// The client went away: the rest did not reach it, and there is nothing to give back.
		for i := n; i < len(st.emails); i++ {
			undelivered = append(undelivered, i)
		}
	}
	return undelivered, nil
}

// sandboxCallback is the body of a sandbox job's callback: exactly the live job's (the verify
// result, job_id), so that a receiver tested with it handles live callbacks too.
type sandboxCallback struct {
	verdict.Result
	JobID string `json:"job_id"`
}

// sandboxAsync completes an asynchronous job at once from the sandbox and hands its callback to
// the real delivery path: the job (completed) and its delivery are stored in one transaction, and
// the delivery is published to the webhook workers, which sign and POST it with the same retries
// and delivery log as live ones (docs/sandbox.md, "Asynchronous jobs"). If the publish fails, the
// webhook workers' outbox sweep publishes the stored delivery.
func (s *Service) sandboxAsync(ctx context.Context, req Request, email string, cb Callback, secret string) (uuid.UUID, Window, error) {
	start := req.start()
	who := req.Caller
	w, err := s.sandboxAdmit(ctx, who, 1)
	if err != nil {
		return uuid.Nil, w, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.Nil, w, unavailable(ErrUnstored)
	}
	r := s.sandboxResults([]string{email}, start)[0]
	body, err := json.Marshal(sandboxCallback{Result: r, JobID: id.String()})
	if err != nil {
		return uuid.Nil, w, err
	}
	account, err := uuid.Parse(who.Account)
	if err != nil {
		return uuid.Nil, w, fmt.Errorf("sandbox job: account id: %w", err)
	}
	var delivery uuid.UUID
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// secret is sealed; as for a live job, only the delivery keeps it (docs/reliability.md,
		// "Webhook secrets at rest").
		if err := job.CreateCompleted(ctx, tx, job.New{ID: id, AccountID: who.Account, KeyID: who.Key, Email: email,
			WebhookURL: cb.URL}, body); err != nil {
			return err
		}
		if delivery, err = webhook.CreateDelivery(ctx, tx, id, account, cb.URL, secret, body); err != nil {
			return err
		}
		if req.Stored != nil {
			return req.Stored(ctx, tx, id, w)
		}
		return nil
	})
	if err != nil {
		s.log.Error("store sandbox job", "err", err)
		return uuid.Nil, w, unavailable(fmt.Errorf("%w: %w", ErrUnstored, err)) // the cause: a key deleted meanwhile is a 401 (internal/problem)
	}
	if s.publishDelivery != nil {
		if err := s.publishDelivery(context.WithoutCancel(ctx), delivery); err != nil {
			s.log.Warn("publish sandbox delivery; the outbox sweep will", "delivery_id", delivery, "err", err)
		}
	}
	return id, w, nil
}

// checkSecret bounds a callback's secret; "" when none was given.
func checkSecret(cb Callback) (string, error) {
	if cb.Secret == nil {
		return "", nil
	}
	secret := *cb.Secret
	if n := utf8.RuneCountInString(secret); n < MinSecretLen || len(secret) > MaxSecretLen {
		return "", invalid("Field webhook_secret must be at least %d characters and at most %d bytes.", MinSecretLen, MaxSecretLen)
	}
	return secret, nil
}
