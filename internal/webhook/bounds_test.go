package webhook

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// What a receiver sends back is bounded, headers too: an answer whose headers pass
// MaxResponseHeaderBytes is refused as it arrives, a transport failure, instead of being held
// in memory (Go's default allows 10 MiB per answer, times the worker's concurrency). The
// receiver here answers 200 behind 1 MiB of headers.
func TestReceiverHeadersAreBounded(t *testing.T) {
	t.Parallel()
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2], func(t *testing.T) {
			t.Parallel()
			receiverHeadersBounded(t, h2)
		})
	}
}

func receiverHeadersBounded(t *testing.T, h2 bool) {
	b := setup(t)
	big := strings.Repeat("a", 1<<20)
	var protos []string
	var mu sync.Mutex
	rc := newReceiverProto(t, h2, func(_ int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos = append(protos, r.Proto)
		mu.Unlock()
		w.Header().Set("X-Padding", big)
		w.WriteHeader(http.StatusOK)
	})
	b.startWorker(t, Options{Client: ClientOptions{AllowPrivate: true}})
	id := b.create(t, b.accountID, rc.url("/cb"), "", sampleBody, true)
	r := b.waitFinal(t, id, 20*time.Second)
	as := b.attempts(t, id)
	if r.state != StateFailed || len(as) != MaxAttempts {
		t.Fatalf("delivery %s after %d attempts, want failed after %d (each answer refused)", r.state, len(as), MaxAttempts)
	}
	for _, a := range as {
		// HTTP/1.1 names the limit; HTTP/2 ends the connection when the header block passes it.
		if a.status != nil || a.err == nil || !strings.Contains(*a.err, "exceeded") && !strings.Contains(*a.err, "COMPRESSION_ERROR") {
			t.Errorf("attempt %d: status %s, error %v; want the header limit", a.n, itoa(a.status), deref(a.err))
		}
	}
	if n := rc.count.Load(); n != MaxAttempts {
		t.Errorf("receiver got %d requests, want %d", n, MaxAttempts)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]; len(protos) == 0 || protos[0] != want {
		t.Errorf("requests came over %v, want %s", protos, want)
	}
}
