package health

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// A hung dependency cannot make /readyz hang: its check is reported as timed out.
func TestReadyzBoundsHungChecks(t *testing.T) {
	t.Parallel()
	c := NewChecker(100 * time.Millisecond)
	c.Add("ok", func(context.Context) error { return nil })
	c.Add("down", func(context.Context) error { return errors.New("connection refused") })
	block := make(chan struct{})
	defer close(block)
	c.Add("hung", func(context.Context) error { <-block; return nil })

	start := time.Now()
	rec := httptest.NewRecorder()
	Handler(c, NewRegistry()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if took := time.Since(start); took > time.Second {
		t.Fatalf("/readyz took %v", took)
	}
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d", rec.Code)
	}
	var rep Report
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"ok": "ok", "down": "connection refused", "hung": "timed out"}
	for k, v := range want {
		if rep.Checks[k] != v {
			t.Errorf("check %s = %q, want %q", k, rep.Checks[k], v)
		}
	}
	if rep.Status != "not_ready" {
		t.Errorf("status %q", rep.Status)
	}
}

func TestHealthzAndMetrics(t *testing.T) {
	t.Parallel()
	h := Handler(NewChecker(time.Second), NewRegistry())
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want {
			t.Errorf("%s: %d", path, rec.Code)
		}
	}
}

// The public /readyz (the API's port) names a failing check without its error text, which can
// carry a database user and name or an internal address; the operators' port keeps it.
func TestPublicReadyzHidesErrorText(t *testing.T) {
	t.Parallel()
	c := NewChecker(time.Second)
	c.Add("postgres", func(context.Context) error {
		return errors.New("failed to connect to `user=mailvet database=mailvet_prod`: 10.0.3.7:5432: connection refused")
	})
	c.Add("nats", func(context.Context) error { return nil })
	rec := httptest.NewRecorder()
	c.PublicReadyz(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var rep Report
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusServiceUnavailable || rep.Status != "not_ready" || rep.Checks["postgres"] != "failing" || rep.Checks["nats"] != "ok" {
		t.Fatalf("public readyz: %d %+v", rec.Code, rep)
	}
	rec = httptest.NewRecorder()
	c.Readyz(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if !strings.Contains(rec.Body.String(), "database=mailvet_prod") {
		t.Fatalf("operators' readyz lost the error text: %s", rec.Body.String())
	}
}

// A check removed while /readyz runs (a worker drops its "startup" check once it is up, while an
// orchestrator polls) is either run or left out, never called as a missing function: a verifier
// worker crashed with a nil dereference here during a fault campaign.
func TestRunWhileChecksComeAndGo(t *testing.T) {
	c := NewChecker(time.Second)
	c.Add("steady", func(context.Context) error { return nil })
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				c.Add("startup", func(context.Context) error { return nil })
			} else {
				c.Remove("startup")
			}
		}
	})
	for range 20000 {
		if rep, ok := c.Run(context.Background()); !ok {
			t.Fatalf("not ready: %+v", rep)
		}
	}
	close(stop)
	wg.Wait()
}
