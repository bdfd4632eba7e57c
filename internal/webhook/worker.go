package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/loop"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/queuelag"
	"github.com/mailvet/mailvet/internal/safetext"
	"github.com/mailvet/mailvet/internal/sealed"
)

// MaxStoredResponse is how much of a receiver's response body the delivery log keeps.
const MaxStoredResponse = 4 << 10

// inProgressText is what the deliveries API shows instead of interruptedError for the latest
// attempt while its lease lasts: the attempt is still under way, not cut off (log.go).
const inProgressText = "in progress: no outcome yet"

// interruptedError is what an attempt's log row says until the attempt finishes. A worker that
// dies mid-attempt leaves it there: the attempt counts (it may have reached the receiver), and
// the log shows why it has no status.
const interruptedError = "interrupted: the worker stopped before this attempt finished"

// Options configure a Worker. Zero values take the defaults noted.
type Options struct {
	// Concurrency is how many attempts run at once (default 64).
	Concurrency int
	// AckWait is the consumer's AckWait (default 30 s). It must exceed AttemptTimeout plus the
	// 2 s lease margin, so that JetStream never redelivers a message whose attempt is running.
	AckWait time.Duration
	// AttemptTimeout bounds one attempt, connection to last byte read (default 10 s).
	AttemptTimeout time.Duration
	// DrainTimeout is how long in-flight attempts may run after Run's context ends before they
	// are abandoned (default AttemptTimeout). An abandoned attempt is left exactly as a crash
	// would leave it.
	DrainTimeout time.Duration
	// SweepInterval and SweepAge drive the outbox sweep (Sweep): every SweepInterval, deliveries
	// still unattempted SweepAge after creation, and retrying deliveries whose next attempt is
	// overdue by more than SweepAge, are published again (defaults 10 s and 30 s).
	SweepInterval time.Duration
	SweepAge      time.Duration
	// RetentionInterval is how often expired delivery log rows are removed (default 10 min).
	RetentionInterval time.Duration
	// Client configures the HTTP client (address check, resolver, roots).
	Client ClientOptions
	// Log receives the worker's logs (default: discarded).
	Log *slog.Logger
	// Metrics is where the worker's series are registered (nil: not registered).
	Metrics prometheus.Registerer
	// Secrets open the deliveries' sealed webhook secrets and re-seal stored secrets under the
	// current key (config.Config.Secrets; docs/operations.md, "Secrets at rest"). nil means
	// sealed.Process().
	Secrets *sealed.Keys
	// ResealInterval is how often secrets not sealed under the current key are re-sealed
	// (default 1 min; Reseal).
	ResealInterval time.Duration
	// Layout is the deployment's NATS layout: the names of the WEBHOOKS stream, its consumer and
	// subject, and its replication if the worker has to re-create it (a NATS server that lost its
	// store). The zero Layout is unprefixed, one replica.
	Layout queue.Layout
}

func (o *Options) defaults() error {
	if o.Concurrency <= 0 {
		o.Concurrency = 64
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = AttemptTimeout
	}
	if o.AckWait <= 0 {
		o.AckWait = 30 * time.Second
	}
	if o.AckWait <= o.lease() {
		return fmt.Errorf("webhook worker: AckWait %s must exceed the attempt lease %s", o.AckWait, o.lease())
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = o.AttemptTimeout
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = 10 * time.Second
	}
	if o.SweepAge <= 0 {
		o.SweepAge = 30 * time.Second
	}
	if o.RetentionInterval <= 0 {
		o.RetentionInterval = 10 * time.Minute
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	o.Secrets = sealed.Or(o.Secrets)
	if o.ResealInterval <= 0 {
		o.ResealInterval = time.Minute
	}
	if o.Client.MaxConnsPerHost == 0 {
		o.Client.MaxConnsPerHost = o.Concurrency
	}
	return nil
}

// lease is how long a claimed attempt keeps other workers away from its delivery: the attempt
// itself plus room to record its outcome.
func (o *Options) lease() time.Duration { return o.AttemptTimeout + 2*time.Second }

// Worker consumes the WEBHOOKS stream and delivers. Several workers, in one process or many,
// share the durable consumer and coordinate through Postgres.
type Worker struct {
	db     DB
	js     jetstream.JetStream
	o      Options
	client *http.Client
	m      *metrics
	log    *slog.Logger
	cons   *queue.Consumer
}

// NewWorker returns a worker; Run, RunSweeper and RunRetention start its parts.
func NewWorker(db DB, js jetstream.JetStream, o Options) (*Worker, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	cons := queue.NewConsumer(js, queue.WebhooksConsumer(o.Concurrency, o.AckWait), o.Layout, o.Concurrency, o.Log)
	return &Worker{db: db, js: js, o: o, client: NewClient(o.Client), m: newMetrics(o.Metrics), log: o.Log, cons: cons}, nil
}

// Run consumes deliveries until ctx ends. Then it stops pulling, hands messages that were
// buffered but not started back to JetStream (Nak, so another replica takes them at once), and
// waits up to DrainTimeout for attempts in flight. The consumer heals by itself after NATS
// restarts or loses its store (queue.Consumer).
func (w *Worker) Run(ctx context.Context) error {
	// hard outlives ctx by DrainTimeout so that attempts in flight can finish.
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	sem := make(chan struct{}, w.o.Concurrency)
	var wg sync.WaitGroup
	_ = w.cons.Run(ctx, func(msg jetstream.Msg) {
		w.m.lag.Took(queuelag.ConsumerWebhooks, msg)
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			_ = msg.Nak()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			w.handle(hard, msg)
		}()
	})

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.o.DrainTimeout):
		w.log.Warn("webhook worker: abandoning attempts still in flight", "after", w.o.DrainTimeout)
		cancelHard()
		<-done
	}
	return nil
}

// Ready reports, for /readyz, whether the deliveries consumer is running.
func (w *Worker) Ready(ctx context.Context) error { return w.cons.Check(ctx) }

// RunSweeper publishes, every SweepInterval, deliveries whose message seems lost (Sweep):
// committed but never published, or retrying with their message gone; until ctx ends.
func (w *Worker) RunSweeper(ctx context.Context) error {
	return loop.Every(ctx, w.o.SweepInterval, func(ctx context.Context) {
		n, err := Sweep(ctx, w.db, w.js, w.o.Layout, w.o.SweepAge, 500)
		if err != nil && ctx.Err() == nil {
			w.log.Warn("webhook outbox sweep", "err", err)
		}
		if n > 0 {
			w.log.Info("webhook outbox sweep republished deliveries", "count", n)
		}
	})
}

// RunRetention removes expired delivery log rows every RetentionInterval until ctx ends.
func (w *Worker) RunRetention(ctx context.Context) error {
	return loop.Every(ctx, w.o.RetentionInterval, func(ctx context.Context) {
		n, err := PurgeExpired(ctx, w.db, 1000, 100)
		if err != nil && ctx.Err() == nil {
			w.log.Warn("webhook retention", "err", err)
		}
		if n > 0 {
			w.log.Info("webhook retention removed deliveries", "count", n)
		}
	})
}

// claimed is a delivery whose next attempt this worker owns.
type claimed struct {
	id uuid.UUID
	// root is the delivery this one replays, or id itself: the webhook-id of every attempt, so
	// that a receiver deduplicating on it takes a replay for the callback it may already have
	// (docs/api.md, "Signature").
	root      uuid.UUID
	attempt   int
	url       string
	body      []byte
	signature *string // X-Service-Signature stored at enqueue by releases before sealed secrets
	secret    *string // sealed webhook secret (internal/sealed); nil: unsigned, or signature is set
	// serviceSig is the X-Service-Signature this attempt sent, stored by finish so that the
	// delivery log still says "signed" once the secret is erased.
	serviceSig *string
}

// dbRetry is how long a message waits when Postgres could not be reached.
const dbRetry = 2 * time.Second

func (w *Worker) handle(ctx context.Context, msg jetstream.Msg) {
	// The AckWait clock started when the message entered the client's buffer; restart it now.
	_ = msg.InProgress()
	var dm queue.DeliveryMessage
	if err := json.Unmarshal(msg.Data(), &dm); err != nil || dm.DeliveryID == uuid.Nil {
		w.log.Error("webhook message without a delivery id; dropped", "data", string(msg.Data()))
		_ = msg.Term()
		return
	}
	log := w.log.With("delivery_id", dm.DeliveryID)

	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	c, wait, err := w.claim(dctx, dm.DeliveryID)
	cancel()
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		log.Warn("webhook claim", "err", err)
		_ = msg.NakWithDelay(dbRetry)
		return
	case c == nil && wait > 0:
		_ = msg.NakWithDelay(wait)
		return
	case c == nil:
		_ = msg.Ack()
		return
	}

	res := w.attempt(ctx, c)
	if ctx.Err() != nil {
		// Abandoned at shutdown: leave everything as a crash would; the message is redelivered
		// after AckWait and the attempt stays counted with interruptedError.
		return
	}
	failedAt := time.Now()
	out := classify(c.attempt, res.status, res.transport, res.final)
	var backoff time.Duration
	if out == outcomeRetry {
		// A receiver's Retry-After may lengthen the schedule's wait, never shorten it.
		backoff = max(Backoff(c.attempt), res.retryAfter)
	}
	w.m.attempts.WithLabelValues(res.label).Inc()
	w.m.attemptDur.Observe(res.duration.Seconds())

	var createdAt time.Time
	var applied bool
	for try := 0; ; try++ {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		createdAt, applied, err = w.finish(fctx, c, res, out, backoff-time.Since(failedAt))
		cancel()
		if err == nil || try == 2 || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		// The attempt stays recorded as interrupted; after the lease the next one is claimed.
		log.Error("webhook record attempt", "attempt", c.attempt, "err", err)
		_ = msg.NakWithDelay(w.o.lease())
		return
	}
	switch {
	case !applied:
		// Another attempt moved the delivery on (finish), perhaps redelivered this very message.
		// claim is what knows whether anything is left to do: it acks a finished delivery and
		// makes a retrying one wait out its backoff, so the message goes back to it.
		_ = msg.NakWithDelay(w.o.lease())
	case out == outcomeRetry:
		_ = msg.NakWithDelay(max(backoff-time.Since(failedAt), time.Millisecond))
	case out == outcomeDelivered:
		w.m.latency.WithLabelValues(StateDelivered).Observe(time.Since(createdAt).Seconds())
		_ = msg.Ack()
	default:
		w.m.latency.WithLabelValues(StateFailed).Observe(time.Since(createdAt).Seconds())
		log.Info("webhook delivery failed", "attempts", c.attempt, "status", res.status, "err", res.logText())
		_ = msg.Ack()
	}
}

// claim takes the next attempt of a delivery. The attempt number is incremented and the attempt
// row written, with interruptedError, BEFORE anything is sent: a worker that crashes during the
// attempt therefore leaves it counted, and a redelivered message can never send more than
// MaxAttempts times. next_attempt_at doubles as a lease while the attempt runs, so a duplicate
// message cannot start a parallel attempt; after a failure it holds the backoff.
//
// claim returns the claimed delivery, or nil with how long to wait before asking again (0: the
// message is finished with and must be acked).
func (w *Worker) claim(ctx context.Context, id uuid.UUID) (*claimed, time.Duration, error) {
	c := &claimed{id: id}
	err := w.db.QueryRow(ctx, `
		WITH d AS (
			UPDATE deliveries
			SET attempts = attempts + 1, updated_at = now(),
			    next_attempt_at = now() + $2 * interval '1 millisecond'
			WHERE id = $1 AND state IN ('pending', 'retrying') AND attempts < $3
			  AND (next_attempt_at IS NULL OR next_attempt_at <= now())
			RETURNING id, attempts, url, body, signature, webhook_secret, coalesce(replay_of, id) AS root),
		a AS (
			INSERT INTO delivery_attempts (delivery_id, attempt, started_at, duration_ms, error)
			SELECT id, attempts, now(), 0, $4 FROM d)
		SELECT attempts, url, body, signature, webhook_secret, root FROM d`,
		id, w.o.lease().Milliseconds(), MaxAttempts, interruptedError,
	).Scan(&c.attempt, &c.url, &c.body, &c.signature, &c.secret, &c.root)
	if err == nil {
		return c, 0, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, err
	}

	// Nothing to claim: say why.
	var state string
	var attempts int
	var waitMs int64
	err = w.db.QueryRow(ctx, `
		SELECT state, attempts,
		       COALESCE(ceil(EXTRACT(EPOCH FROM (next_attempt_at - now())) * 1000), 0)::bigint
		FROM deliveries WHERE id = $1`, id).Scan(&state, &attempts, &waitMs)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Removed by retention or with its job; nothing left to deliver.
		return nil, 0, nil
	case err != nil:
		return nil, 0, err
	case state == StateDelivered || state == StateFailed:
		return nil, 0, nil
	case waitMs > 0:
		return nil, time.Duration(waitMs) * time.Millisecond, nil
	case attempts >= MaxAttempts:
		// The last attempt was claimed and its worker died before recording an outcome: the
		// attempts are used up.
		_, err = w.db.Exec(ctx, `
			UPDATE deliveries SET state = 'failed', finished_at = now(), updated_at = now(),
			       last_error = COALESCE(last_error, $2)
			WHERE id = $1 AND state IN ('pending', 'retrying') AND attempts >= $3`,
			id, interruptedError, MaxAttempts)
		return nil, 0, err
	default:
		// The lease ran out between the two statements; try again shortly.
		return nil, 50 * time.Millisecond, nil
	}
}

// result is what one attempt produced.
type result struct {
	status    int
	errText   string
	transport bool // a network failure: retried while attempts remain
	final     bool // refused before sending: never retried
	// retryAfter is what the answer's Retry-After asked for (429 and 5xx only), capped at
	// MaxBackoff.
	retryAfter time.Duration
	body       string
	duration   time.Duration
	label      string
}

// attempt POSTs the stored body once.
func (w *Worker) attempt(ctx context.Context, c *claimed) result {
	start := time.Now()
	res := w.send(ctx, c)
	res.duration = time.Since(start)
	return res
}

func (w *Worker) send(ctx context.Context, c *claimed) result {
	// The URL passed CheckURL when the job was accepted; checking again guards rows written by
	// anything else and rules that tightened since.
	if err := CheckURL(c.url); err != nil {
		return result{errText: err.Error(), final: true, label: labelRefused}
	}
	actx, cancel := context.WithTimeout(ctx, w.o.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, c.url, bytes.NewReader(c.body))
	if err != nil {
		return result{errText: err.Error(), final: true, label: labelRefused}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Mailvet-Webhook/1")
	// Receivers may deduplicate on the delivery id: a redelivery after a crash can repeat an
	// attempt that did reach them.
	req.Header.Set("X-Mailvet-Delivery", c.id.String())
	req.Header.Set("X-Mailvet-Attempt", strconv.Itoa(c.attempt))
	if err := w.sign(req.Header, c); err != nil {
		// A key missing on this replica (a rotation half rolled out) may be present on another:
		// the attempt counts and is retried, never sent unsigned. The text is the customer's,
		// so it names no key.
		w.log.Error("webhook: the delivery's secret cannot be unsealed; check MAILVET_SECRETS_KEY and MAILVET_SECRETS_KEY_OLD",
			"delivery_id", c.id, "err", err)
		return result{errText: "internal: the delivery could not be signed; it is retried", transport: true, label: labelTransport}
	}
	resp, err := w.client.Do(req)
	if err != nil {
		if errors.Is(err, ErrForbiddenAddress) {
			return result{errText: errorText(err, w.o.AttemptTimeout), final: true, label: labelRefused}
		}
		return result{errText: errorText(err, w.o.AttemptTimeout), transport: true, label: labelTransport}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, MaxStoredResponse))
	// Read a little more so the connection can be reused, but never a receiver's whole stream.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	res := result{status: resp.StatusCode, body: cleanText(body)}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode <= 299:
		res.label = labelSuccess
	case resp.StatusCode >= 500 && resp.StatusCode <= 599:
		res.label, res.errText = labelServerErr, "HTTP "+strconv.Itoa(resp.StatusCode)
		res.retryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	case resp.StatusCode >= 300 && resp.StatusCode <= 399:
		res.label, res.errText = labelClientErr, redirectText(resp.StatusCode, resp.Header.Get("Location"))
	default:
		res.label, res.errText = labelClientErr, "HTTP "+strconv.Itoa(resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests {
			res.retryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
	}
	return res
}

// logText is the attempt's error as the worker's log gives it: errText, but a redirect's without
// its Location. That often repeats the callback URL, query string included (a redirect that adds
// a trailing slash keeps it), and a callback URL's query or path may carry the receiver's token,
// which no log line carries (docs/personal-data.md). The delivery log, the customer's own, keeps
// the Location.
func (r result) logText() string {
	if r.status >= 300 && r.status <= 399 {
		return redirectText(r.status, "")
	}
	return r.errText
}

// sign sets the signature headers of attempt c (docs/api.md, "Signature"): X-Service-Signature,
// the same on every attempt, and the Standard Webhooks headers, whose signature covers this
// attempt's timestamp and so is computed now. webhook-id is the original delivery's id, stable
// across the attempts of a delivery and across its replays; X-Mailvet-Delivery names the delivery
// itself. A delivery stored before secrets were sealed has only its stored X-Service-Signature and
// gets no Standard Webhooks headers.
func (w *Worker) sign(h http.Header, c *claimed) error {
	if c.secret == nil {
		if c.signature != nil {
			h.Set(SignatureHeader, *c.signature)
		}
		return nil
	}
	secret, err := w.o.Secrets.Open(*c.secret)
	if err != nil {
		return err
	}
	sig := Sign([]byte(secret), c.body)
	c.serviceSig = &sig
	h.Set(SignatureHeader, sig)
	id, ts := c.root.String(), time.Now().Unix()
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderSignature, SignStandard([]byte(secret), id, ts, c.body))
	return nil
}

// errorText shortens a client error for the log: the URL is already on the delivery.
//
// The text is shown to the customer (the deliveries API), so it names the receiver's host and
// what went wrong, never Mailvet's own infrastructure: Go's DNS error names the resolver it
// would have asked (the host's resolv.conf server, not even the one MAILVET_DNS_RESOLVER dials),
// which is an internal address; and a dial refused for a private address would name the
// address Mailvet's resolver gave, perhaps from an internal (split-horizon) view of DNS. A
// connect or TLS handshake that times out says so with its own bound, not the whole attempt's.
func errorText(err error, timeout time.Duration) string {
	host := "the host"
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil && u.Hostname() != "" {
			host = u.Hostname()
		}
		err = ue.Err
	}
	if errors.Is(err, ErrForbiddenAddress) {
		return fmt.Sprintf("refused: %s resolves to an address that is not a public unicast address", host)
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		why := "the name could not be resolved"
		switch {
		case dnsErr.IsNotFound:
			why = "no such host"
		case dnsErr.IsTimeout:
			why = "the DNS lookup timed out"
		}
		return fmt.Sprintf("dns: %s: %s", dnsErr.Name, why)
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" && opErr.Timeout() {
		return fmt.Sprintf("timeout: no connection within %s", DialTimeout)
	}
	if err != nil && strings.Contains(err.Error(), "TLS handshake timeout") {
		return fmt.Sprintf("timeout: TLS handshake not complete within %s", DialTimeout)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("timeout: no complete answer within %s", timeout)
	}
	return err.Error()
}

// cleanText makes a receiver's text safe to store and show (docs/api.md, "Retries"): valid
// UTF-8 (the cut at MaxStoredResponse may split a character), and none of the characters
// safetext calls unsafe but line feeds and tabs, which bodies use for layout. Whoever reads the
// delivery log through the API (a terminal, a log viewer, the customer's own pages) shows it as
// it is, where an escape sequence or a bidirectional override would act; and NUL cannot be stored
// in Postgres text.
func cleanText(b []byte) string {
	s := string(b)
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || !safetext.Unsafe(r) {
			return r
		}
		return -1
	}, s)
}

// maxLocationText bounds the Location a redirect's error text quotes.
const maxLocationText = 200

// redirectText is the error text of a 3xx answer: its status and, when it has one, the Location
// it points to, as the receiver sent it (safe to show, at most maxLocationText bytes), so that
// the customer can see which URL to register instead (docs/api.md, "Retries").
func redirectText(status int, location string) string {
	text := "HTTP " + strconv.Itoa(status)
	location = strings.TrimSpace(safetext.Strip(strings.ToValidUTF8(location, "")))
	if len(location) > maxLocationText {
		cut := maxLocationText
		for cut > 0 && !utf8.RuneStart(location[cut]) {
			cut--
		}
		location = location[:cut] + "…"
	}
	if location != "" {
		text += " to " + location
	}
	return text + " (redirects are not followed)"
}

// finish records the outcome of attempt c.attempt and moves the delivery on: delivered, failed,
// or retrying with next_attempt_at after wait. It returns the delivery's creation time, and
// whether the outcome was applied to the delivery: it is not when the delivery was moved on
// meanwhile (an operator, or the next attempt claimed after this one's lease ran out while its
// worker was alive but stalled). A 2xx is applied even then, as long as the delivery is
// unfinished: the receiver has the callback, whatever the later attempt answers.
func (w *Worker) finish(ctx context.Context, c *claimed, res result, out outcome, wait time.Duration) (time.Time, bool, error) {
	state := StateRetrying
	switch out {
	case outcomeDelivered:
		state = StateDelivered
	case outcomeFailed:
		state = StateFailed
	}
	var status *int
	if res.status != 0 {
		status = &res.status
	}
	var errText, body *string
	if res.errText != "" {
		errText = &res.errText
	}
	if res.status != 0 {
		body = &res.body
	}
	var createdAt time.Time
	var root uuid.UUID
	// A delivered delivery erases its sealed secret: no attempt of it, nor a replay (Replay takes
	// only failed ones), can need it again (outbox.go, CreateDelivery).
	err := w.db.QueryRow(ctx, `
		WITH a AS (
			UPDATE delivery_attempts
			SET duration_ms = $3, http_status = $4, error = $5, response_body = $6
			WHERE delivery_id = $1 AND attempt = $2)
		UPDATE deliveries
		SET state = $7::text, last_status = $4, last_error = $5, updated_at = now(),
		    next_attempt_at = CASE WHEN $7::text = 'retrying' THEN now() + $8 * interval '1 millisecond' END,
		    finished_at = CASE WHEN $7::text IN ('delivered', 'failed') THEN now() END,
		    signature = coalesce(signature, $9),
		    webhook_secret = CASE WHEN $7::text = 'delivered' THEN NULL ELSE webhook_secret END
		WHERE id = $1 AND (attempts = $2 OR $7::text = 'delivered') AND state IN ('pending', 'retrying')
		RETURNING created_at, coalesce(replay_of, id)`,
		c.id, c.attempt, res.duration.Milliseconds(), status, errText, body, state, max(wait.Milliseconds(), 0), c.serviceSig,
	).Scan(&createdAt, &root)
	if errors.Is(err, pgx.ErrNoRows) {
		// Someone else moved the delivery on (an operator, a lease that ran out); the attempt row
		// is still worth keeping, and the message is done with.
		return time.Now(), false, nil
	}
	if err == nil && state == StateDelivered {
		// Once one of an original and its replays is delivered, no new replay can be made
		// (Replay finds this live one), so the failed ones' secrets go too. Best effort: a
		// secret left here stays sealed and goes with the row at retention.
		if _, xerr := w.db.Exec(ctx, `
			UPDATE deliveries SET webhook_secret = NULL
			WHERE (id = $1 OR replay_of = $1) AND id <> $2 AND state = 'failed' AND webhook_secret IS NOT NULL`,
			root, c.id); xerr != nil {
			w.log.Warn("webhook: erase the secrets of a delivered replay's family", "delivery_id", c.id, "err", xerr)
		}
	}
	return createdAt, err == nil, err
}

// Config is what the delivery worker takes from the process configuration; the binaries that run
// it build it (cmd/webhook-worker, and cmd/api in dev mode).
type Config struct {
	// AllowPrivate lets callbacks reach loopback and private networks
	// (MAILVET_WEBHOOK_ALLOW_PRIVATE; tests only).
	AllowPrivate bool
	// DNSResolver is the host:port callback hosts are looked up at (MAILVET_DNS_RESOLVER).
	DNSResolver string
	// Secrets are the process's sealing keys (MAILVET_SECRETS_KEY; nil: sealed.Process()).
	Secrets *sealed.Keys
}

// Services builds a worker from cfg and returns its long-running parts — delivery, the outbox
// sweep and retention — for app.Infra.Run. The webhook binary and `api -dev` run the same parts.
// ready (may be nil) gets a check that the deliveries consumer is running.
func Services(db DB, js jetstream.JetStream, layout queue.Layout, cfg Config, concurrency int, log *slog.Logger, reg prometheus.Registerer, ready *health.Checker) ([]func(context.Context) error, error) {
	w, err := NewWorker(db, js, Options{
		Concurrency: concurrency,
		Client:      ClientOptions{AllowPrivate: cfg.AllowPrivate, DNSResolver: cfg.DNSResolver},
		Log:         log,
		Metrics:     reg,
		Layout:      layout,
		Secrets:     cfg.Secrets,
	})
	if err != nil {
		return nil, err
	}
	if ready != nil {
		ready.Add("consumer webhooks", w.Ready)
	}
	if cfg.AllowPrivate {
		log.Warn("MAILVET_WEBHOOK_ALLOW_PRIVATE is set: callbacks may reach loopback and private networks")
	}
	return []func(context.Context) error{w.Run, w.RunSweeper, w.RunRetention, w.RunReseal}, nil
}
