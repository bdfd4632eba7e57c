package idempotency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// clock is a movable clock for the keys' lifetime.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// harness is an Echo server whose one route creates a numbered thing per run, guarded on a real
// database; the account is the X-Account header.
type harness struct {
	t     *testing.T
	pool  *pgxpool.Pool
	guard *Guard
	clock *clock
	e     *echo.Echo
	runs  atomic.Int64
	// hold, when set, keeps each run waiting until it is closed.
	hold chan struct{}
	// fail makes runs answer 503.
	fail atomic.Bool
}

func newHarness(t *testing.T, stream bool) (*harness, string) {
	t.Helper()
	pool := pgtest.New(t)
	a, err := account.NewStore(pool).Create(context.Background(), account.NewAccount{Tier: plan.Free})
	pgtest.Must(t, err, "create account")
	h := &harness{t: t, pool: pool, clock: &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}, e: echo.New()}
	h.guard = New(pool, h.clock.Now, func(c echo.Context) string { return c.Request().Header.Get("X-Account") }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	h.guard.Poll = 10 * time.Millisecond
	h.e.HTTPErrorHandler = func(err error, c echo.Context) {
		status := http.StatusInternalServerError
		switch {
		case errors.Is(err, ErrKeyReused), errors.Is(err, ErrKeyInUse):
			status = http.StatusConflict
		case errors.Is(err, ErrInvalidKey):
			status = http.StatusBadRequest
		}
		_ = c.String(status, err.Error())
	}
	h.e.POST("/things", func(c echo.Context) error {
		body, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		if h.hold != nil {
			<-h.hold
		}
		if h.fail.Load() {
			return c.String(http.StatusServiceUnavailable, "down")
		}
		n := h.runs.Add(1)
		c.Response().Header().Set("Location", fmt.Sprintf("/things/%d", n))
		return c.String(http.StatusCreated, fmt.Sprintf("thing %d of %q", n, body))
	}, h.guard.Middleware(Route{Stream: stream,
		Body:      func(c echo.Context) io.Reader { return c.Request().Body },
		BodyError: func(err error) error { return err }}))
	return h, a.ID
}

func (h *harness) post(acct, key, body string) *http.Response {
	h.t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/things", strings.NewReader(body))
	req.Header.Set("X-Account", acct)
	if key != "" {
		req.Header.Set(Header, key)
	}
	rec := httptest.NewRecorder()
	h.e.ServeHTTP(rec, req)
	return rec.Result()
}

func text(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReplayAndReuse(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			h, acct := newHarness(t, stream)
			first := h.post(acct, "k-1", "a")
			firstBody := text(t, first)
			if first.StatusCode != http.StatusCreated || first.Header.Get(ReplayedHeader) != "" {
				t.Fatalf("first: %d %v", first.StatusCode, first.Header)
			}
			again := h.post(acct, "k-1", "a")
			if again.StatusCode != http.StatusCreated || text(t, again) != firstBody ||
				again.Header.Get("Location") != "/things/1" || again.Header.Get(ReplayedHeader) != "true" {
				t.Fatalf("replay: %d %v", again.StatusCode, again.Header)
			}
			if r := h.post(acct, "k-1", "b"); r.StatusCode != http.StatusConflict {
				t.Fatalf("another body with the key: %d %s", r.StatusCode, text(t, r))
			}
			// Without a key, or with another one, the request runs.
			h.post(acct, "", "a")
			h.post(acct, "k-2", "a")
			if n := h.runs.Load(); n != 3 {
				t.Fatalf("runs %d, want 3", n)
			}
		})
	}
}

func TestKeysAreBounded(t *testing.T) {
	t.Parallel()
	h, acct := newHarness(t, false)
	for _, key := range []string{strings.Repeat("k", MaxKeyLen+1), "with space", "naïve", "tab\there"} {
		if r := h.post(acct, key, "a"); r.StatusCode != http.StatusBadRequest {
			t.Errorf("key %q: %d", key, r.StatusCode)
		}
	}
	if r := h.post(acct, strings.Repeat("k", MaxKeyLen), "a"); r.StatusCode != http.StatusCreated {
		t.Errorf("longest key: %d", r.StatusCode)
	}
	req := httptest.NewRequest(http.MethodPost, "/things", strings.NewReader("a"))
	req.Header.Set("X-Account", acct)
	req.Header.Add(Header, "one")
	req.Header.Add(Header, "two")
	rec := httptest.NewRecorder()
	h.e.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest {
		t.Errorf("two keys: %d", rec.Code)
	}
}

// A failed request gives its key back: the retry runs.
func TestFailureReleasesTheKey(t *testing.T) {
	t.Parallel()
	h, acct := newHarness(t, false)
	h.fail.Store(true)
	if r := h.post(acct, "k", "a"); r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("failing run: %d", r.StatusCode)
	}
	h.fail.Store(false)
	if r := h.post(acct, "k", "a"); r.StatusCode != http.StatusCreated || r.Header.Get(ReplayedHeader) != "" {
		t.Fatalf("retry: %d %v", r.StatusCode, r.Header)
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("runs %d", n)
	}
}

// A handler that stores its answer in its effect's transaction (Keep) and then fails because it
// did not hear the commit's answer (MayHaveCommitted) keeps the key: the retry gets that answer.
// One that fails after its commit was acknowledged, having undone its effect, gives the key back,
// answer and all: the retry runs.
func TestAnswerKeptWithItsEffect(t *testing.T) {
	t.Parallel()
	h, acct := newHarness(t, false)
	var unsure atomic.Bool
	h.e.POST("/kept", func(c echo.Context) error {
		keep := KeepOf(c)
		if keep == nil {
			return errors.New("no Keep for a request with a key")
		}
		n := h.runs.Add(1)
		header := http.Header{"Location": {fmt.Sprintf("/things/%d", n)}}
		if err := keep(c.Request().Context(), h.pool, http.StatusCreated, header, []byte(fmt.Sprintf("thing %d", n))); err != nil {
			return err
		}
		if unsure.Load() {
			MayHaveCommitted(c)
		}
		return c.String(http.StatusServiceUnavailable, "the commit's answer was lost")
	}, h.guard.Middleware(Route{Body: func(c echo.Context) io.Reader { return c.Request().Body }, BodyError: func(err error) error { return err }}))
	post := func(key string) *http.Response {
		req := httptest.NewRequest(http.MethodPost, "/kept", strings.NewReader("a"))
		req.Header.Set("X-Account", acct)
		req.Header.Set(Header, key)
		rec := httptest.NewRecorder()
		h.e.ServeHTTP(rec, req)
		return rec.Result()
	}

	unsure.Store(true)
	if r := post("k-unsure"); r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("first: %d %s", r.StatusCode, text(t, r))
	}
	r := post("k-unsure")
	if body := text(t, r); r.StatusCode != http.StatusCreated || body != "thing 1" || r.Header.Get("Location") != "/things/1" ||
		r.Header.Get(ReplayedHeader) != "true" {
		t.Fatalf("retry: %d %q %v, want the answer kept with the effect", r.StatusCode, body, r.Header)
	}

	unsure.Store(false)
	if r := post("k-undone"); r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("first: %d %s", r.StatusCode, text(t, r))
	}
	if r := post("k-undone"); r.StatusCode != http.StatusServiceUnavailable || r.Header.Get(ReplayedHeader) != "" {
		t.Fatalf("retry: %d %v, want a run of its own", r.StatusCode, r.Header)
	}
	if n := h.runs.Load(); n != 3 {
		t.Fatalf("runs %d, want 3", n)
	}
}

// A success whose answer did not reach the client (NotDelivered) is not kept: the retry runs, and
// the retry's delivered answer is the one replayed.
func TestUndeliveredAnswerIsNotKept(t *testing.T) {
	t.Parallel()
	h, acct := newHarness(t, false)
	var lost atomic.Bool
	lost.Store(true)
	h.e.POST("/answers", func(c echo.Context) error {
		n := h.runs.Add(1)
		err := c.String(http.StatusOK, fmt.Sprintf("answer %d", n))
		if lost.Swap(false) {
			NotDelivered(c)
		}
		return err
	}, h.guard.Middleware(Route{Body: func(c echo.Context) io.Reader { return c.Request().Body }, BodyError: func(err error) error { return err }}))
	post := func() (*http.Response, string) {
		req := httptest.NewRequest(http.MethodPost, "/answers", strings.NewReader("a"))
		req.Header.Set("X-Account", acct)
		req.Header.Set(Header, "k")
		rec := httptest.NewRecorder()
		h.e.ServeHTTP(rec, req)
		r := rec.Result()
		return r, text(t, r)
	}
	post()
	if r, body := post(); body != "answer 2" || r.Header.Get(ReplayedHeader) != "" {
		t.Fatalf("retry: %q %v, want a run of its own", body, r.Header)
	}
	if r, body := post(); body != "answer 2" || r.Header.Get(ReplayedHeader) != "true" {
		t.Fatalf("second retry: %q %v, want the delivered answer replayed", body, r.Header)
	}
}

// A stream route's request has a Keep once its handler has read the whole body, and not before:
// only then is the request's hash known. That Keep works as a JSON route's: the answer it stored
// before an unsure failure is the retry's, and the retry's body is compared with the first's.
func TestStreamKeepOnceTheBodyIsRead(t *testing.T) {
	t.Parallel()
	h, acct := newHarness(t, true)
	h.e.POST("/kept", func(c echo.Context) error {
		if KeepOf(c) != nil {
			return errors.New("a Keep before the stream was read")
		}
		body, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		keep := KeepOf(c)
		if keep == nil {
			return errors.New("no Keep for a stream read to its end")
		}
		n := h.runs.Add(1)
		if err := keep(c.Request().Context(), h.pool, http.StatusCreated, http.Header{"Location": {fmt.Sprintf("/things/%d", n)}},
			[]byte(fmt.Sprintf("thing %d of %q", n, body))); err != nil {
			return err
		}
		MayHaveCommitted(c)
		return c.String(http.StatusServiceUnavailable, "the commit's answer was lost")
	}, h.guard.Middleware(Route{Stream: true, Body: func(c echo.Context) io.Reader { return c.Request().Body },
		BodyError: func(err error) error { return err }}))
	post := func(body string) *http.Response {
		req := httptest.NewRequest(http.MethodPost, "/kept", strings.NewReader(body))
		req.Header.Set("X-Account", acct)
		req.Header.Set(Header, "k-stream")
		rec := httptest.NewRecorder()
		h.e.ServeHTTP(rec, req)
		return rec.Result()
	}
	if r := post("file"); r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("first: %d %s", r.StatusCode, text(t, r))
	}
	r := post("file")
	if body := text(t, r); r.StatusCode != http.StatusCreated || body != `thing 1 of "file"` || r.Header.Get(ReplayedHeader) != "true" {
		t.Fatalf("retry: %d %q %v, want the answer kept with the effect", r.StatusCode, body, r.Header)
	}
	if r := post("another file"); r.StatusCode != http.StatusConflict {
		t.Fatalf("another body with the key: %d %s, want refused", r.StatusCode, text(t, r))
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("runs %d, want 1", n)
	}
}

// Concurrent duplicates wait for the first and replay it: one run, the same answer for all.
func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	h, acct := newHarness(t, false)
	h.hold = make(chan struct{})
	const n = 5
	bodies := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := h.post(acct, "same", "a")
			bodies[i] = fmt.Sprint(r.StatusCode, " ", text(t, r))
		}()
	}
	time.Sleep(200 * time.Millisecond) // every request has reached the key
	close(h.hold)
	wg.Wait()
	if got := h.runs.Load(); got != 1 {
		t.Fatalf("runs %d, want 1", got)
	}
	for _, b := range bodies {
		if b != bodies[0] || !strings.HasPrefix(b, "201 ") {
			t.Fatalf("answers differ: %q", bodies)
		}
	}
}

// A retry waits only so long for a request that holds its key; then it is told to come back.
func TestWaitIsBounded(t *testing.T) {
	t.Parallel()
	h, acct := newHarness(t, false)
	h.hold = make(chan struct{})
	h.guard.Wait = 100 * time.Millisecond
	first := make(chan int)
	go func() { first <- h.post(acct, "k", "a").StatusCode }()
	time.Sleep(50 * time.Millisecond)
	if r := h.post(acct, "k", "a"); r.StatusCode != http.StatusConflict || !strings.Contains(text(t, r), "still running") {
		t.Fatalf("waiting retry: %d", r.StatusCode)
	}
	close(h.hold)
	if s := <-first; s != http.StatusCreated {
		t.Fatalf("first: %d", s)
	}
}

// Keys last 24 hours: then the same key runs again, and the sweep deletes what has expired.
func TestKeysExpire(t *testing.T) {
	t.Parallel()
	h, acct := newHarness(t, false)
	h.post(acct, "old", "a")
	h.clock.Add(Lifetime - time.Second)
	h.post(acct, "young", "a")
	if r := h.post(acct, "old", "a"); r.Header.Get(ReplayedHeader) != "true" {
		t.Fatalf("within 24 h: not replayed")
	}
	h.clock.Add(time.Second)
	if r := h.post(acct, "old", "b"); r.StatusCode != http.StatusCreated || r.Header.Get(ReplayedHeader) != "" {
		t.Fatalf("after 24 h: %d %v", r.StatusCode, r.Header)
	}
	h.clock.Add(Lifetime - time.Second) // "young" has expired, the new "old" has not
	n, err := Sweep(context.Background(), h.guard.store.db, h.clock.Now())
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	if r := h.post(acct, "old", "b"); r.Header.Get(ReplayedHeader) != "true" {
		t.Fatalf("the renewed key was swept")
	}
	if got := h.runs.Load(); got != 3 {
		t.Fatalf("runs %d", got)
	}
}

// Replicas sweeping at once share the work: every expired key is deleted once.
func TestSweepShared(t *testing.T) {
	t.Parallel()
	h, acct := newHarness(t, false)
	ctx := context.Background()
	_, err := h.guard.store.db.Exec(ctx, `INSERT INTO idempotency_keys (account_id, key, owner, claimed_at, expires_at)
		SELECT $1, 'k' || i, gen_random_uuid(), $2, $2 FROM generate_series(1, 2500) i`, acct, h.clock.Now())
	pgtest.Must(t, err, "seed keys")
	var total atomic.Int64
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := Sweep(ctx, h.guard.store.db, h.clock.Now())
			if err != nil {
				t.Error(err)
			}
			total.Add(n)
		}()
	}
	wg.Wait()
	if total.Load() != 2500 {
		t.Fatalf("swept %d, want 2500", total.Load())
	}
}

// A key whose request's replica died (claimed, never completed nor released) is taken over once
// its lease has run out.
func TestAbandonedKeyIsTakenOver(t *testing.T) {
	t.Parallel()
	h, acct := newHarness(t, false)
	h.guard.Wait = 50 * time.Millisecond
	_, err := h.guard.store.db.Exec(context.Background(), `INSERT INTO idempotency_keys (account_id, key, owner, claimed_at, expires_at)
		VALUES ($1, $4, gen_random_uuid(), $2, $3)`, acct, h.clock.Now(), h.clock.Now().Add(Lifetime), lookupOf("k"))
	pgtest.Must(t, err, "seed key")
	if r := h.post(acct, "k", "a"); r.StatusCode != http.StatusConflict {
		t.Fatalf("within the lease: %d", r.StatusCode)
	}
	h.clock.Add(DefaultLease)
	if r := h.post(acct, "k", "a"); r.StatusCode != http.StatusCreated {
		t.Fatalf("after the lease: %d", r.StatusCode)
	}
}

// The table keeps neither the Idempotency-Key, the response nor the request's plain hash: a copy
// of the database cannot read a kept key creation's answer nor test guesses of a request's
// secret against its hash, and a replay still gets the answer whole.
func TestKeptResponsesAreSealed(t *testing.T) {
	t.Parallel()
	h, acct := newHarness(t, false)
	const key = "sealed-key-3f7c"
	first := text(t, h.post(acct, key, "secret-body-42"))
	var dump string
	err := h.guard.store.db.QueryRow(context.Background(),
		`SELECT string_agg(k::text, ' ') FROM idempotency_keys k WHERE account_id = $1`, acct).Scan(&dump)
	pgtest.Must(t, err, "dump")
	sum := fmt.Sprintf("%x", requestHashOf(t, h, "secret-body-42"))
	for _, plain := range []string{key, "secret-body-42", first, fmt.Sprintf("%x", first), sum} {
		if strings.Contains(dump, plain) {
			t.Fatalf("the row holds %q in the clear: %s", plain, dump)
		}
	}
	if r := h.post(acct, key, "secret-body-42"); text(t, r) != first || r.Header.Get(ReplayedHeader) != "true" {
		t.Fatalf("replay of a sealed response differs")
	}
	// A sealed body opens only with its own account and key.
	sealed := seal(acct, key, []byte(first))
	if _, err := open(acct, key+"x", sealed); err == nil {
		t.Fatal("opened with another key")
	}
	if _, err := open("another-account", key, sealed); err == nil {
		t.Fatal("opened with another account")
	}
}

// migrations/00028 converts the keys kept before sealing with the same hash as lookupOf, and their
// responses, kept in the clear, still replay until their 24 hours end.
func TestRowsKeptBeforeSealingReplay(t *testing.T) {
	t.Parallel()
	h, acct := newHarness(t, false)
	ctx := context.Background()
	var converted string
	err := h.guard.store.db.QueryRow(ctx,
		`SELECT encode(sha256(convert_to('mailvet idempotency lookup v1:' || $1, 'UTF8')), 'hex')`, "old-key").Scan(&converted)
	pgtest.Must(t, err, "convert")
	if converted != lookupOf("old-key") {
		t.Fatalf("the migration's hash %s is not lookupOf's %s", converted, lookupOf("old-key"))
	}
	sum := requestHashOf(t, h, "a")
	_, err = h.guard.store.db.Exec(ctx, `INSERT INTO idempotency_keys
		(account_id, key, owner, claimed_at, expires_at, request_hash, status, header, body, sealed)
		VALUES ($1, $2, gen_random_uuid(), $3, $4, $5, 201, '{"Location":["/things/7"]}', 'thing 7', false)`,
		acct, converted, h.clock.Now(), h.clock.Now().Add(Lifetime), sum)
	pgtest.Must(t, err, "seed an unsealed row")
	r := h.post(acct, "old-key", "a")
	if r.StatusCode != http.StatusCreated || text(t, r) != "thing 7" || r.Header.Get("Location") != "/things/7" {
		t.Fatalf("replay of an unsealed row: %d %v", r.StatusCode, r.Header)
	}
	if h.runs.Load() != 0 {
		t.Fatalf("the request ran again")
	}
}

// requestHashOf is the hash the guard computes for the harness's POST /things with body.
func requestHashOf(t *testing.T, h *harness, body string) []byte {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/things", strings.NewReader(body))
	c := h.e.NewContext(req, httptest.NewRecorder())
	hh := requestHash(c, Route{})
	_, _ = io.WriteString(hh, body)
	return hh.Sum(nil)
}

// A request whose effect committed with its answer (Keep) and that answered 2xx keeps that answer
// for its key when the store fails to keep the actual response over it: the retry replays the
// committed answer instead of running, and charging, a second time.
func TestKeptAnswerSurvivesAFailedComplete(t *testing.T) {
	t.Parallel()
	h, acct := newHarness(t, false)
	// The one statement that rewrites a stored response, complete's, fails; Keep's, which stores
	// the first, does not.
	pgtest.Exec(t, h.pool, `CREATE FUNCTION refuse_second_store() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF OLD.status IS NOT NULL THEN RAISE EXCEPTION 'store down'; END IF;
			RETURN NEW;
		END $$`)
	pgtest.Exec(t, h.pool, `CREATE TRIGGER refuse_second_store BEFORE UPDATE ON idempotency_keys
		FOR EACH ROW EXECUTE FUNCTION refuse_second_store()`)
	h.e.POST("/kept", func(c echo.Context) error {
		n := h.runs.Add(1)
		body := fmt.Sprintf("thing %d", n)
		if err := KeepOf(c)(c.Request().Context(), h.pool, http.StatusCreated, http.Header{"Location": {fmt.Sprintf("/things/%d", n)}}, []byte(body)); err != nil {
			return err
		}
		return c.String(http.StatusCreated, body)
	}, h.guard.Middleware(Route{Body: func(c echo.Context) io.Reader { return c.Request().Body }, BodyError: func(err error) error { return err }}))
	post := func() *http.Response {
		req := httptest.NewRequest(http.MethodPost, "/kept", strings.NewReader("a"))
		req.Header.Set("X-Account", acct)
		req.Header.Set(Header, "k")
		rec := httptest.NewRecorder()
		h.e.ServeHTTP(rec, req)
		return rec.Result()
	}
	if r := post(); r.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d %s", r.StatusCode, text(t, r))
	}
	r := post()
	if body := text(t, r); r.StatusCode != http.StatusCreated || body != "thing 1" || r.Header.Get(ReplayedHeader) != "true" {
		t.Fatalf("retry: %d %q %v, want the answer kept with the effect replayed", r.StatusCode, body, r.Header)
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("runs %d, want 1", n)
	}
}

// brokenWriter is a connection that went away: its status is taken, its body fails.
type brokenWriter struct{ header http.Header }

func (w *brokenWriter) Header() http.Header       { return w.header }
func (w *brokenWriter) WriteHeader(int)           {}
func (w *brokenWriter) Write([]byte) (int, error) { return 0, errors.New("connection reset by peer") }

// A handler whose effect committed with its answer (Keep) and whose 2xx could not be written (the
// client went away) leaves that answer to its key: the client's retry replays it instead of
// making, and charging, a second effect.
func TestKeptAnswerSurvivesAnUnwrittenSuccess(t *testing.T) {
	t.Parallel()
	h, acct := newHarness(t, false)
	h.e.POST("/kept", func(c echo.Context) error {
		n := h.runs.Add(1)
		body := fmt.Sprintf("thing %d", n)
		if err := KeepOf(c)(c.Request().Context(), h.pool, http.StatusCreated, http.Header{}, []byte(body)); err != nil {
			return err
		}
		return c.String(http.StatusCreated, body)
	}, h.guard.Middleware(Route{Body: func(c echo.Context) io.Reader { return c.Request().Body }, BodyError: func(err error) error { return err }}))
	post := func(w http.ResponseWriter) {
		req := httptest.NewRequest(http.MethodPost, "/kept", strings.NewReader("a"))
		req.Header.Set("X-Account", acct)
		req.Header.Set(Header, "k")
		h.e.ServeHTTP(w, req)
	}
	post(&brokenWriter{header: http.Header{}})
	rec := httptest.NewRecorder()
	post(rec)
	r := rec.Result()
	if body := text(t, r); r.StatusCode != http.StatusCreated || body != "thing 1" || r.Header.Get(ReplayedHeader) != "true" {
		t.Fatalf("retry: %d %q %v, want the answer kept with the effect replayed", r.StatusCode, body, r.Header)
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("runs %d, want 1", n)
	}
}
