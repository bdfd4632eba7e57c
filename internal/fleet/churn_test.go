package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/fleet"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
)

// Many short sessions that end every way a session can — refused dials, a silent server, a
// refusing banner, connections dropped before the banner, a server that hangs up after a few
// rejections, a per-client connection limit, replies slower than the probe budget, callers that
// give up — from two workers at once: no mail server ever sees more than the cap from the fleet,
// and once the workers have stopped their probers, no slot is left held, counted or in the
// bucket.
func TestSlotsAreReturnedHoweverSessionsEnd(t *testing.T) {
	const maxPerHost = 2
	url := natstest.URL(t)
	w, err := mailsim.Start(mailsim.Options{RTT: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	servers := map[string]mailsim.ServerOptions{
		"plain":   {},
		"refuse":  {Refuse: true},
		"tarpit":  {Tarpit: true},
		"banner":  {Banner: &mailsim.Reply{Code: 421, Text: "4.3.2 Service not available"}},
		"drop":    {DropFirst: 5},
		"hangup":  {HardErrorLimit: 3},
		"perconn": {MaxConnsPerClient: 1},
		"slow":    {ReplyDelay: 2 * time.Second},
	}
	var srvs []*mailsim.Server
	var addrs []string
	for name, opts := range servers {
		opts.Name = "mx." + name + ".test"
		srv, err := w.AddServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		srvs = append(srvs, srv)
		dom := name + ".churn.test"
		w.AddDomain(dom, mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: opts.Name}}, Users: []string{"u0", "u1", "u2"}})
		for i := range 30 {
			addrs = append(addrs, fmt.Sprintf("u%d@%s", i, dom))
		}
	}
	a, b := join(t, url, w, maxPerHost, fleet.Options{}), join(t, url, w, maxPerHost, fleet.Options{})

	var wg sync.WaitGroup
	for i, m := range []*member{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Half the batches are given up by their callers part-way.
			budget := 20 * time.Second
			if i%2 == 1 {
				budget = 300 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			m.v.VerifyBatch(ctx, addrs, nil)
		}()
	}
	wg.Wait()
	for _, srv := range srvs {
		st := srv.Stats()
		t.Logf("%s: %d sessions, peak %d", srv.Name(), st.Sessions, st.PeakConcurrent)
		if peak := st.PeakConcurrent; peak > maxPerHost {
			t.Errorf("%s: peak %d sessions from the fleet, over the cap %d", srv.Name(), peak, maxPerHost)
		}
	}

	a.v.Close()
	b.v.Close()
	for _, m := range []*member{a, b} {
		if held, unleased := m.fl.Slots.Held(), m.fl.Slots.Unleased(); held != 0 || unleased != 0 {
			t.Errorf("after the prober closed: %d leases held, %d sessions without a lease counted", held, unleased)
		}
	}
	_, js := natstest.ConnectTo(t, url)
	kv, err := js.KeyValue(context.Background(), "fleettest_SMTP_SLOTS")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		keys, err := kv.ListKeys(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		left = left[:0]
		for k := range keys.Keys() {
			if !strings.HasSuffix(k, ".want") {
				left = append(left, k)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot keys still in the bucket after both probers closed: %v", left)
		}
	}
}
