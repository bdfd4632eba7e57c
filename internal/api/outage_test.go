package api

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/health"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/tcpproxy"
	"github.com/mailvet/mailvet/internal/testkit/wait"
)

// Outage tests of docs/reliability.md ("Outages fail fast", "Everything heals by itself", and
// "Recovery times"): the API under test reaches NATS and Postgres each through a TCP proxy of its
// own. Cutting a proxy is a dependency that died (connections dropped, new ones refused);
// restoring it is the dependency coming back. Nothing is restarted in between: the same server,
// pool and NATS connection must notice the outage, answer 503 quickly, and heal by themselves.

// outageBudget is how long a request may take to answer 503 while a dependency is cut.
const outageBudget = time.Second

// recoveryBound is a generous upper bound on the time from a dependency's return to the first
// success; the measured times (BenchmarkOutageRecovery) are far below it.
const recoveryBound = 10 * time.Second

// outageBundle is a verify bundle (real Postgres, NATS, mail world and verifier worker) plus a
// second API server, the one under test, whose NATS connection and Postgres pool go through
// proxies. The bundle's own server and pool reach both directly, for fixtures and checks.
type outageBundle struct {
	*verifyBundle
	api        *Server
	natsCut    *tcpproxy.Proxy
	pgCut      *tcpproxy.Proxy
	key, mgmt  string // a standard and a provisioning key of one Scale account
	acct       string
	listID     string // a list uploaded before any cut, for GET
	uploadText string
}

func setupOutage(t testing.TB) *outageBundle {
	t.Helper()
	b := setupVerify(t, verifyOpts{env: map[string]string{"MAILVET_PLAN_SCALE_RATE_LIMIT_PER_MIN": "1000000"}})
	ob := &outageBundle{verifyBundle: b, uploadText: "ann@acme.test\nbob@acme.test\n"}

	natsCut, nc, js := natstest.Proxied(t, b.natsURL, "api-outage")
	ob.natsCut = natsCut

	url, pgCut := pgtest.Proxied(t, b.pool.Config().ConnString())
	ob.pgCut = pgCut
	cfg, err := database.ParseConfig(url)
	mustOK(t, err)
	pool, err := database.OpenConfig(context.Background(), cfg)
	mustOK(t, err)
	t.Cleanup(pool.Close)
	t.Cleanup(pgCut.Restore) // before the pool closes

	ob.api = New(Deps{Config: b.cfg, Log: app.NewLogger(testLogOut(t), "api-outage"), Pool: pool, NATS: nc, JS: js,
		Ready: health.NewChecker(0), Local: b.engine})
	t.Cleanup(ob.api.Close)
	wait.For(t, 15*time.Second, "the API under test to see the verifier worker", func() bool { return ob.api.dispatch.WorkersAlive(context.Background()) })

	a, mgmt := b.account(plan.Scale, "")
	ob.acct, ob.mgmt, ob.key = a.ID, mgmt, b.standardKey(a.ID).Raw
	r := ob.do(routeListUpload)
	if r.status != http.StatusAccepted {
		t.Fatalf("list upload: %d %s", r.status, r.raw)
	}
	ob.listID = r.body["id"].(string)
	return ob
}

// outageRoute is one kind of route, the request that exercises it, and what it answers when it
// works.
type outageRoute struct {
	name   string
	method string
	path   string
	body   any
	ok     int
	// needsNATS: the route refuses to work without the broker. Every route needs Postgres (the
	// key look-up at least).
	needsNATS bool
}

var (
	routeSync       = outageRoute{"sync verify (fleet)", http.MethodPost, "/v1/email/verify", map[string]any{"email": "ann@acme.test"}, 200, true}
	routeBatch      = outageRoute{"batch", http.MethodPost, "/v1/email/verify/batch", map[string]any{"emails": []string{"ann@acme.test", "junk"}}, 200, true}
	routeStream     = outageRoute{"stream", http.MethodPost, "/v1/email/verify/stream", map[string]any{"emails": []string{"bob@acme.test"}}, 200, true}
	routeAsync      = outageRoute{"async", http.MethodPost, "/v1/email/verify", map[string]any{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/x"}, 202, true}
	routeListUpload = outageRoute{"bulk list upload", http.MethodPost, "/v1/email/lists", nil, 202, true}
	routeListGet    = outageRoute{"GET list", http.MethodGet, "/v1/email/lists/{id}", nil, 200, false}
	routeLocal      = outageRoute{"local verify (Postgres only)", http.MethodPost, "/v1/email/verify", map[string]any{"email": "junk"}, 200, false}
	routeMgmt       = outageRoute{"management", http.MethodGet, "/v1/management/account", nil, 200, false}

	outageRoutes = []outageRoute{routeSync, routeBatch, routeStream, routeAsync, routeListUpload, routeListGet, routeLocal, routeMgmt}
)

// do sends route's request to the server under test.
func (ob *outageBundle) do(rt outageRoute) reply {
	ob.t.Helper()
	key := ob.key
	if strings.HasPrefix(rt.path, "/v1/management/") {
		key = ob.mgmt
	}
	path := strings.Replace(rt.path, "{id}", ob.listID, 1)
	if rt == routeListUpload {
		return callHandler(ob.t, ob.api.Handler(), rt.method, path, key, ob.uploadText, "Content-Type", "text/plain")
	}
	return callHandler(ob.t, ob.api.Handler(), rt.method, path, key, rt.body)
}

// refused checks that rt answers, within outageBudget, a 503 in the error envelope with
// Retry-After. A verify request refused by admission because the quota could not be read says
// quota_check_failed; everything else says service_unavailable.
func (ob *outageBundle) refused(t *testing.T, what string, rt outageRoute) {
	t.Helper()
	start := time.Now()
	r := ob.do(rt)
	took := time.Since(start)
	if r.status != http.StatusServiceUnavailable {
		t.Errorf("%s, %s: %d %s, want 503", what, rt.name, r.status, r.raw)
		return
	}
	code, _ := r.body["error"].(string)
	if code != CodeServiceUnavailable && code != CodeQuotaCheckFailed {
		t.Errorf("%s, %s: error %q", what, rt.name, code)
	}
	assertEnvelope(t, r.body, code)
	if r.header.Get("Retry-After") == "" {
		t.Errorf("%s, %s: no Retry-After", what, rt.name)
	}
	if took > outageBudget {
		t.Errorf("%s, %s: 503 after %v, want within %v", what, rt.name, took, outageBudget)
	}
}

// recovery restores p and returns the time from then to the first success of rt; it gives up
// (returning false) after recoveryBound. Requests are sent back to back, 5 ms apart.
func (ob *outageBundle) recovery(p *tcpproxy.Proxy, rt outageRoute) (time.Duration, bool) {
	ob.t.Helper()
	p.Restore()
	start := time.Now()
	for {
		if r := ob.do(rt); r.status == rt.ok {
			return time.Since(start), true
		}
		if time.Since(start) > recoveryBound {
			return time.Since(start), false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cutNATS cuts the API's NATS link and waits until the server under test has noticed.
func (ob *outageBundle) cutNATS(t testing.TB) {
	t.Helper()
	ob.natsCut.Cut()
	wait.For(t, 15*time.Second, "the API to see NATS down", func() bool { return !ob.api.dispatch.Up() })
}

// With NATS cut, every route that needs the fleet answers 503 within a second; the routes that
// need only Postgres keep working; and each fleet route works again, without restarting
// anything, once NATS is back.
func TestOutageNATSCut(t *testing.T) {
	t.Parallel()
	ob := setupOutage(t)
	for _, rt := range outageRoutes {
		if !rt.needsNATS {
			continue
		}
		ob.cutNATS(t)
		for _, other := range outageRoutes {
			if other.needsNATS {
				ob.refused(t, "NATS cut", other)
			} else if r := ob.do(other); r.status != other.ok {
				t.Errorf("NATS cut, %s (needs only Postgres): %d %s, want %d", other.name, r.status, r.raw, other.ok)
			}
		}
		took, ok := ob.recovery(ob.natsCut, rt)
		if !ok {
			t.Fatalf("%s: no success within %v of NATS returning", rt.name, recoveryBound)
		}
		t.Logf("NATS back: %s answered %d after %v", rt.name, rt.ok, took.Round(time.Millisecond))
	}
	if n := ob.count(`SELECT count(*) FROM jobs WHERE account_id = $1`, ob.acct); n != 1 {
		t.Errorf("%d jobs stored, want 1 (the async request after the outage)", n)
	}
}

// With Postgres cut, every route answers 503 within a second, and each works again, without
// restarting anything, once Postgres is back.
func TestOutagePostgresCut(t *testing.T) {
	t.Parallel()
	ob := setupOutage(t)
	for _, rt := range outageRoutes {
		ob.pgCut.Cut()
		for _, other := range outageRoutes {
			ob.refused(t, "Postgres cut", other)
		}
		took, ok := ob.recovery(ob.pgCut, rt)
		if !ok {
			t.Fatalf("%s: no success within %v of Postgres returning", rt.name, recoveryBound)
		}
		t.Logf("Postgres back: %s answered %d after %v", rt.name, rt.ok, took.Round(time.Millisecond))
	}
}

// BenchmarkOutageRecovery measures, for each dependency and each kind of route that needs it, the
// time from the dependency's return (the proxy accepting again) to the route's first success.
// Each iteration is one outage: cut, wait until the route answers 503, restore, measure. It
// reports the median and the largest time; BENCHMARKS.md ("Outage recovery (issue 16)") has the
// command and the numbers. A run is bounded: each recovery gives up after recoveryBound.
func BenchmarkOutageRecovery(b *testing.B) {
	for _, dep := range []string{"nats", "postgres"} {
		for _, rt := range outageRoutes {
			if dep == "nats" && !rt.needsNATS {
				continue
			}
			b.Run(dep+"/"+strings.NewReplacer(" ", "_", "(", "", ")", "").Replace(rt.name), func(b *testing.B) {
				ob := setupOutage(b)
				proxy := ob.pgCut
				if dep == "nats" {
					proxy = ob.natsCut
				}
				var times []time.Duration
				b.ResetTimer()
				for range b.N {
					b.StopTimer()
					proxy.Cut()
					wait.For(b, 15*time.Second, "the route to fail", func() bool { return ob.do(rt).status == http.StatusServiceUnavailable })
					b.StartTimer()
					took, ok := ob.recovery(proxy, rt)
					if !ok {
						b.Fatalf("no success within %v", recoveryBound)
					}
					times = append(times, took)
				}
				b.StopTimer()
				sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
				b.ReportMetric(millis(times[len(times)/2]), "median-ms")
				b.ReportMetric(millis(slices.Max(times)), "max-ms")
			})
		}
	}
}
