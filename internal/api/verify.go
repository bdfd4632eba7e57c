package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/usage"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/webhook"
)

// LocalVerifier runs the local layers (syntax, disposable, signals) in the API process; final is
// true when they already decide the result, so no worker round trip is needed.
type LocalVerifier interface {
	Local(raw string) (r verify.Result, final bool)
}

// Bounds of the verify routes (DESIGN.md §3.3).
const (
	maxEmailLen       = 1024 // longer is not an address; refused before any work
	maxBatch          = 100
	maxStream         = 1000
	minSecretLen      = 8 // spec §8
	maxSecretLen      = 256
	syncDeadline      = 10 * time.Second
	batchDeadline     = 30 * time.Second
	streamDeadline    = 120 * time.Second
	retryAfterSeconds = "2"
)

type verifyRequest struct {
	Email         *string `json:"email"`
	WebhookURL    *string `json:"webhook_url"`
	CallbackURL   *string `json:"callback_url"`
	WebhookSecret *string `json:"webhook_secret"`
}

type listRequest struct {
	Emails []json.RawMessage `json:"emails"`
}

// caller is the authenticated account as the verify and usage routes need it.
type caller struct {
	account string
	key     string
	tier    config.Tier
	plan    config.PlanLimits
}

func (s *Server) callerOf(c echo.Context) caller {
	p := principalOf(c)
	return caller{account: p.AccountID, key: p.KeyID, tier: p.Tier, plan: s.cfg.Plans[p.Tier]}
}

// checkEmail bounds one address field; its content is the layers' business.
func checkEmail(field, e string) error {
	switch {
	case strings.TrimSpace(e) == "":
		return InvalidRequest("Field %s is empty; send an email address.", field)
	case len(e) > maxEmailLen:
		return InvalidRequest("Field %s is longer than %d characters.", field, maxEmailLen)
	case !utf8.ValidString(e):
		return InvalidRequest("Field %s is not valid UTF-8.", field)
	}
	return nil
}

// admit runs admission for n emails, writing rows with it when admitted, and sets the
// RateLimit-* headers.
func (s *Server) admit(c echo.Context, who caller, n int, rows ...usage.Row) (usage.Decision, error) {
	now := s.now()
	d, err := usage.Admit(c.Request().Context(), s.pool, usage.Request{
		AccountID: who.account, Free: who.tier == config.TierFree, Units: n,
		RatePerMin: who.plan.RateLimitPerMin, MonthlyCalls: who.plan.MonthlyCalls,
		OverageEUR: s.cfg.OverageEUR[who.tier], Now: now, Rows: rows,
	})
	s.headroom.Note(who.account, now, d, err)
	// The headers describe the rate window whenever admission got as far as it: also on a quota,
	// spend-cap or datastore refusal that came after the rate step.
	h := c.Response().Header()
	h.Set("RateLimit-Limit", strconv.Itoa(who.plan.RateLimitPerMin))
	var rl *usage.RateLimited
	switch {
	case errors.As(err, &rl):
		h.Set("RateLimit-Remaining", "0")
		h.Set("RateLimit-Reset", strconv.Itoa(secondsUntil(rl.Reset, now)))
	case err == nil || d.Reset.After(now):
		h.Set("RateLimit-Remaining", strconv.Itoa(d.Remaining))
		h.Set("RateLimit-Reset", strconv.Itoa(secondsUntil(d.Reset, now)))
	}
	return d, err
}

func secondsUntil(t, now time.Time) int {
	return max(1, int(t.Sub(now).Round(time.Second)/time.Second))
}

// row builds the usage-log row of one verified email.
func row(who caller, itemKey, route string, r verify.Result) usage.Row {
	v := verdictOf(itemKey, r)
	x := pendingRow(who, itemKey, route, r.Email)
	x.Status, x.FailedCheck, x.Snapshot = v.Status, v.FailedCheck, v.Snapshot
	x.Billable = v.FailedCheck != string(verify.CheckSyntax)
	return x
}

// pendingRow is the usage-log row of an email that passed the local layers and waits for the
// worker fleet: billable (it passed layer 1) and a quota unit, its verdict filled in later by
// usage.Verdicts.
func pendingRow(who caller, itemKey, route, email string) usage.Row {
	return usage.Row{
		ItemKey: itemKey, AccountID: who.account, KeyID: who.key, OccurredAt: time.Now(), Route: route,
		EmailDomain: domainOf(email), Billable: true, QuotaUnit: true,
	}
}

// domainOf is the lower-cased part after the last @, or "" when there is none.
func domainOf(email string) string {
	if at := strings.LastIndexByte(email, '@'); at >= 0 {
		return strings.ToLower(email[at+1:])
	}
	return ""
}

// verdictOf is the verdict columns of a usage row: the result's status, failed check and snapshot.
func verdictOf(itemKey string, r verify.Result) usage.Verdict {
	snap, _ := json.Marshal(r)
	fc := ""
	if r.FailedCheck != nil {
		fc = string(*r.FailedCheck)
	}
	return usage.Verdict{ItemKey: itemKey, Status: string(r.Status), FailedCheck: fc, Snapshot: snap}
}

// usageKey prefixes the usage-log item keys of one request. It is generated here, never taken
// from the client's X-Request-ID: a client that reused one would otherwise have its later rows
// skipped as duplicates, and not counted.
func usageKey(c echo.Context) string {
	if k, ok := c.Get(usageKeyCtx).(string); ok {
		return k
	}
	k := uuid.NewString()
	c.Set(usageKeyCtx, k)
	return k
}

const usageKeyCtx = "mailvet.usage_key"

// verifyOne is POST /v1/email/verify.
func (s *Server) verifyOne(c echo.Context) error {
	start := time.Now()
	var req verifyRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if req.Email == nil {
		return InvalidRequest("Field email is required.")
	}
	if err := checkEmail("email", *req.Email); err != nil {
		return err
	}
	if req.WebhookURL != nil && req.CallbackURL != nil && *req.WebhookURL != *req.CallbackURL {
		return InvalidRequest("Send the callback URL once, as webhook_url (callback_url is an alias).")
	}
	hook := req.WebhookURL
	if hook == nil {
		hook = req.CallbackURL
	}
	if hook == nil && req.WebhookSecret != nil {
		return InvalidRequest("Field webhook_secret needs webhook_url.")
	}
	if hook != nil {
		return s.verifyAsync(c, *hook, req.WebhookSecret, *req.Email)
	}

	who := s.callerOf(c)
	key := usageKey(c) + ":0"
	r, final := s.local.Local(*req.Email)
	// The usage row is written by the admission statement itself: complete when the local layers
	// decide, else with its metering facts and the verdict to follow (usage.Verdicts). Either way
	// it is durable before the response, with one commit on the request's path.
	if final {
		r.LatencyMS = elapsedMS(start)
		if _, err := s.admit(c, who, 1, row(who, key, "verify", r)); err != nil {
			return err
		}
		r.LatencyMS = elapsedMS(start) // end to end; the row's snapshot has the time before admission
		return c.JSON(http.StatusOK, r)
	}
	r, err := s.askFleet(c, who, *req.Email, pendingRow(who, key, "verify", *req.Email))
	if err != nil {
		return err
	}
	r.LatencyMS = elapsedMS(start)
	s.verdicts.Add(verdictOf(key, r))
	return c.JSON(http.StatusOK, r)
}

type fleetAnswer struct {
	r   verify.Result
	err error
}

// askFleet admits one email that needs the worker fleet and returns the fleet's result. When the
// account's last admission on this replica left room, the fleet is asked while Postgres admits,
// so the admission's commit overlaps the wait for the mail server instead of adding to it; if
// admission then refuses, the answer is dropped unseen and nothing is charged. Without room, or
// with no recent decision, admission comes first: a throttled or exhausted account never makes
// the fleet work.
func (s *Server) askFleet(c echo.Context, who caller, email string, logged usage.Row) (verify.Result, error) {
	if !s.dispatch.Up() {
		return verify.Result{}, unavailable(queue.ErrUnavailable) // at once, before anything is charged
	}
	ctx := c.Request().Context()
	vctx, cancel := context.WithTimeout(ctx, syncDeadline)
	defer cancel() // also stops a fleet request whose admission was refused
	var answer chan fleetAnswer
	if s.headroom.Take(who.account, s.now()) {
		answer = make(chan fleetAnswer, 1)
		go func() {
			r, err := s.dispatch.VerifyOne(vctx, email)
			answer <- fleetAnswer{r, err}
		}()
	}
	d, err := s.admit(c, who, 1, logged)
	if err != nil {
		return verify.Result{}, err
	}
	var a fleetAnswer
	if answer != nil {
		a = <-answer
	} else {
		a.r, a.err = s.dispatch.VerifyOne(vctx, email)
	}
	if a.err != nil {
		s.refund(d)
		return verify.Result{}, unavailable(a.err)
	}
	return a.r, nil
}

// refund gives back what admission charged a request that then failed (usage.Refund). It does
// not run on the request's context: a client that hung up is the commonest reason to get here,
// and its cancelled context must not leave the charge standing. When Postgres does not answer
// within refundWait the refund goes on behind the response, retried with backoff, so that a
// partitioned database does not also hold the error response (docs/reliability.md).
func (s *Server) refund(d usage.Decision) {
	try := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), refundWait)
		defer cancel()
		return usage.Refund(ctx, s.pool, d)
	}
	if try() == nil {
		return
	}
	s.background.Add(1)
	go func() {
		defer s.background.Done()
		policy := backoff.NewExponentialBackOff()
		policy.InitialInterval, policy.MaxInterval, policy.MaxElapsedTime = 250*time.Millisecond, 5*time.Second, refundPatience
		if err := backoff.Retry(try, policy); err != nil {
			s.log.Error("usage refund", "account", d.AccountID, "quota_units", d.QuotaCharged, "rows", len(d.Logged), "err", err)
		}
	}()
}

const (
	refundWait     = 500 * time.Millisecond // on the response's path
	refundPatience = 2 * time.Minute        // behind it
)

// withdraw takes back the usage rows of results that were recorded but never reached the client
// (usage.Withdraw), on its own context for the same reason as refund.
func (s *Server) withdraw(account string, keys []string) {
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := usage.Withdraw(ctx, s.pool, account, keys); err != nil {
		s.log.Error("usage withdraw", "account", account, "rows", len(keys), "err", err)
	}
}

func elapsedMS(start time.Time) float64 {
	return verify.MS(time.Since(start))
}

// verifyAsync stores a job, queues it, and answers 202; a verifier worker completes it and the
// webhook worker delivers the result.
func (s *Server) verifyAsync(c echo.Context, hookURL string, secret *string, email string) error {
	if err := webhook.CheckURL(hookURL); err != nil {
		return InvalidRequest("%v.", err) // the message names webhook_url and the rule
	}
	sec := ""
	if secret != nil {
		sec = *secret
		if n := utf8.RuneCountInString(sec); n < minSecretLen || len(sec) > maxSecretLen {
			return InvalidRequest("Field webhook_secret must be %d to %d characters.", minSecretLen, maxSecretLen)
		}
	}
	if !s.dispatch.Up() {
		return unavailable(queue.ErrUnavailable) // at once, before anything is charged or stored
	}
	who := s.callerOf(c)
	d, err := s.admit(c, who, 1)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	jobID := uuid.New()
	var keyID *string
	if who.key != "" {
		keyID = &who.key
	}
	var secretArg *string
	if sec != "" {
		secretArg = &sec
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO jobs (id, account_id, key_id, email, webhook_url, webhook_secret)
		VALUES ($1, $2, $3, $4, $5, $6)`, jobID, who.account, keyID, email, hookURL, secretArg); err != nil {
		s.refund(d)
		s.log.Error("store job", "err", err)
		return unavailable(errors.New("the job could not be stored"))
	}
	if err := s.dispatch.PublishJob(ctx, jobID); err != nil {
		// Not queued: remove the job so the client's retry is the only copy, and charge nothing.
		_, _ = s.pool.Exec(context.WithoutCancel(ctx), `DELETE FROM jobs WHERE id = $1 AND state = 'pending'`, jobID)
		s.refund(d)
		return unavailable(err)
	}
	return c.JSON(http.StatusAccepted, map[string]string{"job_id": jobID.String(), "status": "pending"})
}

// parseList validates the emails array of a batch or stream request.
func parseList(c echo.Context, limit int) ([]string, error) {
	var req listRequest
	if err := bindJSON(c, &req); err != nil {
		return nil, err
	}
	if req.Emails == nil {
		return nil, InvalidRequest("Field emails is required: an array of 1 to %d email addresses.", limit)
	}
	if len(req.Emails) == 0 || len(req.Emails) > limit {
		return nil, InvalidRequest("Field emails must hold 1 to %d addresses, not %d; split larger lists into several requests.", limit, len(req.Emails))
	}
	out := make([]string, len(req.Emails))
	for i, raw := range req.Emails {
		field := fmt.Sprintf("emails[%d]", i)
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			return nil, InvalidRequest("Field %s must be a string.", field)
		}
		if err := checkEmail(field, out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// runList verifies emails: local results at once, the rest through the worker fleet, calling
// each in completion order. Missing is the indexes the fleet did not answer before ctx ended.
func (s *Server) runList(ctx context.Context, emails []string, each func(i int, r verify.Result)) (missing []int, err error) {
	var (
		remote []string
		at     []int
	)
	for i, e := range emails {
		if r, final := s.local.Local(e); final {
			each(i, r)
			continue
		}
		remote = append(remote, e)
		at = append(at, i)
	}
	if len(remote) == 0 {
		return nil, nil
	}
	m, err := s.dispatch.VerifyMany(ctx, remote, func(j int, r verify.Result) { each(at[j], r) })
	for _, j := range m {
		missing = append(missing, at[j])
	}
	return missing, err
}

// admitList parses a batch or stream request, admits its emails, and refuses at once (charging
// nothing) when some need the worker fleet and no worker is alive.
func (s *Server) admitList(c echo.Context, limit int) ([]string, caller, usage.Decision, error) {
	emails, err := parseList(c, limit)
	if err != nil {
		return nil, caller{}, usage.Decision{}, err
	}
	who := s.callerOf(c)
	remote := s.anyRemote(emails)
	if remote && !s.dispatch.Up() {
		return nil, who, usage.Decision{}, unavailable(queue.ErrUnavailable) // at once, charging nothing
	}
	d, err := s.admit(c, who, len(emails))
	if err != nil {
		return nil, who, d, err
	}
	ctx := c.Request().Context()
	if remote && !s.dispatch.WorkersAlive(ctx) {
		s.refund(d)
		return nil, who, d, unavailable(queue.ErrNoWorkers)
	}
	return emails, who, d, nil
}

type batchResponse struct {
	Results []verify.Result `json:"results"`
	Count   int             `json:"count"`
}

// verifyBatch is POST /v1/email/verify/batch: results in input order, all of them or the error
// envelope (and then nothing is charged).
func (s *Server) verifyBatch(c echo.Context) error {
	start := time.Now()
	emails, who, d, err := s.admitList(c, maxBatch)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	vctx, cancel := s.listContext(ctx, batchDeadline)
	defer cancel()
	results := make([]verify.Result, len(emails))
	if _, err := s.runList(vctx, emails, func(i int, r verify.Result) { results[i] = r }); err != nil {
		s.refund(d)
		return unavailable(listCause(vctx, err))
	}
	rid := usageKey(c)
	rows := make([]usage.Row, len(results))
	keys := make([]string, len(results))
	lat := elapsedMS(start)
	for i := range results {
		results[i].LatencyMS = lat
		keys[i] = rid + ":" + strconv.Itoa(i)
		rows[i] = row(who, keys[i], "verify_batch", results[i])
	}
	if err := usage.Record(ctx, s.pool, rows); err != nil {
		s.refund(d)
		s.log.Error("usage log", "err", err)
		return unavailable(errors.New("usage could not be recorded"))
	}
	if err := c.JSON(http.StatusOK, batchResponse{Results: results, Count: len(results)}); err != nil {
		// The client went away before it had the results: they are not billed.
		s.withdraw(who.account, keys)
		s.refund(usage.Decision{AccountID: who.account, QuotaCharged: d.QuotaCharged, Month: d.Month})
		return nil
	}
	return nil
}

// Why a list ended early, for its error envelope.
var (
	errShuttingDown     = errors.New("the server is shutting down")
	errUsageNotRecorded = errors.New("usage could not be recorded")
)

// stopGrace is how long a batch or stream may still wait for answers in flight once the server
// has begun to shut down; it stays well inside app.ShutdownGrace so the list can end properly.
const stopGrace = time.Second

// listContext bounds a batch or stream by its deadline and by the server's shutdown, which ends
// the list stopGrace later, with cause errShuttingDown.
func (s *Server) listContext(ctx context.Context, deadline time.Duration) (context.Context, context.CancelFunc) {
	dctx, cancelDeadline := context.WithTimeout(ctx, deadline)
	vctx, cancel := context.WithCancelCause(dctx)
	go func() {
		select {
		case <-s.stopping:
		case <-vctx.Done():
			return
		}
		t := time.NewTimer(stopGrace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel(errShuttingDown)
		case <-vctx.Done():
		}
	}()
	return vctx, func() { cancel(nil); cancelDeadline() }
}

// listCause is why a list's verification ended early: the shutdown if that is what ended it,
// else the dispatcher's error.
func listCause(vctx context.Context, err error) error {
	if errors.Is(context.Cause(vctx), errShuttingDown) {
		return errShuttingDown
	}
	return err
}

// verifyStream is POST /v1/email/verify/stream: one NDJSON line per result, in completion order,
// each flushed as soon as its usage row is durable. A stream that cannot be completed (the fleet
// did not answer in time, the server is shutting down, usage could not be recorded) ends with an
// error line: the error envelope plus the emails that were not verified and not charged. A
// stream without one is complete (docs/reliability.md).
func (s *Server) verifyStream(c echo.Context) error {
	start := time.Now()
	// Everything that can refuse the request happens before the 200 is committed.
	emails, who, d, err := s.admitList(c, maxStream)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	vctx, cancel := s.listContext(ctx, streamDeadline)
	defer cancel()

	type done struct {
		i int
		r verify.Result
	}
	ready := make(chan done, len(emails))
	var runErr error
	go func() {
		defer close(ready)
		_, runErr = s.runList(vctx, emails, func(i int, r verify.Result) { ready <- done{i, r} })
	}()

	resp := c.Response()
	resp.Header().Set(echo.HeaderContentType, "application/x-ndjson")
	resp.Header().Set("Cache-Control", "no-store")
	resp.Header().Set("X-Content-Type-Options", "nosniff")
	resp.WriteHeader(http.StatusOK)
	resp.Flush()

	rid := usageKey(c)
	key := func(i int) string { return rid + ":" + strconv.Itoa(i) }
	enc := json.NewEncoder(resp)
	delivered := make([]bool, len(emails))
	var (
		pending   []done
		failure   error    // set when a line could not be recorded: the stream ends there
		gone      bool     // the client went away
		withdrawn []string // recorded, but the line never reached the client
	)
	// Take everything that is ready, make its usage rows durable in one statement, then write
	// and flush its lines.
	for first := range ready {
		if failure != nil || gone {
			continue // ending: what still arrives is neither sent nor charged
		}
		pending = append(pending[:0], first)
	drain:
		for {
			select {
			case x, ok := <-ready:
				if !ok {
					break drain
				}
				pending = append(pending, x)
			default:
				break drain
			}
		}
		rows := make([]usage.Row, len(pending))
		lat := elapsedMS(start)
		for k := range pending {
			pending[k].r.LatencyMS = lat
			rows[k] = row(who, key(pending[k].i), "verify_stream", pending[k].r)
		}
		if err := usage.Record(ctx, s.pool, rows); err != nil {
			s.log.Error("usage log (stream)", "err", err)
			failure = errUsageNotRecorded // not recorded: not sent, and not charged either
			cancel()
			continue
		}
		for k, x := range pending {
			if err := enc.Encode(x.r); err != nil {
				gone = true
				cancel() // stop verifying for a client that is not there
				for _, y := range pending[k:] {
					withdrawn = append(withdrawn, key(y.i))
				}
				break
			}
			delivered[x.i] = true
		}
		resp.Flush()
	}
	s.withdraw(who.account, withdrawn)

	var undelivered []int
	for i, ok := range delivered {
		if !ok {
			undelivered = append(undelivered, i)
		}
	}
	if len(undelivered) == 0 {
		return nil
	}
	// What was not delivered costs nothing.
	if d.QuotaCharged > 0 {
		s.refund(usage.Decision{AccountID: who.account, QuotaCharged: min(len(undelivered), d.QuotaCharged), Month: d.Month})
	}
	cause := failure
	if cause == nil {
		cause = listCause(vctx, runErr)
	}
	if cause == nil {
		cause = queue.ErrTimeout
	}
	s.log.Warn("stream ended early", "undelivered", len(undelivered), "of", len(emails), "client_gone", gone, "err", cause)
	if !gone {
		_ = enc.Encode(s.streamError(cause, emails, undelivered))
		resp.Flush()
	}
	return nil
}

// streamError is the last line of a stream that could not be completed: the error envelope of
// cause, plus the emails that were not verified (and not charged), in input order, so that the
// client can send exactly those again.
func (s *Server) streamError(cause error, emails []string, undelivered []int) *Error {
	e := unavailable(cause)
	e.Header = nil
	e.Message = fmt.Sprintf("%d of %d addresses were not verified: %s.", len(undelivered), len(emails),
		strings.TrimSuffix(cause.Error(), "."))
	e.Action = "Send the addresses listed in emails again; nothing was charged for them."
	e.Docs = s.docsURL(e.Code)
	list := make([]string, len(undelivered))
	for k, i := range undelivered {
		list[k] = emails[i]
	}
	e.Extra = map[string]any{"emails": list}
	return e
}

func (s *Server) anyRemote(emails []string) bool {
	for _, e := range emails {
		if _, final := s.local.Local(e); !final {
			return true
		}
	}
	return false
}
