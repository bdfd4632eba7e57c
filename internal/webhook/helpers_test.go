package webhook

import (
	"context"
	"crypto/tls"
	"github.com/mailvet/mailvet/internal/sealed"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/miekg/dns"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/queue"
	"github.com/mailvet/mailvet/internal/testkit/dnstest"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/tlstest"
)

// testHost is the receivers' name; the test DNS server resolves it (and everything else) to
// 127.0.0.1 unless a test says otherwise.
const testHost = "hooks.test"

var (
	caOnce sync.Once
	ca     tlstest.CA
)

// getCA returns the run's CA, made once.
func getCA(t testing.TB) tlstest.CA {
	t.Helper()
	caOnce.Do(func() { ca = tlstest.New(t, testHost) })
	return ca
}

// hit is one request a receiver got.
type hit struct {
	at     time.Time
	header http.Header
	body   []byte
}

// receiver is a real HTTPS server on loopback; script decides the answer to the nth request
// (1-based) and may block.
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	hits   []hit
	count  atomic.Int64
	script func(n int, w http.ResponseWriter, r *http.Request)
}

func newReceiver(t testing.TB, script func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	return newReceiverProto(t, false, script)
}

// newReceiverProto is newReceiver, speaking HTTP/2 when h2 is set (HTTP/1.1 otherwise).
func newReceiverProto(t testing.TB, h2 bool, script func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rc := &receiver{script: script}
	rc.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := int(rc.count.Add(1))
		rc.mu.Lock()
		rc.hits = append(rc.hits, hit{at: time.Now(), header: r.Header.Clone(), body: body})
		rc.mu.Unlock()
		if rc.script != nil {
			rc.script(n, w, r)
		}
	}))
	rc.srv.TLS = &tls.Config{Certificates: []tls.Certificate{getCA(t).Leaf}}
	rc.srv.EnableHTTP2 = h2
	rc.srv.StartTLS()
	t.Cleanup(rc.srv.Close)
	return rc
}

// statuses answers the nth request with codes[n-1] (the last code repeats).
func statuses(codes ...int) func(int, http.ResponseWriter, *http.Request) {
	return func(n int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(codes[min(n, len(codes))-1])
	}
}

// url is the receiver's URL under testHost.
func (rc *receiver) url(path string) string {
	_, port, _ := net.SplitHostPort(rc.srv.Listener.Addr().String())
	return "https://" + testHost + ":" + port + path
}

func (rc *receiver) snapshot() []hit {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]hit(nil), rc.hits...)
}

// dnsServer answers every query through answer(qtype, n), where n counts the queries of that
// type; answers of the wrong family are ignored.
func dnsServer(t testing.TB, answer func(qtype uint16, n int) []net.IP) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	counts := map[uint16]int{}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		for _, q := range r.Question {
			mu.Lock()
			counts[q.Qtype]++
			n := counts[q.Qtype]
			mu.Unlock()
			for _, ip := range answer(q.Qtype, n) {
				hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: 0}
				switch {
				case q.Qtype == dns.TypeA && ip.To4() != nil && len(ip) == net.IPv4len:
					m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: ip})
				case q.Qtype == dns.TypeAAAA && len(ip) == net.IPv6len:
					m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: ip})
				}
			}
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// bundle is what a delivery test works with: a fresh database with an account and a job, an
// embedded JetStream server, and a DNS server for testHost.
type bundle struct {
	pool      *pgxpool.Pool
	natsURL   string
	js        jetstream.JetStream
	accountID uuid.UUID
	jobID     uuid.UUID
	dns       string
}

func setup(t testing.TB) *bundle {
	t.Helper()
	b := &bundle{pool: pgtest.New(t), dns: dnstest.Loopback(t)}
	srv := natstest.Server(t)
	b.natsURL = srv.ClientURL()
	b.js = connectJS(t, b.natsURL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := queue.EnsureStreams(ctx, b.js, queue.Layout{}, nil); err != nil {
		t.Fatal(err)
	}
	b.accountID = b.account(t, "builder")
	b.jobID = b.job(t, b.accountID)
	return b
}

func connectJS(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func (b *bundle) account(t testing.TB, tier string) uuid.UUID {
	t.Helper()
	id := uuid.New()
	pgtest.Exec(t, b.pool, `INSERT INTO accounts (id, tier) VALUES ($1, $2)`, id, tier)
	return id
}

func (b *bundle) job(t testing.TB, accountID uuid.UUID) uuid.UUID {
	t.Helper()
	id := uuid.New()
	pgtest.Exec(t, b.pool, `INSERT INTO jobs (id, account_id, email, webhook_url, state) VALUES ($1, $2, 'a@example.com', 'https://hooks.test/', 'completed')`, id, accountID)
	return id
}

// create inserts a delivery the way the verifier does (CreateDelivery in a transaction) and,
// when publish is set, publishes it after the commit.
func (b *bundle) create(t testing.TB, accountID uuid.UUID, url, secret string, body []byte, publish bool) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	jobID := b.jobID
	if accountID != b.accountID {
		jobID = b.job(t, accountID)
	}
	// The verifier hands on the job's secret as the API stored it: sealed, under the key a
	// worker with no Options.Secrets opens with (sealed.Process).
	if secret != "" {
		if secret, err = sealed.Process().Seal(secret); err != nil {
			t.Fatal(err)
		}
	}
	id, err := CreateDelivery(ctx, tx, jobID, accountID, url, secret, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if publish {
		if err := Publish(ctx, b.js, queue.Layout{}, id); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// worker is a running Worker that stop ends; stop waits for Run to return.
type worker struct {
	w    *Worker
	stop func()
}

func (b *bundle) startWorker(t testing.TB, o Options) *worker {
	t.Helper()
	if o.Client.DNSResolver == "" {
		o.Client.DNSResolver = b.dns
	}
	if o.Client.RootCAs == nil {
		o.Client.RootCAs = getCA(t).Pool
	}
	// Each worker gets its own connection, like a separate process.
	w, err := NewWorker(b.pool, connectJS(t, b.natsURL), o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("worker: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("worker did not stop within 20 s")
			}
		})
	}
	t.Cleanup(stop)
	return &worker{w: w, stop: stop}
}

// row is a delivery as stored.
type row struct {
	state      string
	attempts   int
	lastStatus *int
	body       []byte
	signature  *string
	replayOf   *uuid.UUID
}

func (b *bundle) row(t testing.TB, id uuid.UUID) row {
	t.Helper()
	var r row
	err := b.pool.QueryRow(context.Background(), `SELECT state, attempts, last_status, body, signature, replay_of FROM deliveries WHERE id = $1`, id).
		Scan(&r.state, &r.attempts, &r.lastStatus, &r.body, &r.signature, &r.replayOf)
	if err != nil {
		t.Fatalf("delivery %s: %v", id, err)
	}
	return r
}

// waitFinal polls until the delivery is delivered or failed, for at most limit.
func (b *bundle) waitFinal(t testing.TB, id uuid.UUID, limit time.Duration) row {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		r := b.row(t, id)
		if r.state == StateDelivered || r.state == StateFailed {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery %s still %s after %d attempts, %s", id, r.state, r.attempts, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// attemptRow is one stored attempt.
type attemptRow struct {
	n       int
	status  *int
	err     *string
	body    *string
	started time.Time
}

func (b *bundle) attempts(t testing.TB, id uuid.UUID) []attemptRow {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT attempt, http_status, error, response_body, started_at FROM delivery_attempts WHERE delivery_id = $1 ORDER BY attempt`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []attemptRow
	for rows.Next() {
		var a attemptRow
		if err := rows.Scan(&a.n, &a.status, &a.err, &a.body, &a.started); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

func itoa(p *int) string {
	if p == nil {
		return "nil"
	}
	return strconv.Itoa(*p)
}
