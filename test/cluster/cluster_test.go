// Package cluster_test is the cluster fault test (docs/reliability.md, "Cluster fault test"): the
// real binaries as separate processes on loopback — a 3-node NATS JetStream cluster with every
// stream at 3 replicas, API replicas, verifier and webhook workers — under a bounded mixed load
// (single, batch, stream, async with callback, bulk list), while processes are killed with
// SIGKILL and then restarted one tier at a time with SIGTERM. Afterwards every result is traced:
// each one that reached the client, or the customer's webhook, must be billed exactly once, and
// nothing else may be billed.
//
// `make test` runs the short form (fewer processes, a smaller load, a NATS node and a verifier
// killed). `make cluster-test` runs the long form (MAILVET_CLUSTER_TEST=long): a verifier, a
// webhook worker, an API replica and the NATS node that leads the streams are killed, then every
// process is restarted in turn under load.
package cluster_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/cluster"
)

// profile sizes one form of the test. Every loop of the load is bounded by its count.
type profile struct {
	name                      string
	apis, verifiers, webhooks int
	syncWorkers, syncEach     int
	batchWorkers, batchEach   int
	batchSize                 int
	streamWorkers, streamEach int
	streamSize                int
	asyncWorkers, asyncEach   int
	listRows, listDups        int
	pause                     time.Duration // between two requests of one load worker
	kills                     []string      // in order: verifier, webhook, api, nats
	killEvery, downFor        time.Duration
	rolling                   bool
	settle                    time.Duration // longest wait for async jobs, callbacks and lists afterwards
	maxEmails                 int
}

var (
	short = profile{
		name: "short", apis: 2, verifiers: 2, webhooks: 1,
		syncWorkers: 2, syncEach: 400, batchWorkers: 1, batchEach: 80, batchSize: 20,
		streamWorkers: 1, streamEach: 40, streamSize: 40, asyncWorkers: 1, asyncEach: 300,
		listRows: 400, listDups: 10, pause: 40 * time.Millisecond,
		kills: []string{"verifier", "nats"}, killEvery: 3 * time.Second, downFor: 3 * time.Second,
		settle: 75 * time.Second, maxEmails: 20000,
	}
	long = profile{
		name: "long", apis: 2, verifiers: 3, webhooks: 2,
		syncWorkers: 3, syncEach: 6000, batchWorkers: 2, batchEach: 1500, batchSize: 20,
		streamWorkers: 2, streamEach: 600, streamSize: 60, asyncWorkers: 2, asyncEach: 5000,
		listRows: 2000, listDups: 20, pause: 40 * time.Millisecond,
		kills: []string{"verifier", "webhook", "api", "nats"}, killEvery: 4 * time.Second, downFor: 5 * time.Second,
		rolling: true, settle: 150 * time.Second, maxEmails: 250000,
	}
)

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("the cluster fault test runs the whole fleet as separate processes; skipped with -short")
	}
	p := short
	if os.Getenv("MAILVET_CLUSTER_TEST") == "long" {
		p = long
	}
	began := time.Now()
	s := startSystem(t, p)
	ctx := context.Background()
	l := newLoad(s, p.maxEmails)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	loadCtx, cancelLoad := context.WithCancel(ctx)
	defer cancelLoad()
	var lists []*request
	listDone := make(chan struct{})
	go func() {
		defer close(listDone)
		lists = append(lists, l.uploadList(loadCtx, p.listRows, p.listDups))
	}()
	for range p.syncWorkers {
		worker(stop, &wg, p.syncEach, p.pause, func() { l.sync(loadCtx) })
	}
	for range p.batchWorkers {
		worker(stop, &wg, p.batchEach, p.pause, func() { l.batch(loadCtx, p.batchSize) })
	}
	for range p.streamWorkers {
		worker(stop, &wg, p.streamEach, p.pause, func() { l.stream(loadCtx, p.streamSize) })
	}
	for range p.asyncWorkers {
		worker(stop, &wg, p.asyncEach, p.pause, func() { l.async(loadCtx) })
	}

	var (
		eventsMu sync.Mutex // logf is called from the restart goroutines of kill9 too
		events   []string
	)
	logf := func(format string, args ...any) {
		msg := fmt.Sprintf("%6.1fs  ", time.Since(began).Seconds()) + fmt.Sprintf(format, args...)
		eventsMu.Lock()
		events = append(events, msg)
		eventsMu.Unlock()
		t.Log(msg)
	}
	faultsAt := time.Now()
	logf("load started")
	s.kill9(ctx, p, l, logf)
	s.waitAllReady(ctx, logf)
	logf("kill phase over after %s", time.Since(faultsAt).Round(time.Millisecond))
	if p.rolling {
		l.phase.Store("rolling")
		s.rollingRestart(ctx, logf)
	}
	close(stop)
	wg.Wait()
	<-listDone
	logf("load stopped: %d requests", len(l.requests()))

	var lids []string
	for _, r := range lists {
		if r.jobID != "" {
			lids = append(lids, r.jobID)
		}
	}
	if err := s.settle(ctx, lids, p.settle); err != nil {
		t.Error(err)
	}
	logf("settled")
	reqs := l.requests()
	table, fails := s.verdict(ctx, reqs, l.killTimes())
	var out strings.Builder
	fmt.Fprintf(&out, "cluster fault test (%s form), %s in all:\n", p.name, time.Since(began).Round(time.Second))
	printTable(&out, table)
	var atKill []string
	for _, r := range reqs {
		if r.atKill {
			atKill = append(atKill, fmt.Sprintf("%s of %d: %s, %d delivered, %d billed without an answer",
				r.path, len(r.emails), r.outcome, len(r.got), r.overbilled))
		}
	}
	// Why requests were refused: the 503 messages, with the count of each (numbers blanked, so
	// that "3 of 20 addresses" and "5 of 20 addresses" count as one).
	reasons := map[string]int{}
	for _, r := range reqs {
		if r.outcome == unavailable {
			reasons[r.path+": "+digits.ReplaceAllString(r.detail, "N")]++
		}
	}
	if len(reasons) > 0 {
		out.WriteString("503s by message:\n")
		for _, k := range slices.Sorted(maps.Keys(reasons)) {
			fmt.Fprintf(&out, "  %4d  %s\n", reasons[k], k)
		}
	}
	if len(atKill) > 0 {
		out.WriteString("in flight at the killed API replica:\n  " + strings.Join(atKill, "\n  ") + "\n")
	}
	for _, p := range paths {
		if n := table[p].unbilledAtKill; n > 0 {
			fmt.Fprintf(&out, "%s: %d results delivered within a second of their API replica's kill -9 and not billed (their confirmations died with it; in the customer's favour)\n", p, n)
		}
		if n := table[p].resentAfterKill; n > 0 {
			fmt.Fprintf(&out, "%s: %d callbacks sent again after the webhook worker was killed during an attempt (logged interrupted; receivers deduplicate on job_id)\n", p, n)
		}
	}
	out.WriteString("events:\n  " + strings.Join(events, "\n  ") + "\n")
	t.Log("\n" + out.String())
	for _, f := range sortedFailures(fails) {
		t.Error(f)
	}
}

var digits = regexp.MustCompile(`[0-9]+`)

// kill9 kills, in the profile's order, one process of each named tier with SIGKILL, and restarts
// it after p.downFor, as an orchestrator would. An API replica leaves the load balancer's
// rotation once it is dead (its health check fails) and comes back once ready.
func (s *system) kill9(ctx context.Context, p profile, l *load, logf func(string, ...any)) {
	var wg sync.WaitGroup
	for _, tier := range p.kills {
		time.Sleep(p.killEvery)
		var victim *cluster.Proc
		api := -1
		switch tier {
		case "verifier":
			victim = s.verifiers[0]
		case "webhook":
			victim = s.webhooks[0]
		case "api":
			api, victim = 0, s.apis[0]
			// Kill it with a batch or a stream in flight, whose results are the most to lose.
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end) && !l.busy(api, pathBatch, pathStream); {
				time.Sleep(5 * time.Millisecond)
			}
		case "nats":
			node, leaders, err := s.nats.StreamsLeader(ctx, queue.StreamVerify, queue.StreamJobs, queue.StreamWebhooks, queue.StreamLists)
			if err != nil {
				s.t.Errorf("find the streams' leader: %v", err)
				continue
			}
			logf("stream leaders: %v", leaders)
			victim = node.Proc
		}
		// The requests in flight are marked before the kill: once the process is gone they end at
		// once. One that completes in between is marked too, and is simply answered.
		inFlight := 0
		if api >= 0 {
			inFlight = l.killed(api)
		}
		if err := victim.Kill(); err != nil {
			s.t.Error(err)
			continue
		}
		if api >= 0 {
			logf("kill -9 %s (pid %d) with %d requests in flight", victim.Name, victim.Pid(), inFlight)
			s.rotate(api, false)
		} else {
			logf("kill -9 %s (pid %d)", victim.Name, victim.Pid())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(p.downFor)
			if err := victim.Start(); err != nil {
				s.t.Error(err)
				return
			}
			rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			if err := victim.WaitReady(rctx); err != nil {
				s.t.Error(err)
				return
			}
			if api >= 0 {
				s.rotate(api, true)
			}
			logf("%s restarted and ready", victim.Name)
		}()
	}
	wg.Wait()
}

// waitAllReady waits until every process answers its readiness check.
func (s *system) waitAllReady(ctx context.Context, logf func(string, ...any)) {
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for _, p := range s.sup.Procs() {
		if err := p.WaitReady(rctx); err != nil {
			s.t.Error(err)
		}
	}
	logf("every process ready")
}

// rollingRestart restarts every process, one at a time, as a rolling deploy does: SIGTERM, wait
// for the exit, start again, wait for /readyz (NATS: /healthz), then the next. An API replica
// leaves the rotation before its SIGTERM, as a load balancer drains it.
func (s *system) rollingRestart(ctx context.Context, logf func(string, ...any)) {
	var order []*cluster.Proc
	order = append(order, s.verifiers...)
	order = append(order, s.webhooks...)
	order = append(order, s.apis...)
	for _, n := range s.nats.Nodes {
		order = append(order, n.Proc)
	}
	for _, p := range order {
		api := -1
		for i, a := range s.apis {
			if a == p {
				api = i
			}
		}
		if api >= 0 {
			s.rotate(api, false)
			time.Sleep(200 * time.Millisecond) // requests already sent to it are in flight: it must finish them
		}
		began := time.Now()
		err := p.Stop(20 * time.Second)
		if err != nil && strings.HasPrefix(p.Name, "nats-") && !p.Running() && !strings.Contains(err.Error(), "killed") {
			err = nil // nats-server's exit status after SIGTERM is not ours to judge
		}
		if err != nil {
			s.t.Errorf("rolling restart: %v", err)
		}
		stopped := time.Since(began)
		if err := p.Start(); err != nil {
			s.t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		if err := p.WaitReady(rctx); err != nil {
			s.t.Error(err)
		}
		cancel()
		if api >= 0 {
			s.rotate(api, true)
		}
		logf("rolling restart of %s: stopped in %s, ready again after %s", p.Name,
			stopped.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	}
}
