// Package health serves the operational endpoints every Mailvet binary exposes: /healthz (the
// process is up), /readyz (its dependencies answer) and /metrics (Prometheus).
package health

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// CheckFunc reports whether one dependency is usable; it must honour ctx's deadline.
type CheckFunc func(ctx context.Context) error

// Checker runs named readiness checks concurrently with a common deadline, so one hung dependency
// cannot make /readyz hang.
type Checker struct {
	mu      sync.RWMutex
	checks  map[string]CheckFunc
	Timeout time.Duration
}

// NewChecker returns a Checker whose checks each get timeout.
func NewChecker(timeout time.Duration) *Checker {
	return &Checker{checks: map[string]CheckFunc{}, Timeout: timeout}
}

// Add registers a check under name.
func (c *Checker) Add(name string, fn CheckFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checks[name] = fn
}

// Remove drops the check registered under name, if any.
func (c *Checker) Remove(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.checks, name)
}

// Report is the body of /readyz.
type Report struct {
	Status string            `json:"status"` // "ready" or "not_ready"
	Checks map[string]string `json:"checks"` // name ⇒ "ok" or the error text
}

// Run executes every check and returns the report; ok is true when all passed.
func (c *Checker) Run(ctx context.Context) (Report, bool) {
	// One snapshot of names and functions: a check removed meanwhile (a worker drops its
	// start-up check once it is up) is run once more or not at all, never looked up missing.
	c.mu.RLock()
	names := make([]string, 0, len(c.checks))
	fns := make(map[string]CheckFunc, len(c.checks))
	for n, fn := range c.checks {
		names = append(names, n)
		fns[n] = fn
	}
	c.mu.RUnlock()
	sort.Strings(names)

	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	results := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		fn := fns[n]
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan error, 1)
			go func() { done <- fn(ctx) }()
			select {
			case err := <-done:
				results[i] = err
			case <-ctx.Done():
				results[i] = errors.New("timed out")
			}
		}()
	}
	wg.Wait()

	rep := Report{Status: "ready", Checks: map[string]string{}}
	ok := true
	for i, n := range names {
		if results[i] != nil {
			ok = false
			rep.Checks[n] = results[i].Error()
		} else {
			rep.Checks[n] = "ok"
		}
	}
	if !ok {
		rep.Status = "not_ready"
	}
	return rep, ok
}

// Healthz answers 200 while the process runs.
func Healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// Readyz answers 200 when every check passes and 503 otherwise, with the per-check report: each
// failing check's error text, for the operators' port.
func (c *Checker) Readyz(w http.ResponseWriter, r *http.Request) { c.readyz(w, r, false) }

// PublicReadyz is Readyz for a port the internet reaches (the API's): a failing check says only
// "failing". Its error text (a database user and name, an internal host and port) stays on the
// operators' port and in the log.
func (c *Checker) PublicReadyz(w http.ResponseWriter, r *http.Request) { c.readyz(w, r, true) }

func (c *Checker) readyz(w http.ResponseWriter, r *http.Request, public bool) {
	rep, ok := c.Run(r.Context())
	code := http.StatusOK
	if !ok {
		code = http.StatusServiceUnavailable
	}
	if public {
		for n, v := range rep.Checks {
			if v != "ok" {
				rep.Checks[n] = "failing"
			}
		}
	}
	writeJSON(w, code, rep)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// NewRegistry returns a Prometheus registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves /healthz, /readyz and /metrics.
func Handler(c *Checker, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", Healthz)
	mux.HandleFunc("GET /readyz", c.Readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// Register registers c with reg, or returns the collector already registered under its name,
// so that two components of one process (the API and the in-process workers of `-dev`, say)
// share a series instead of failing.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
