// Package idempotency makes the API's POST routes that create something safe to retry, with
// Stripe's semantics (docs/api.md, "Idempotency"). A request that carries an Idempotency-Key
// header runs once per account and key: a retry with the same key and the same request within
// 24 hours gets the first response again (status, headers, body) without running, and so
// without being billed, again; the same key with another request is refused; a retry that
// arrives while the first request still runs waits for it. A request that fails (any status
// outside 2xx) gives its key back, so that a retry runs, unless its effect may have committed
// with its response (Keep) without the handler hearing so; so does one whose answer did not
// reach the client and was not charged (NotDelivered).
//
// Guard is an Echo middleware wrapped around each such route; the keys live in Postgres (Store),
// so every replica sees them, and Sweep deletes them after their 24 hours.
package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/database"
)

const (
	// Header is the request header that carries the key.
	Header = "Idempotency-Key"
	// ReplayedHeader marks a response that is the replay of an earlier one.
	ReplayedHeader = "Idempotent-Replayed"
	// MaxKeyLen bounds a key: room for any UUID or request id with a prefix.
	MaxKeyLen = 255
	// Lifetime is how long a key is kept after its first request.
	Lifetime = 24 * time.Hour
	// DefaultWait bounds how long a retry waits for the request that holds its key.
	DefaultWait = 30 * time.Second
	// maxStored bounds a response kept for replay; the responses of the guarded routes are a few
	// hundred bytes, and a larger one is answered but not kept (its key is released).
	maxStored = 1 << 20
)

var (
	// ErrInvalidKey is a key header that is empty, too long, sent twice or not visible ASCII.
	ErrInvalidKey = errors.New("header Idempotency-Key must be sent once, as 1 to 255 visible ASCII characters (! to ~)")
	// ErrKeyReused is a key used before with another request (another body, route or parameters).
	ErrKeyReused = errors.New("this Idempotency-Key was used with another request in the last 24 hours")
	// ErrKeyInUse is a key whose first request was still running when the wait ended.
	ErrKeyInUse = errors.New("a request with this Idempotency-Key is still running")
)

// CheckKey says whether key is a valid Idempotency-Key.
func CheckKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return ErrInvalidKey
	}
	for i := 0; i < len(key); i++ {
		if key[i] < '!' || key[i] > '~' {
			return ErrInvalidKey
		}
	}
	return nil
}

// Route says how a guarded route's request is read.
type Route struct {
	// Stream marks a route whose body is a file that the handler reads itself (a list upload):
	// the body is hashed as the handler reads it, never buffered here. Otherwise the body, which
	// the JSON body guard bounds, is read whole and hashed before the key is claimed, so that a
	// retry that waits for its key is not also waiting out its body's read deadline.
	Stream bool
	// Headers are the request headers that are parameters of the request (a webhook secret), and
	// so part of what a retry must repeat; the method, path, query and Content-Type always are.
	Headers []string
	// Body returns the request body with the route's limits and deadlines: the whole body of a
	// JSON route, and a stream route's when it is hashed without running the handler (a replay
	// or a refusal).
	Body func(c echo.Context) io.Reader
	// BodyError maps a failure to read the body to the route's answer.
	BodyError func(error) error
}

// Guard is the idempotency middleware of one API server.
type Guard struct {
	store   *Store
	now     func() time.Time
	account func(c echo.Context) string
	log     *slog.Logger
	// Scope, when set, names the part of the account a request's keys belong to ("" for the
	// account's own): keys of two scopes never name the same request. It is joined to the key
	// with a space, which no valid key holds (CheckKey), so no key a client sends can reach
	// another scope's (scopedKey).
	Scope func(c echo.Context) string
	// Wait bounds how long a retry waits for the request holding its key; Poll is how often it
	// looks again.
	Wait, Poll time.Duration
}

// New returns a guard on db. now is the clock of the keys' lifetime; account names the caller of
// an authenticated request (keys are per account).
func New(db database.DB, now func() time.Time, account func(c echo.Context) string, log *slog.Logger) *Guard {
	return &Guard{store: NewStore(db), now: now, account: account, log: log, Wait: DefaultWait, Poll: 50 * time.Millisecond}
}

// Middleware guards one route. It must run after authentication, which names the account.
func (g *Guard) Middleware(rt Route) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			values := c.Request().Header.Values(Header)
			if len(values) == 0 {
				return next(c)
			}
			if len(values) > 1 {
				return ErrInvalidKey
			}
			key := values[0]
			if err := CheckKey(key); err != nil {
				return err
			}
			if g.Scope != nil {
				key = scopedKey(g.Scope(c), key)
			}
			// sum is the request's hash, known here for a JSON route; nil for a stream route,
			// whose body is hashed only as it is read.
			var sum []byte
			if !rt.Stream {
				raw, err := io.ReadAll(rt.Body(c))
				if err != nil {
					return rt.BodyError(err)
				}
				h := requestHash(c, rt)
				_, _ = h.Write(raw)
				sum = h.Sum(nil)
				c.Request().Body = io.NopCloser(bytes.NewReader(raw))
			}
			account := g.account(c)
			ctx := c.Request().Context()
			giveUp := time.Now().Add(g.Wait)
			for {
				cl, err := g.store.tryClaim(ctx, account, key, g.now())
				if err != nil {
					return err
				}
				switch {
				case cl.done != nil:
					return g.replay(c, rt, sum, account, key, cl.done)
				case cl.owner != uuid.Nil:
					return g.run(c, next, rt, sum, account, key, cl.owner)
				}
				if time.Now().After(giveUp) {
					return ErrKeyInUse
				}
				t := time.NewTimer(g.Poll)
				select {
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				case <-t.C:
				}
			}
		}
	}
}

// requestHash starts the hash of the request: its method, path, query, Content-Type and the
// route's parameter headers; the body follows.
func requestHash(c echo.Context, rt Route) hash.Hash {
	h := sha256.New()
	r := c.Request()
	parts := []string{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get(echo.HeaderContentType)}
	for _, name := range rt.Headers {
		parts = append(parts, r.Header.Get(name))
	}
	for _, p := range parts {
		_, _ = io.WriteString(h, p)
		_, _ = h.Write([]byte{0})
	}
	return h
}

// replay answers a retry of a completed request: the first response if the request is the same,
// ErrKeyReused otherwise. sum is the retry's hash, nil when its body is still to be read.
func (g *Guard) replay(c echo.Context, rt Route, sum []byte, account, key string, r *record) error {
	if sum == nil {
		h := requestHash(c, rt)
		if _, err := io.Copy(h, rt.Body(c)); err != nil {
			return rt.BodyError(err)
		}
		sum = h.Sum(nil)
	}
	if !r.matches(account, key, sum) {
		return ErrKeyReused
	}
	out := c.Response().Header()
	for k, vs := range r.header {
		out[k] = vs
	}
	out.Set(ReplayedHeader, "true")
	c.Response().WriteHeader(r.status)
	_, err := c.Response().Write(r.body)
	return err
}

// Keep stores the response of a request that holds its Idempotency-Key with db, the transaction
// that makes the request's effect (an asynchronous job, a list, an API key), so that the two
// commit together: when that commit succeeds but its answer is lost, the handler answers an error
// (and calls MayHaveCommitted) while the effect is stored, and a retry gets this response, not a
// second effect (docs/api.md, "Idempotency"). A handler that goes on to answer normally has its
// actual response stored over it; one that answers an error otherwise gives the key back,
// response and all (an effect undone after its commit).
type Keep func(ctx context.Context, db database.DB, status int, header http.Header, body []byte) error

// MayHaveCommitted says that the error the handler of c answers may follow a transaction that
// committed with its response (Keep) without the handler hearing so: the key is given back only
// if no response was stored.
func MayHaveCommitted(c echo.Context) { c.Set(mayHaveCommittedKey, true) }

// KeepOf returns the Keep of the request c, or nil when it holds no Idempotency-Key, or when its
// body is a stream not read to its end yet: a stream route's request is hashed as it is read, so
// its Keep exists once the handler has read the whole body (a list upload's file is spooled
// before its transaction begins).
func KeepOf(c echo.Context) Keep {
	k, _ := c.Get(keepKey).(func() Keep)
	if k == nil {
		return nil
	}
	return k()
}

// NotDelivered says that the response of the request c did not reach the client and that the
// handler took back what it would have charged (docs/reliability.md, "Metering guarantees"): the
// response is not kept and the key is given back, so that a retry with it runs and is charged
// once it is delivered, instead of getting a result never charged.
func NotDelivered(c echo.Context) { c.Set(notDeliveredKey, true) }

// Keys of the request context.
const (
	keepKey             = "mailvet.idempotency.keep"
	mayHaveCommittedKey = "mailvet.idempotency.may_have_committed"
	notDeliveredKey     = "mailvet.idempotency.not_delivered"
)

// run runs the request that owns the key and keeps its response if it succeeded; otherwise, or
// if the handler panics, it releases the key. sum is the request's hash, nil for a stream route.
func (g *Guard) run(c echo.Context, next echo.HandlerFunc, rt Route, sum []byte, account, key string, owner uuid.UUID) error {
	kept := false
	defer func() {
		if kept {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), 5*time.Second)
		defer cancel()
		unsure, _ := c.Get(mayHaveCommittedKey).(bool)
		if err := g.store.release(ctx, account, key, owner, unsure); err != nil {
			// The key stays taken until its lease ends (DefaultLease); retries wait, then get 409.
			g.log.Warn("idempotency: release key", "err", err)
		}
	}()
	req := c.Request()
	var body *hashingBody
	if sum == nil {
		body = &hashingBody{ReadCloser: req.Body, h: requestHash(c, rt)}
		req.Body = body
	}
	c.Set(keepKey, func() Keep {
		h := sum
		if h == nil {
			if !body.eof {
				return nil // the hash is not the request's until the whole body is read
			}
			h = body.h.Sum(nil)
		}
		return func(ctx context.Context, db database.DB, status int, header http.Header, b []byte) error {
			return completeIn(ctx, db, account, key, owner, record{hash: h, status: status, header: replayHeader(header), body: b})
		}
	})
	rec := &recorder{ResponseWriter: c.Response().Writer}
	c.Response().Writer = rec
	err := next(c)
	c.Response().Writer = rec.ResponseWriter

	res := c.Response()
	undelivered, _ := c.Get(notDeliveredKey).(bool)
	if err != nil && res.Committed && res.Status >= 200 && res.Status <= 299 {
		// The handler had its effect and began its success, which did not reach the client:
		// an answer it kept with that effect (Keep) is the one the client's retry must get.
		c.Set(mayHaveCommittedKey, true)
	}
	switch {
	case err != nil, !res.Committed, res.Status < 200, res.Status > 299, rec.overflow, undelivered:
		return err
	case body != nil && !body.eof:
		// The handler answered without reading the whole file: the hash would not be the request's.
		return err
	case body != nil:
		sum = body.h.Sum(nil)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), 5*time.Second)
	defer cancel()
	if cerr := g.store.complete(ctx, account, key, owner, record{hash: sum, status: res.Status,
		header: replayHeader(res.Header()), body: rec.buf.Bytes()}); cerr != nil {
		g.log.Warn("idempotency: keep response", "err", cerr)
		// The request succeeded: an answer its handler kept with its effect (Keep) is the one the
		// retry must get, so only a key with no stored answer is given back.
		c.Set(mayHaveCommittedKey, true)
		return err
	}
	kept = true
	return err
}

// replayHeader is what of a response's headers a replay repeats: all but those of the exchange
// itself (the request id, the connection's).
func replayHeader(h http.Header) http.Header {
	out := h.Clone()
	for _, k := range []string{echo.HeaderXRequestID, "Connection", "Content-Length", "Date"} {
		out.Del(k)
	}
	return out
}

// hashingBody hashes a request body as the handler reads it.
type hashingBody struct {
	io.ReadCloser
	h   hash.Hash
	eof bool
}

func (b *hashingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	_, _ = b.h.Write(p[:n])
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// recorder keeps a copy of the response body as it is written.
type recorder struct {
	http.ResponseWriter
	buf      bytes.Buffer
	overflow bool
}

func (r *recorder) Write(p []byte) (int, error) {
	if !r.overflow {
		if r.buf.Len()+len(p) > maxStored {
			r.overflow = true
			r.buf = bytes.Buffer{}
		} else {
			r.buf.Write(p)
		}
	}
	return r.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (read deadlines, flushes).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// scopedKey is key as stored for scope: the scope, a space and the key; the key alone for the
// account's own scope ("").
func scopedKey(scope, key string) string {
	if scope == "" {
		return key
	}
	return scope + " " + key
}

// scopeOf is the scope of a key as scopedKey stored it.
func scopeOf(stored string) string {
	scope, _, ok := strings.Cut(stored, " ")
	if !ok {
		return ""
	}
	return scope
}
