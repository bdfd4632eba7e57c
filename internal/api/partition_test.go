package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/billing"
	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/tcpproxy"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
	"github.com/mailvet/mailvet/internal/verify"
)

// partitionBudget is how long a request may take to answer when Postgres is partitioned away.
const partitionBudget = 2 * time.Second

// holdAfterKeyLookup is a pgx tracer that black-holes the proxy the moment an armed key look-up
// has answered, so the partition strikes between authentication and the handler's own
// statements (admission, the account read), the window a real partition can hit.
type holdAfterKeyLookup struct {
	proxy *tcpproxy.Proxy
	armed atomic.Bool
}

type keyLookupKey struct{}

func (h *holdAfterKeyLookup) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "FROM api_keys") {
		return context.WithValue(ctx, keyLookupKey{}, true)
	}
	return ctx
}

func (h *holdAfterKeyLookup) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if ctx.Value(keyLookupKey{}) == true && d.Err == nil && h.armed.CompareAndSwap(true, false) {
		h.proxy.Hold()
	}
}

// partitionBundle is an API server whose pool reaches its database through a proxy; the
// bundle's own pool (fixtures, checks) reaches it directly.
type partitionBundle struct {
	*testBundle
	proxy *tcpproxy.Proxy
	trip  *holdAfterKeyLookup
	logs  *logtest.Buffer
}

func setupPartition(t *testing.T) *partitionBundle {
	t.Helper()
	pb := &partitionBundle{trip: &holdAfterKeyLookup{}, logs: &logtest.Buffer{}}
	pb.testBundle = setup(t, nil, func(d *Deps) {
		url, proxy := pgtest.Proxied(t, d.Pool.Config().ConnString())
		pb.proxy, pb.trip.proxy = proxy, proxy
		cfg, err := database.ParseConfig(url)
		mustOK(t, err)
		database.AddTracer(cfg.ConnConfig, pb.trip)
		pool, err := database.OpenConfig(context.Background(), cfg)
		mustOK(t, err)
		t.Cleanup(pool.Close)
		// Runs before the pool closes, which would otherwise wait for its held connections.
		t.Cleanup(proxy.Restore)
		engine, err := verify.New(engineConfig(t, d.Config))
		mustOK(t, err)
		t.Cleanup(engine.Close)
		d.Pool, d.Local, d.Log = pool, engine, app.NewLogger(pb.logs, "test")
		d.NATS, d.JS = natstest.Connect(t) // not used by these routes, but the server wants a broker
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", pb.logs.String())
		}
	})
	return pb
}

// unavailable sends a request while Postgres is partitioned away and checks that the answer is
// the 503 envelope with code and a Retry-After header, within partitionBudget; it returns the answer.
func (pb *partitionBundle) unavailable(t *testing.T, what, method, path, key string, body any, code string) reply {
	t.Helper()
	start := time.Now()
	r := pb.call(method, path, key, body)
	took := time.Since(start)
	t.Logf("%s: %d %v in %v", what, r.status, r.body["error"], took.Round(time.Millisecond))
	r.want(t, http.StatusServiceUnavailable, code)
	if r.header.Get("Retry-After") == "" {
		t.Errorf("%s: no Retry-After header", what)
	}
	if took > partitionBudget {
		t.Errorf("%s took %v, want at most %v", what, took, partitionBudget)
	}
	return r
}

// recover ends the partition and waits until the server answers again, with the same pool.
func (pb *partitionBundle) recover(t *testing.T, mgmtKey string) {
	t.Helper()
	pb.proxy.Restore()
	start := time.Now()
	for {
		if r := pb.call(http.MethodGet, "/v1/management/account", mgmtKey, nil); r.status == http.StatusOK {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("the API did not recover within 10 s of the partition's end")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("API answered again %v after the partition ended", time.Since(start).Round(time.Millisecond))
}

// A black-holed Postgres (sockets open, nothing forwarded) must not hang requests: key look-up,
// admission and the management reads each answer 503 with Retry-After within two seconds, the
// API recovers by itself when the partition ends, and nothing is charged for the failures.
func TestPostgresPartitionAnswers503InTime(t *testing.T) {
	t.Parallel()
	pb := setupPartition(t)
	a, mgmt := pb.account(plan.Free, "")
	std := pb.standardKey(a.ID).Raw
	junk := map[string]string{"email": "junk"} // decided by the local layers: key look-up and admission only
	// A paid account without a spend cap: a batch's failed admission adds nothing to the 503's
	// path (a hold it may have made expires).
	paid, _ := pb.account(plan.Builder, "cus_partition")
	paidKey := pb.standardKey(paid.ID).Raw
	junkBatch := map[string]any{"emails": []string{"junk", "also junk"}}

	pb.call(http.MethodPost, "/v1/email/verify", std, junk).want(t, http.StatusOK, "")
	pb.call(http.MethodGet, "/v1/management/account", mgmt, nil).want(t, http.StatusOK, "")
	pb.call(http.MethodGet, "/v1/management/usage", mgmt, nil).want(t, http.StatusOK, "")

	// The partition starts before the requests: the key look-up is what times out.
	pb.proxy.Hold()
	pb.unavailable(t, "verify, partition before", http.MethodPost, "/v1/email/verify", std, junk, CodeServiceUnavailable)
	pb.unavailable(t, "account, partition before", http.MethodGet, "/v1/management/account", mgmt, nil, CodeServiceUnavailable)
	pb.unavailable(t, "usage, partition before", http.MethodGet, "/v1/management/usage", mgmt, nil, CodeServiceUnavailable)
	pb.recover(t, mgmt)

	// The partition starts right after the key look-up: admission and the handlers' statements
	// time out. A refused verify request is logged behind the response, not before it.
	during := []struct {
		what, method, path, key string
		body                    any
		code                    string
	}{
		{"verify, partition after look-up", http.MethodPost, "/v1/email/verify", std, junk, CodeQuotaCheckFailed},
		{"paid batch, partition after look-up", http.MethodPost, "/v1/email/verify/batch", paidKey, junkBatch, CodeServiceUnavailable},
		{"account, partition after look-up", http.MethodGet, "/v1/management/account", mgmt, nil, CodeServiceUnavailable},
		{"usage, partition after look-up", http.MethodGet, "/v1/management/usage", mgmt, nil, CodeServiceUnavailable},
	}
	for _, c := range during {
		pb.trip.armed.Store(true)
		pb.unavailable(t, c.what, c.method, c.path, c.key, c.body, c.code)
		if pb.trip.armed.Load() {
			t.Fatalf("%s: the partition was not started by the key look-up", c.what)
		}
		pb.recover(t, mgmt)
	}

	// A list upload: its short statements (taking a connection, the list row, the admission)
	// have the default deadline, not the import's long one.
	pb.trip.armed.Store(true)
	start := time.Now()
	r := pb.call(http.MethodPost, "/v1/email/lists", std, "ann@acme.test\nbob@acme.test\n", "Content-Type", "text/plain")
	if took := time.Since(start); r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || took > partitionBudget {
		t.Errorf("list upload, partition after look-up: %d in %v, want 503 with Retry-After within %v: %s", r.status, took, partitionBudget, r.raw)
	}
	pb.recover(t, mgmt)

	pb.call(http.MethodPost, "/v1/email/verify", std, junk).want(t, http.StatusOK, "")
	pb.call(http.MethodGet, "/v1/management/usage", mgmt, nil).want(t, http.StatusOK, "")

	// Two verifications went through: they, and only they, were charged.
	usagetest.Settle(t, pb.pool)
	count := func(sql string) int {
		var n int
		mustOK(t, pb.pool.QueryRow(context.Background(), sql, a.ID).Scan(&n))
		return n
	}
	used := usagetest.Of(t, pb.pool, a.ID)
	if n := used.Quota; n != 2 {
		t.Errorf("%d quota units charged, want 2 (the requests that succeeded)", n)
	}
	if n := count(`SELECT count(*) FROM lists WHERE account_id = $1`); n != 0 {
		t.Errorf("%d lists stored by the refused upload", n)
	}
	if n := usagetest.Count(usagetest.Rows(t, pb.pool, a.ID), usagetest.Delivered); n != 2 {
		t.Errorf("%d verification rows, want 2", n)
	}
	if n := used.Daily + used.Billable; n != 0 {
		t.Errorf("%d billable counts, want 0", n)
	}
}

// A fresh replica's first request, sent while Postgres is black-holed right after its key
// look-up, answers 503 within the budget: a single verification and a paid batch, whose failed
// admissions leave nothing to take back on the 503's path (a hold they may have made expires). The
// 503 says nothing of the rate window it could not read (RateLimit-Remaining left out, not 0).
func TestFirstRequestDuringPartitionAnswersInTime(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		what, path string
		tier       plan.Tier
		body       any
		code       string
	}{
		{"free verify", "/v1/email/verify", plan.Free, map[string]string{"email": "junk"}, CodeQuotaCheckFailed},
		{"paid batch", "/v1/email/verify/batch", plan.Builder, map[string]any{"emails": []string{"junk", "also junk"}}, CodeServiceUnavailable},
	} {
		t.Run(c.what, func(t *testing.T) {
			t.Parallel()
			pb := setupPartition(t)
			a, mgmt := pb.account(c.tier, "cus_first_"+strings.ReplaceAll(c.what, " ", "_"))
			pb.trip.armed.Store(true)
			r := pb.unavailable(t, c.what+", partition after look-up", http.MethodPost, c.path, pb.standardKey(a.ID).Raw, c.body, c.code)
			pb.recover(t, mgmt)
			if pb.trip.armed.Load() {
				t.Fatal("the partition was not started by the key look-up")
			}
			if got, ok := r.header["Ratelimit-Remaining"]; ok || r.header.Get("RateLimit-Limit") == "" || r.header.Get("RateLimit-Reset") == "" {
				t.Errorf("RateLimit headers %v: want Limit and Reset, and no Remaining (%q) for a window never read", r.header, got)
			}
		})
	}
}

// A datastore error is a 503 with Retry-After when Postgres did not answer, and stays the 500
// datastore_error when it refused the statement.
func TestUnreachableDatastoreIs503(t *testing.T) {
	t.Parallel()
	e := toEnvelope(datastoreError(fmt.Errorf("read account: %w", context.DeadlineExceeded)))
	if e == nil || e.Status != http.StatusServiceUnavailable || e.Code != CodeServiceUnavailable || e.Header.Get("Retry-After") == "" {
		t.Errorf("a datastore timeout: %+v", e)
	}
	e = toEnvelope(datastoreError(&pgconn.PgError{Code: "42P01", Message: "relation does not exist"}))
	if e == nil || e.Status != http.StatusInternalServerError || e.Code != CodeDatastore {
		t.Errorf("a refused statement: %+v", e)
	}
	// Only datastore errors: a billing provider that times out keeps its own mapping.
	e = toEnvelope(fmt.Errorf("%w: %w", billing.ErrProviderUnreachable, context.DeadlineExceeded))
	if e == nil || e.Message != "The billing provider is unreachable." {
		t.Errorf("a billing timeout: %+v", e)
	}
}
