package api

import (
	"bufio"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/testkit/logtest"
)

// Dashboard requests are logged with the page's route pattern, not all as /dashboard*, and ids
// in their paths do not reach the route label.
func TestDashboardRoutesLoggedByPattern(t *testing.T) {
	t.Parallel()
	logs := &logtest.Buffer{}
	b := setup(t, nil, func(d *Deps) { d.Log = app.NewLogger(logs, "test") })
	for _, path := range []string{"/dashboard/signin", "/dashboard/lists/0b6f7d8e-3333-4c3e-9a55-0000000000c1", "/dashboard/no-such-page", "/healthz"} {
		serve(b.srv.Handler(), httptest.NewRequest("GET", path, nil))
	}
	var routes []string
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err == nil && line["msg"] == "http request" {
			routes = append(routes, line["route"].(string))
		}
	}
	want := []string{"/dashboard/signin", "/dashboard/lists/{id}", "/dashboard/", "/healthz"}
	if strings.Join(routes, " ") != strings.Join(want, " ") {
		t.Errorf("logged routes %q, want %q", routes, want)
	}
}

// A method the server does not know is counted in mailvet_http_requests_total as "other": any
// token is a method to Go's server, and each one as sent would be a new series.
func TestRequestMetricMethodsBounded(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := setup(t, nil, func(d *Deps) { d.Metrics = reg })
	for _, m := range []string{"GET", "DELETE", "LEAKMETHOD1", "LEAKMETHOD2", "get"} {
		for _, path := range []string{"/healthz", "/v1/email/verify", "/dashboard/", "/no-such-path"} {
			serve(b.srv.Handler(), httptest.NewRequest(m, path, nil))
		}
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]bool{}
	for _, f := range fams {
		if f.GetName() != "mailvet_http_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "method" {
					methods[l.GetValue()] = true
				}
			}
		}
	}
	if len(methods) != 3 || !methods["GET"] || !methods["DELETE"] || !methods["other"] {
		t.Errorf("method labels %v, want GET, DELETE and other", methods)
	}
}
