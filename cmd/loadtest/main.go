// Command loadtest measures what one API replica serves on this machine, over loopback, and
// checks that every answer was metered exactly (`make load`; BENCHMARKS.md, "Grouped admissions
// (issue 16)"). It is not part of `make test`.
//
// It starts, in this process, what `api -dev -demo` runs — a fresh, migrated Postgres database,
// embedded NATS JetStream, the verification engine, in-process verifier workers and a mail world
// of internal/mailsim — and one API server per admission window compared (MAILVET_ADMISSION_WINDOW
// 0, each request its own commit, and the grouped window). Closed loops of -clients clients then
// post POST /v1/email/verify on loopback for a bounded time each:
//
//   - echo: a bare Echo handler that answers the same JSON bytes, the HTTP stack's ceiling;
//   - local: addresses the API decides itself (syntax-invalid and disposable ones);
//   - fleet: addresses the workers probe in the mail world;
//   - fleet alone: the same addresses through the NATS dispatcher without HTTP or admission.
//
// Each API phase uses a new scale-tier account whose limits are out of the way. At the end the
// usage log must hold exactly one admitted row per 200 answer, with the daily and monthly billable
// counts equal to the rows' (and every fleet row's verdict filled in); otherwise it exits 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
)

type options struct {
	clients          int
	duration, warmup time.Duration
	runs             int
	window           time.Duration
	rtt              time.Duration
	databaseURL      string
	cpuProfile       string
	keep             bool
	phases           map[string]bool // the phases to run; all when empty
}

func main() {
	var o options
	flag.IntVar(&o.clients, "clients", 50, "concurrent clients (closed loops)")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "measured time of each phase")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured time before each phase")
	flag.IntVar(&o.runs, "runs", 3, "runs of every phase; the report gives each run and the medians")
	flag.DurationVar(&o.window, "window", time.Millisecond, "the grouped admission window compared with 0 (MAILVET_ADMISSION_WINDOW)")
	flag.DurationVar(&o.rtt, "rtt", 20*time.Millisecond, "round-trip time of the mail world's DNS and SMTP replies")
	flag.StringVar(&o.databaseURL, "database-url", "", "Postgres server to use (default DATABASE_URL, else the configuration default); a fresh database is created on it")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the first run's grouped local phase to this file")
	flag.BoolVar(&o.keep, "keep", false, "keep the run's database")
	only := flag.String("phases", "", "comma-separated phases to run (echo, local0, local, fleet0, fleet, alone); default all")
	flag.Parse()
	if *only != "" {
		o.phases = map[string]bool{}
		for _, p := range strings.Split(*only, ",") {
			name, ok := phaseFlags[strings.TrimSpace(p)]
			if !ok {
				fmt.Fprintf(os.Stderr, "loadtest: unknown phase %q\n", p)
				os.Exit(2)
			}
			o.phases[name] = true
		}
	}
	if o.databaseURL == "" {
		o.databaseURL = os.Getenv("DATABASE_URL")
	}
	if o.databaseURL == "" {
		o.databaseURL = config.DefaultDatabaseURL
	}
	if o.clients < 1 || o.runs < 1 || o.duration <= 0 || o.window <= 0 {
		fmt.Fprintln(os.Stderr, "loadtest: -clients, -runs, -duration and -window must be positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

// phase names, in the order each run measures them.
const (
	phaseEcho       = "echo"
	phaseLocalOld   = "local, window 0"
	phaseLocal      = "local, grouped"
	phaseFleetOld   = "fleet, window 0"
	phaseFleet      = "fleet, grouped"
	phaseFleetAlone = "fleet alone"
)

// phaseFlags are the names -phases takes.
var phaseFlags = map[string]string{"echo": phaseEcho, "local0": phaseLocalOld, "local": phaseLocal,
	"fleet0": phaseFleetOld, "fleet": phaseFleet, "alone": phaseFleetAlone}

func (o options) wants(phase string) bool { return len(o.phases) == 0 || o.phases[phase] }

// metered is an API phase's account and the 200 answers it got.
type metered struct {
	phase   string
	account string
	ok      int
}

func run(ctx context.Context, o options) error {
	name := fmt.Sprintf("mailvet_load_%d", time.Now().UnixNano())
	dbURL := withDatabase(o.databaseURL, name)
	fmt.Printf("loadtest: database %s, %d clients, %d runs of %s (+%s warm-up) per phase, window %s, mail RTT %s\n",
		name, o.clients, o.runs, o.duration, o.warmup, o.window, o.rtt)
	if !o.keep {
		defer func() {
			if err := dropDatabase(context.Background(), o.databaseURL, name); err != nil {
				fmt.Fprintln(os.Stderr, "loadtest: drop database:", err)
			}
		}()
	}
	sys, err := start(ctx, dbURL, o.rtt, []time.Duration{0, o.window})
	if err != nil {
		return err
	}
	defer sys.close()
	echoSrv, err := startEcho(ctx, sys, o)
	if err != nil {
		return err
	}
	defer echoSrv.close()

	var (
		results  = map[string][]result{}
		tallies  = map[string][]tallySnapshot{}
		accounts []metered
	)
	// measure runs a phase and returns its 200 answers, warm-up included.
	measure := func(phase string, c call) int {
		if !o.wants(phase) {
			return 0
		}
		r, warm := drive(ctx, phase, o.clients, o.warmup, o.duration, c, sys.sql.reset)
		results[phase] = append(results[phase], r)
		tallies[phase] = append(tallies[phase], sys.sql.snapshot())
		return r.ok + warm
	}
	apiPhase := func(phase string, window time.Duration, address func(int) string, profile string) error {
		if !o.wants(phase) {
			return nil
		}
		acct, key, err := sys.customer(ctx)
		if err != nil {
			return err
		}
		p := newPoster(sys.apis[window].base, "/v1/email/verify", key, o.clients)
		defer p.close()
		if profile != "" {
			f, err := os.Create(profile)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}
		accounts = append(accounts, metered{phase: phase, account: acct, ok: measure(phase, verifyCall(p, address))})
		return nil
	}

	for i := range o.runs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		profile := ""
		if i == 0 {
			profile = o.cpuProfile
		}
		measure(phaseEcho, echoSrv.call)
		if err := apiPhase(phaseLocalOld, 0, localAddress, ""); err != nil {
			return err
		}
		if err := apiPhase(phaseLocal, o.window, localAddress, profile); err != nil {
			return err
		}
		if err := apiPhase(phaseFleetOld, 0, fleetAddress, ""); err != nil {
			return err
		}
		if err := apiPhase(phaseFleet, o.window, fleetAddress, ""); err != nil {
			return err
		}
		measure(phaseFleetAlone, func(ctx context.Context, i int) (int, error) {
			c, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if _, err := sys.fleet.VerifyOne(c, fleetAddress(i)); err != nil {
				return 0, err
			}
			return 200, nil
		})
		printRun(i+1, results, tallies)
	}

	// Let the servers finish what they write behind their answers, then check the usage log.
	sys.stopAPIs()
	printMedians(o, results, tallies)
	return checkMetering(ctx, sys, accounts)
}

func withDatabase(dbURL, name string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	u.Path = "/" + name
	return u.String()
}

// echoServer is the HTTP stack's ceiling: Echo on loopback answering the bytes the API answers
// for a locally decided address, after reading and decoding the request as the API does.
type echoServer struct {
	http *app.HTTPServer
	p    *poster
	stop context.CancelFunc
	done chan error
}

func startEcho(ctx context.Context, sys *system, o options) (*echoServer, error) {
	_, key, err := sys.customer(ctx)
	if err != nil {
		return nil, err
	}
	probe := newPoster(sys.apis[o.window].base, "/v1/email/verify", key, 1)
	defer probe.close()
	status, answer, err := probe.post(ctx, []byte(`{"email":"load@mailinator.com"}`))
	if err != nil || status != 200 {
		return nil, fmt.Errorf("probe request: %d %v", status, err)
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST("/v1/email/verify", func(c echo.Context) error {
		var req struct {
			Email *string `json:"email"`
		}
		if err := c.Bind(&req); err != nil || req.Email == nil {
			return c.NoContent(400)
		}
		return c.JSONBlob(200, answer)
	})
	hs, err := app.Listen("127.0.0.1:0", e)
	if err != nil {
		return nil, err
	}
	sctx, stop := context.WithCancel(context.Background())
	s := &echoServer{http: hs, stop: stop, done: make(chan error, 1),
		p: newPoster("http://"+hs.Addr(), "/v1/email/verify", "", o.clients)}
	go func() { s.done <- hs.Serve(sctx, time.Second, app.NewLogger(os.Stderr, "loadtest-echo")) }()
	return s, nil
}

func (s *echoServer) call(ctx context.Context, i int) (int, error) {
	status, _, err := s.p.post(ctx, fmt.Appendf(nil, `{"email":%q}`, localAddress(i)))
	return status, err
}

func (s *echoServer) close() {
	s.p.close()
	s.stop()
	<-s.done
}

var phases = []string{phaseEcho, phaseLocalOld, phaseLocal, phaseFleetOld, phaseFleet, phaseFleetAlone}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func printRun(n int, results map[string][]result, tallies map[string][]tallySnapshot) {
	fmt.Printf("\nrun %d\n", n)
	fmt.Printf("  %-16s %9s %9s %9s %8s  %-30s  %-34s %s\n", "phase", "req/s", "p50 ms", "p99 ms", "200s",
		"CPU µs/req: this process, pg, rest", "Postgres per request", "other answers")
	for _, ph := range phases {
		rs := results[ph]
		if len(rs) < n {
			continue
		}
		r, t := rs[n-1], tallies[ph][n-1]
		fmt.Printf("  %-16s %9.0f %9.2f %9.2f %8d  %-30s  %-34s %s\n", ph, r.rate(), ms(r.percentile(.5)), ms(r.percentile(.99)),
			r.ok, cpuSummary(r), sqlSummary(t, r.requests), statusSummary(r.statuses))
	}
	if len(results[phaseEcho]) >= n && len(results[phaseLocal]) >= n && len(results[phaseLocalOld]) >= n {
		echo := results[phaseEcho][n-1].rate()
		fmt.Printf("  ratios to echo: local grouped %.2f, local window 0 %.2f\n",
			results[phaseLocal][n-1].rate()/echo, results[phaseLocalOld][n-1].rate()/echo)
	}
}

// cpuSummary is a phase's CPU per request and the machine's busy share.
func cpuSummary(r result) string {
	self, pg, other, busy := r.cpu.perRequest(r.requests)
	return fmt.Sprintf("%.0f, %.0f, %.0f (%.0f%% busy)", self, pg, other, busy*100)
}

// sqlSummary says what the API's Postgres round trips were, per request of the phase.
func sqlSummary(t tallySnapshot, requests int) string {
	if requests == 0 || t.queries+t.batches == 0 {
		return "-"
	}
	s := fmt.Sprintf("%.2f stmt", float64(t.queries)/float64(requests))
	if t.batches > 0 {
		s += fmt.Sprintf(" + groups of %.1f (max %d) in %.2f ms", float64(t.batched)/float64(t.batches), t.largestBatch,
			ms(t.batchTime)/float64(t.batches))
	}
	return s
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func printMedians(o options, results map[string][]result, tallies map[string][]tallySnapshot) {
	fmt.Printf("\nmedians of %d runs (%d clients, %s each)\n\n", o.runs, o.clients, o.duration)
	fmt.Println("| phase | req/s | p50 ms | p99 ms | CPU µs per request: this process, Postgres, rest of the machine (machine busy) | Postgres per request (last run) |")
	fmt.Println("|---|---:|---:|---:|---|---|")
	for _, ph := range phases {
		if len(results[ph]) == 0 {
			continue
		}
		var rate, p50, p99, self, pg, other, busy []float64
		for _, r := range results[ph] {
			rate, p50, p99 = append(rate, r.rate()), append(p50, ms(r.percentile(.5))), append(p99, ms(r.percentile(.99)))
			s, p, x, b := r.cpu.perRequest(r.requests)
			self, pg, other, busy = append(self, s), append(pg, p), append(other, x), append(busy, b)
		}
		last := len(results[ph]) - 1
		fmt.Printf("| %s | %.0f | %.2f | %.2f | %.0f, %.0f, %.0f (%.0f%%) | %s |\n", ph, median(rate), median(p50), median(p99),
			median(self), median(pg), median(other), median(busy)*100, sqlSummary(tallies[ph][last], results[ph][last].requests))
	}
	if len(results[phaseEcho]) == 0 || len(results[phaseLocal]) == 0 || len(results[phaseLocalOld]) == 0 {
		return
	}
	ratio := func(ph string) float64 {
		var rs []float64
		for i, r := range results[ph] {
			rs = append(rs, r.rate()/results[phaseEcho][i].rate())
		}
		return median(rs)
	}
	fmt.Printf("\nratio local/echo (median of the runs' ratios): grouped %.2f, window 0 %.2f\n", ratio(phaseLocal), ratio(phaseLocalOld))
	var rate, p99 []float64
	for _, r := range results[phaseLocal] {
		rate, p99 = append(rate, r.rate()), append(p99, ms(r.percentile(.99)))
	}
	met := median(rate) >= 2500 && median(p99) <= 50
	fmt.Printf("target ≥ 2,500 locally decided verifications/s with p99 ≤ 50 ms: %s\n", map[bool]string{true: "met", false: "NOT met"}[met])
}

// checkMetering asserts that the usage log holds exactly one admitted row per 200 answer of each
// API phase (warm-ups included, so the expected count is read from the runs' answers), that the
// daily and monthly billable counts equal the rows', that every row has its verdict, and that no
// hold is left open once the servers have stopped.
func checkMetering(ctx context.Context, sys *system, accounts []metered) error {
	var problems []string
	for _, m := range accounts {
		var rows, billable, pendingVerdicts, monthly, daily, held int
		err := sys.pool.QueryRow(ctx, `
			SELECT count(*), count(*) FILTER (WHERE billable), count(*) FILTER (WHERE status IS NULL),
				(SELECT coalesce(sum(billable), 0) FROM usage_monthly WHERE account_id = $1),
				(SELECT coalesce(sum(billable), 0) FROM usage_daily WHERE account_id = $1),
				(SELECT coalesce(sum(held), 0) FROM usage_monthly WHERE account_id = $1)
			FROM usage_log WHERE account_id = $1 AND error_class IS NULL`, m.account).
			Scan(&rows, &billable, &pendingVerdicts, &monthly, &daily, &held)
		if err != nil {
			return err
		}
		want := m.ok
		fmt.Printf("metering %-16s account %s: %d answers 200, %d usage rows, %d billable (monthly %d, daily %d), %d without verdict, %d held\n",
			m.phase, m.account[:8], want, rows, billable, monthly, daily, pendingVerdicts, held)
		if rows != want || billable != monthly || billable != daily || pendingVerdicts != 0 || held != 0 {
			problems = append(problems, fmt.Sprintf("%s (account %s)", m.phase, m.account))
		}
	}
	if len(problems) > 0 {
		return errors.New("metering is not exact for: " + strings.Join(problems, "; "))
	}
	fmt.Println("metering: exact (one usage row per 200 answer, counts equal to the rows, nothing held)")
	return nil
}
