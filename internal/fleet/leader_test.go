package fleet_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/fleet"
	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/wait"
	"github.com/mailvet/mailvet/internal/verify"
)

// natsCluster starts three embedded JetStream servers routed to each other, shut down when t
// ends, and returns them with the client URL list of all three.
func natsCluster(t *testing.T) ([]*server.Server, string) {
	t.Helper()
	ports := make([]int, 3)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	var servers []*server.Server
	var urls []string
	for i := range ports {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
			JetStream: true, StoreDir: t.TempDir(), JetStreamMaxMemory: 64 << 20,
			Cluster: server.ClusterOpts{Name: "fleettest", Host: "127.0.0.1", Port: ports[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		t.Cleanup(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
		servers = append(servers, s)
	}
	for _, s := range servers {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("a NATS node did not become ready")
		}
		urls = append(urls, s.ClientURL())
	}
	wait.For(t, 20*time.Second, "the JetStream cluster to elect its meta leader", func() bool {
		for _, s := range servers {
			if s.JetStreamIsLeader() {
				return true
			}
		}
		return false
	})
	return servers, strings.Join(urls, ",")
}

// The leader of the slots bucket's stream (R3) goes away while two workers verify at one mail
// server, as in a NATS node's restart: while the others elect a new one, the workers cannot take
// leases and fall back to their local shares (docs/fleet.md, "When NATS cannot be reached"). Every
// answer stays right, the server sees at most the documented bound — the cap, plus the leased
// sessions a worker had open beyond its share while they last — and once the new leader answers,
// new sessions take leases again.
func TestSlotsBucketLeaderChange(t *testing.T) {
	const maxPerHost = 6
	servers, urls := natsCluster(t)
	w, srv, sets := capWorld(t)
	layout := queue.Layout{Prefix: "leader", Replicas: 3}
	var members []*member
	for range 2 {
		m := alone(t, w, maxPerHost)
		nc, err := queue.Connect(urls, "fleet-test", queue.Auth{}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		fl, err := fleet.New(ctx, js, layout, fleet.Options{Log: quiet})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		m.v.Join(verify.Fleet{Slots: fl.Slots, MX: fl.MX, CatchAll: fl.CatchAll})
		m.nc, m.fl = nc, fl
		t.Cleanup(func() { m.v.Close(); fl.Close(); nc.Close() })
		members = append(members, m)
	}
	meet(t, maxPerHost, members...)
	js, err := jetstream.New(members[0].nc)
	if err != nil {
		t.Fatal(err)
	}
	leaderOf := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, "KV_"+layout.Name(queue.BucketSMTPSlots))
		if err != nil || st.CachedInfo().Cluster == nil {
			return ""
		}
		return st.CachedInfo().Cluster.Leader
	}
	leader := leaderOf()
	if leader == "" {
		t.Fatal("the slots bucket's stream has no leader")
	}
	srv.ResetStats()

	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			verifyAll(t, m.v, slices.Concat(sets[i], sets[2]))
		}()
	}
	wait.For(t, 5*time.Second, "both workers to hold leases", func() bool {
		return members[0].fl.Slots.Held() > 0 && members[1].fl.Slots.Held() > 0
	})
	var unleased int // the most sessions the two had open without a lease at once
	for _, s := range servers {
		if s.Name() == leader {
			s.Shutdown()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for loop := true; loop; {
		select {
		case <-done:
			loop = false
		case <-time.After(20 * time.Millisecond):
			unleased = max(unleased, members[0].fl.Slots.Unleased()+members[1].fl.Slots.Unleased())
		}
	}
	st := srv.Stats()
	t.Logf("leader %s shut down: peak %d sessions (cap %d), at most %d without a lease, new leader %q", leader, st.PeakConcurrent, maxPerHost, unleased, leaderOf())
	if bound := int64(maxPerHost + maxPerHost/2); st.PeakConcurrent > bound {
		t.Errorf("peak %d sessions through the leader change, over the documented bound %d", st.PeakConcurrent, bound)
	}
}
