// Package client is the official Go client of the Mailvet API (docs/api.md): verification of
// single addresses, batches of any length and NDJSON streams, asynchronous jobs, bulk lists
// (docs/lists.md: upload a file, follow its progress, download its results), and the
// management API (account, keys, usage, billing portal, webhook deliveries).
//
// Every method takes a context: cancelling it, or its deadline passing, abandons the request and
// any wait between retries. Errors the API answers are *Error values carrying the error envelope
// (docs/errors.md); use errors.As to read them:
//
//	c := client.New(os.Getenv("MAILVET_API_KEY"), client.WithRetryOnRateLimit(true))
//	r, err := c.Verify(ctx, "ann@acme.example")
//	var apiErr *client.Error
//	if errors.As(err, &apiErr) && apiErr.Code == client.CodeRateLimitExceeded { … }
//
// The package is documented with examples in docs/clients.md.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Version is the client's version, sent in the User-Agent header.
const Version = "0.1.0"

// DefaultBaseURL is where `make run` and `make demo` serve the API (docs/development.md, "The local system").
const DefaultBaseURL = "http://localhost:8080"

// DefaultMaxRetries is how many times a request refused for the rate limit (answered 503 with
// Retry-After, or lost to a network failure) is sent again when retrying is on.
const DefaultMaxRetries = 3

// Chunk sizes: VerifyBatch sends 50 addresses a request (the route takes up to 100, but smaller
// requests fit the smaller plans' per-minute limits), VerifyStream up to the stream route's
// maximum of 1,000 (docs/api.md, "Limits").
const (
	BatchChunkSize  = 50
	StreamChunkSize = 1000
)

// retryMargin is added to reset_at before a rate-limited request is sent again, so that the
// request lands in the next window even with a little clock skew or rounding of reset_at to
// the second.
const retryMargin = 50 * time.Millisecond

// MaxRetryWait bounds one wait before a retry. The API's own waits are at most a rate-limit
// window (60 s) or a few seconds of Retry-After; a longer one (a proxy's Retry-After of an hour)
// is not waited out in silence: the error is returned at once, its RetryAfter or ResetAt saying
// when the caller may try again.
const MaxRetryWait = 2 * time.Minute

// jitter is a random part of wait, up to a tenth of it and at most a second, added to every wait
// before a retry, so that clients refused together (by an outage's 503, or at the end of a
// rate-limit window they share) do not all come back in the same millisecond.
func jitter(wait time.Duration) time.Duration {
	span := min(wait/10, time.Second)
	if span <= 0 {
		return 0
	}
	return mrand.N(span)
}

// Client talks to one Mailvet deployment with one API key. It is safe for concurrent use.
type Client struct {
	baseURL          string
	apiKey           string
	http             *http.Client
	timeout          time.Duration
	retryOnRateLimit bool
	maxRetries       int
	userAgent        string
}

// Option configures a Client.
type Option func(*Client)

// WithBaseURL sets the API's base URL, e.g. "https://mailvet.example.com" (default
// DefaultBaseURL). A trailing slash is ignored.
func WithBaseURL(u string) Option {
	return func(c *Client) { c.baseURL = strings.TrimRight(u, "/") }
}

// WithHTTPClient sets the *http.Client requests go through (default: a client of its own with
// the standard transport). Its Timeout, if any, also bounds a whole stream, so prefer
// WithTimeout.
func WithHTTPClient(h *http.Client) Option {
	return func(c *Client) { c.http = h }
}

// DefaultTimeout bounds each HTTP exchange unless WithTimeout says otherwise.
const DefaultTimeout = 60 * time.Second

// WithTimeout bounds each HTTP exchange (each attempt, not the waits between retries; default
// DefaultTimeout; 0 means no bound beyond the context's). For VerifyStream it bounds the time until each
// request's response starts; reading the stream is bounded by the context only, because a
// stream of 1,000 addresses may rightly take minutes.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) { c.timeout = d }
}

// WithRetryOnRateLimit turns retrying on or off (default off). When on, a 429
// rate_limit_exceeded is sent again once reset_at has passed (plus 50 ms), and a 503 with a
// Retry-After header after that many seconds (plus 50 ms), at most WithMaxRetries times per
// request; each wait gets a random jitter of up to a tenth of it (at most 1 s), and a wait longer
// than MaxRetryWait is not waited: the error is returned. Other
// 429s (monthly_quota_exceeded, key_limit_reached) cannot be cured by waiting a minute and are
// returned at once. Retrying is safe: a refused request is never charged (docs/errors.md), and a
// call that creates something or verifies a batch (VerifyAsync, each request of VerifyBatch, a
// list, a key, a portal session) carries an Idempotency-Key, the same on every retry, so the API
// runs and bills it once; a 409 idempotency_key_in_use (its first attempt still running) is sent
// again after Retry-After. A 503 to a delivery replay is not retried, since it may have acted
// before its answer failed.
//
// Retrying on also retries network failures (a refused or reset connection, one closed before
// the answer, a WithTimeout expiry), after 0.5 s, then 1 s, 2 s, … with the same jitter and
// bound, when a repeat is safe: a read or a delete, a POST with an Idempotency-Key (and, for an
// upload, a body that can be replayed: see UploadList), or any request whose connection was
// refused, since nothing was sent. A POST without a key (Verify, VerifyStream, CancelList,
// RetryDelivery) whose request may have reached the server is not sent again, and neither is a
// stream that has started, nor a call whose context ended. A DeleteList or RevokeKey whose retry
// is answered list_not_found or key_not_found, after an attempt whose answer was lost, returns
// nil: that attempt deleted it (docs/clients.md, "Network failures").
func WithRetryOnRateLimit(on bool) Option {
	return func(c *Client) { c.retryOnRateLimit = on }
}

// WithMaxRetries sets how many retries a request may use (default DefaultMaxRetries; 0 retries
// never). It matters only with WithRetryOnRateLimit(true).
func WithMaxRetries(n int) Option {
	return func(c *Client) { c.maxRetries = max(n, 0) }
}

// WithUserAgent replaces the User-Agent header ("mailvet-go/<Version>").
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// New returns a client that authenticates with apiKey: a standard key (sk_live_…) for the verify
// methods, a provisioning key (sk_mgmt_…) for the management methods (docs/api.md, "Authentication").
func New(apiKey string, opts ...Option) *Client {
	c := &Client{
		baseURL:    DefaultBaseURL,
		apiKey:     apiKey,
		http:       &http.Client{},
		maxRetries: DefaultMaxRetries,
		timeout:    DefaultTimeout,
		userAgent:  "mailvet-go/" + Version,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// BaseURL is the API base URL the client sends to.
func (c *Client) BaseURL() string { return c.baseURL }

// request is one API call: method, path (with query), and the JSON body or nil.
type request struct {
	method, path string
	body         any
}

// units is how many addresses r asks to verify: the length of a batch or stream, 1 for a single
// or async verification, 0 for any other request.
func (r request) units() int {
	switch b := r.body.(type) {
	case map[string][]string:
		return len(b["emails"])
	case map[string]string:
		if _, ok := b["email"]; ok {
			return 1
		}
	}
	return 0
}

// repeatable says whether r may be sent again after the 503 e, which can come after the request
// acted (a commit whose answer came too late): a request with an Idempotency-Key (an async or
// batch verification, a list, a key, a portal session: the API runs it once), a single
// verification or a stream (refused ones are never charged), a read, a delete or a cancel, but
// not a delivery replay. What the API
// promises of its own 503s says nothing of another's: a proxy may answer 503 after passing the
// request on and the API verifying or charging, so a POST without a key answered by a 503 that is
// not the API's envelope is never sent again.
func (r request) repeatable(e *Error) bool {
	if r.method != http.MethodPost || r.idempotent() {
		// A request with an Idempotency-Key runs once however often it is sent: a retry gets the
		// first answer again (docs/api.md, "Idempotency").
		return true
	}
	if e.Code == CodeUnexpectedResponse {
		return false
	}
	return strings.HasPrefix(r.path, "/v1/email/verify") || strings.HasSuffix(r.path, "/cancel")
}

// route is r's path without its query: what errors name, since a query may hold an address
// (DELETE /v1/email/history?email=…) that has no place in the caller's logs.
func (r request) route() string {
	path, _, _ := strings.Cut(r.path, "?")
	return path
}

// idempotent says whether r carries an Idempotency-Key: an asynchronous verification, a batch
// request (each is billed), a list upload, a key or a billing portal session (docs/api.md,
// "Idempotency"). The stream route takes none.
func (r request) idempotent() bool {
	if r.method != http.MethodPost {
		return false
	}
	switch r.route() {
	case "/v1/email/verify":
		// A synchronous verification carries none: the key would have the API store its answer
		// (the address's result) for 24 hours and add two Postgres round trips to the fastest
		// call, about 2 ms on loopback, to spare a rare double charge of one address.
		b, ok := r.body.(map[string]string)
		_, async := b["webhook_url"]
		return ok && async
	case "/v1/email/verify/batch", "/v1/email/lists", "/v1/management/keys", "/v1/management/billing/portal":
		return true
	}
	return false
}

// newIdempotencyKey makes the key of one call: 128 random bits, in hex.
func newIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// upload is a request body that is not JSON: a file, streamed as it is read (docs/lists.md,
// "Uploading"). It can be sent again only when it can be replayed (see rewind).
type upload struct {
	body        io.Reader
	contentType string
	header      http.Header // extra request headers, e.g. Mailvet-Webhook-Secret

	start   int64      // body's offset before the first attempt, when body is an io.Seeker
	seeker  bool       // body is an io.Seeker whose offset could be read
	current *guard     // the body handed to the latest attempt
	mu      sync.Mutex // see guard.mu
}

// prepare notes where a seekable body starts, so that later attempts can send it from there.
func (u *upload) prepare() {
	if s, ok := u.body.(io.Seeker); ok {
		if off, err := s.Seek(0, io.SeekCurrent); err == nil {
			u.start, u.seeker = off, true
		}
	}
}

// reader is the body of one attempt. The previous attempt's reader is shut first, so that a
// transport goroutine still holding it cannot read from the file once it has been rewound.
func (u *upload) reader() io.Reader {
	if u.current != nil {
		u.current.shut()
	}
	u.current = &guard{r: u.body}
	if u.seeker {
		u.current.mu = &u.mu
	}
	return u.current
}

// rewind readies the body to be sent again and says whether it can be: a body no attempt has
// read from yet (the connection failed before the request was written), or an io.Seeker (a file,
// a bytes.Reader) sought back to where it started. Any other reader that was read from (a pipe,
// standard input) cannot be replayed.
func (u *upload) rewind() bool {
	if u.current == nil {
		return true
	}
	if !u.current.shut() {
		return true
	}
	if !u.seeker {
		return false
	}
	_, err := u.body.(io.Seeker).Seek(u.start, io.SeekStart)
	return err == nil
}

// guard is an attempt's view of an upload body: it records whether it was read and, once shut,
// reads nothing more.
type guard struct {
	r io.Reader
	// mu, for a body that can be rewound, is held during each read, so that shut waits for a read
	// in flight before the body is sought back. A body that cannot be rewound has none: a read of a
	// pipe may block for as long as the pipe is silent, and nothing waits for it.
	mu           *sync.Mutex
	read, closed atomic.Bool
}

func (g *guard) Read(p []byte) (int, error) {
	if g.mu != nil {
		g.mu.Lock()
		defer g.mu.Unlock()
	}
	if g.closed.Load() {
		return 0, errBodyShut
	}
	g.read.Store(true)
	if g.closed.Load() {
		// shut ran between the two loads and may have found no read yet: this one must not be.
		return 0, errBodyShut
	}
	return g.r.Read(p)
}

// shut stops g's reads and says whether any was made.
func (g *guard) shut() bool {
	g.closed.Store(true)
	if g.mu != nil {
		g.mu.Lock()
		defer g.mu.Unlock()
	}
	return g.read.Load()
}

// errBodyShut is what a shut upload body reads: its attempt is over.
var errBodyShut = errors.New("mailvet: the upload's attempt is over")

// attempt is a response whose status was the one expected; release closes its body and frees
// its context once the caller has read it.
type attempt struct {
	resp    *http.Response
	ctx     context.Context // the attempt's context: its cause tells a WithTimeout bound apart
	release func()
}

// send performs r, retrying as configured, and returns the last attempt when its status is want
// (the caller releases it); any other answer becomes an error. The body is encoded once, so every
// attempt sends the same bytes.
func (c *Client) send(ctx context.Context, r request, want int, stream bool) (*attempt, error) {
	return c.sendUpload(ctx, r, nil, want, stream)
}

// sendUpload is send with an optional upload body instead of r's JSON body. An upload is sent
// again only when its body can be replayed (upload.rewind).
func (c *Client) sendUpload(ctx context.Context, r request, up *upload, want int, stream bool) (*attempt, error) {
	var payload []byte
	if r.body != nil {
		var err error
		if payload, err = json.Marshal(r.body); err != nil {
			return nil, fmt.Errorf("mailvet: encode %s %s: %w", r.method, r.route(), err)
		}
	}
	if up != nil {
		up.prepare()
		defer func() { // net/http may still hold the last attempt's body
			if up.current != nil {
				up.current.shut()
			}
		}()
	}
	// One key per call, sent on every attempt, so that the API runs and bills the call once.
	var key string
	if r.idempotent() {
		key = newIdempotencyKey()
	}
	maybeSent := false // an earlier attempt may have reached the server: its answer was lost
	for n := 0; ; n++ {
		a, err := c.once(ctx, r, payload, up, stream, key)
		if err != nil {
			retry, sent := transportFailure(ctx, err)
			// A request that may have reached the server is sent again only when a repeat does
			// nothing more: a read or a delete, or a POST with an Idempotency-Key (docs/clients.md,
			// "Network failures"). One that never left (a refused connection) may always be.
			if !retry || n >= c.retries() || (sent && !r.safeToRepeat(key)) || (up != nil && !up.rewind()) {
				return nil, err
			}
			maybeSent = maybeSent || sent
			wait := transportRetryWait << min(n, 6)
			if !c.waitToRetry(ctx, wait+jitter(wait)) {
				return nil, err
			}
			continue
		}
		if a.resp.StatusCode == want {
			return a, nil
		}
		apiErr := readError(a.resp)
		if maybeSent && goneAlready(r, want, apiErr) {
			// The lost attempt deleted it: the call did what was asked (docs/clients.md, "Network
			// failures").
			a.resp.Body = http.NoBody
			return a, nil
		}
		a.release()
		wait, retryable := c.retryWait(r, apiErr)
		if !retryable || n >= c.retries() || wait > MaxRetryWait || (up != nil && !up.rewind()) {
			return nil, apiErr
		}
		wait += jitter(wait)
		if deadline, ok := ctx.Deadline(); ok && time.Now().Add(wait).After(deadline) {
			// The context would end before the retry could be sent: the API's answer says more
			// than a deadline error would.
			return nil, apiErr
		}
		if hook, ok := ctx.Value(waitHook{}).(func(time.Time, *Error)); ok {
			hook(time.Now().Add(wait), apiErr) // VerifyBatchWith's progress
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("mailvet: %s %s: waiting to retry after %s: %w", r.method, r.route(), apiErr.Code, ctx.Err())
		case <-t.C:
		}
	}
}

// retries is how many times a request may be sent again: none with retrying off.
func (c *Client) retries() int {
	if !c.retryOnRateLimit {
		return 0
	}
	return c.maxRetries
}

// transportRetryWait is the wait before the first retry after a network failure; it doubles on
// each failure after that (0.5 s, 1 s, 2 s with the default three retries), and gets its jitter
// like every other wait.
const transportRetryWait = 500 * time.Millisecond

// waitToRetry waits d before a retry after a network failure and says whether to send it: not
// when the context ends first, or its deadline would pass before the retry is sent (the network
// failure is then the error to report).
func (c *Client) waitToRetry(ctx context.Context, d time.Duration) bool {
	if deadline, ok := ctx.Deadline(); ok && time.Now().Add(d).After(deadline) {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// transportFailure reads the error of an attempt that got no answer. retry says whether another
// attempt may cure it: a refused or reset connection, one closed before the answer (EOF), a
// timeout of the attempt (WithTimeout, the http.Client's). Never the caller's context ending, nor
// a failure no new connection changes (a malformed URL, a certificate refused, a host name that
// does not exist). sent says whether the request may have reached the server: false only when
// the connection was never made (net.OpError "dial"), so that nothing was written.
func transportFailure(ctx context.Context, err error) (retry, sent bool) {
	if ctx.Err() != nil {
		return false, true
	}
	var op *net.OpError
	if errors.As(err, &op) {
		if op.Op == "dial" {
			var dns *net.DNSError
			if errors.As(err, &dns) && dns.IsNotFound {
				return false, false
			}
			return true, false
		}
		return true, true
	}
	if errors.Is(err, ErrTimeout) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true, true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true, true
	}
	return false, true
}

// safeToRepeat says whether r may be sent again though its first attempt may have acted: a read
// or a delete (HTTP's idempotent methods: a second one changes nothing more), or a POST carrying
// idemKey, which the API runs once however often it is sent (docs/api.md, "Idempotency"). A POST
// without a key (a single verification, a stream, a cancel, a delivery replay) is not.
func (r request) safeToRepeat(idemKey string) bool {
	switch r.method {
	case http.MethodGet, http.MethodHead, http.MethodDelete:
		return true
	}
	return idemKey != ""
}

// goneAlready says whether e, the answer to a retry of r after an attempt whose answer was lost,
// says that what r deletes is no longer there: a key or a list the lost attempt revoked or
// deleted answers 404 to the retry (docs/api.md). Only deletions that answer 204 qualify: a
// history deletion answers its counts (those of the retry), an account deletion's retry is
// 401 invalid_api_key, which a wrong key answers too.
func goneAlready(r request, want int, e *Error) bool {
	return r.method == http.MethodDelete && want == http.StatusNoContent && e.Status == http.StatusNotFound &&
		(e.Code == CodeKeyNotFound || e.Code == CodeListNotFound)
}

// retryWait says whether r's answer e may be retried under the client's options and how long to
// wait first (docs/errors.md: rate_limit_exceeded after reset_at, 503s after Retry-After). A
// request larger than the account's whole per-minute limit is not: it can never pass, and its
// caller splits it (chunked).
func (c *Client) retryWait(r request, e *Error) (time.Duration, bool) {
	if !c.retryOnRateLimit {
		return 0, false
	}
	switch {
	case e.Status == http.StatusTooManyRequests && e.Code == CodeRateLimitExceeded:
		if e.Limit > 0 && e.Limit < r.units() {
			return 0, false
		}
		if !e.ResetAt.IsZero() {
			return withMargin(max(time.Until(e.ResetAt), 0)), true
		}
		if e.RetryAfter > 0 {
			return withMargin(e.RetryAfter), true
		}
		return 0, false
	case e.Status == http.StatusServiceUnavailable && e.RetryAfter > 0 && r.repeatable(e):
		return withMargin(e.RetryAfter), true
	case e.Status == http.StatusConflict && e.Code == CodeIdempotencyKeyInUse && r.idempotent():
		// The first attempt of this call is still running on the server: the same key, sent
		// again after Retry-After, gets its answer (docs/api.md, "Idempotency").
		return withMargin(max(e.RetryAfter, time.Second)), true
	}
	return 0, false
}

// withMargin is the wait d plus retryMargin. A wait already beyond MaxRetryWait is refused as it
// is: near the largest Duration (a reset_at centuries away, a proxy's enormous Retry-After) the
// sum would wrap around to a negative wait, retried at once.
func withMargin(d time.Duration) time.Duration {
	if d > MaxRetryWait {
		return d
	}
	return d + retryMargin
}

// ErrTimeout is wrapped by the error of a request that the WithTimeout bound ended.
var ErrTimeout = errors.New("mailvet: request timed out")

// once sends one attempt; idemKey, when set, goes in its Idempotency-Key header.
func (c *Client) once(ctx context.Context, r request, payload []byte, up *upload, stream bool, idemKey string) (*attempt, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	var timer *time.Timer
	// An upload's answer comes only once the whole file is read and stored, which may rightly
	// take minutes, so only the context bounds it (see UploadList).
	if c.timeout > 0 && up == nil {
		// A timer rather than context.WithTimeout, so that a stream can stop it once its response
		// has started (see WithTimeout).
		timer = time.AfterFunc(c.timeout, func() { cancel(ErrTimeout) })
	}
	stop := func() {
		if timer != nil {
			timer.Stop()
		}
		cancel(nil)
	}
	var body io.Reader
	switch {
	case up != nil:
		// A guard, not the caller's reader: net/http closes a body that is an io.Closer, and the
		// caller's file is the caller's to close.
		body = up.reader()
	case payload != nil:
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, c.baseURL+r.path, body)
	if err != nil {
		stop()
		return nil, fmt.Errorf("mailvet: %s %s: %w", r.method, r.route(), err)
	}
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if up != nil {
		if l, ok := up.body.(interface{ Len() int }); ok && l.Len() > 0 {
			// As http.NewRequest does for the in-memory readers it knows, which the guard hides.
			req.ContentLength = int64(l.Len())
		}
		for k, vs := range up.header {
			req.Header[k] = vs
		}
		req.Header.Set("Content-Type", up.contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL, _, _ = strings.Cut(ue.URL, "?") // as route: no address in the caller's logs
		}
		err = timeoutCause(ctx, err)
		stop()
		return nil, fmt.Errorf("mailvet: %s %s: %w", r.method, r.route(), err)
	}
	if stream && timer != nil {
		timer.Stop()
	}
	return &attempt{resp: resp, ctx: ctx, release: func() {
		resp.Body.Close()
		stop()
	}}, nil
}

// timeoutCause marks err as a timeout when the attempt's context was ended by WithTimeout's
// bound rather than by the caller.
func timeoutCause(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), ErrTimeout) && !errors.Is(err, ErrTimeout) {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return err
}

// call performs r and decodes the JSON answer of status want into out (nil: discard it).
func (c *Client) call(ctx context.Context, r request, want int, out any) error {
	a, err := c.send(ctx, r, want, false)
	if err != nil {
		return err
	}
	defer a.release()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(a.resp.Body, 1<<20))
		return nil
	}
	return decodeJSON(a, r, out)
}

// maxAnswer bounds a JSON answer the client decodes. The API's largest (a page of 100 lists with
// their counts, a batch of 100 results) are well under a megabyte; the large downloads (a list's
// results, the account's export) are streams the caller reads, not decoded here. Anything longer
// is not the API's answer, and reading on would hold it in memory until WithTimeout ends it.
const maxAnswer = 32 << 20

// errAnswerTooLarge is the error of an answer longer than maxAnswer.
var errAnswerTooLarge = fmt.Errorf("the answer is larger than %d MiB, which no answer of the API's is", maxAnswer>>20)

// bounded reads at most left bytes of r, then fails with errAnswerTooLarge.
type bounded struct {
	r    io.Reader
	left int64
}

func (b *bounded) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errAnswerTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// decodeJSON decodes the JSON answer of attempt a to r into out.
func decodeJSON(a *attempt, r request, out any) error {
	if err := json.NewDecoder(&bounded{r: a.resp.Body, left: maxAnswer}).Decode(out); err != nil {
		return fmt.Errorf("mailvet: %s %s%s: decode the %d response: %w", r.method, r.route(),
			requestIDNote(a.resp.Header.Get("X-Request-Id")), a.resp.StatusCode, timeoutCause(a.ctx, err))
	}
	return nil
}

// pathEscape escapes one path segment (ids come from callers).
func pathEscape(s string) string { return url.PathEscape(s) }

// pagePath is the path of one page of a paged listing (Lists, Deliveries, AuditEvents): path with
// the listing's own filters v (nil for none), the page's limit (0 for the API's default) and its
// cursor (the previous page's NextCursor, "" for the first). The listings take limit and cursor
// alike, so their query is built in one place.
func pagePath(path string, v url.Values, limit int, cursor string) string {
	if v == nil {
		v = url.Values{}
	}
	if limit != 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	return path
}
