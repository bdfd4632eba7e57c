package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/wait"
)

// Real refusals — an account over its rate limit, and the fleet unreachable with NATS cut — are
// counted by code in mailvet_admission_refusals_total; requests that succeed, and a malformed one,
// are not.
func TestAdmissionRefusalsMetric(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{proxyNATS: true, env: map[string]string{"MAILVET_PLAN_FREE_RATE_LIMIT_PER_MIN": "2"}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(b.srv.refusals)
	refused := func(code string) float64 {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == code {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}

	_, limited := b.customer(plan.Free)
	b.verify(limited, map[string]string{"email": "ann@acme.test"}).want(t, http.StatusOK, "")
	b.verify(limited, map[string]string{"email": "junk"}).want(t, http.StatusOK, "")
	b.verify(limited, map[string]string{"email": "ann@acme.test"}).want(t, http.StatusTooManyRequests, CodeRateLimitExceeded)
	b.verify(limited, map[string]any{"email": 42}).want(t, http.StatusBadRequest, CodeInvalidRequest)
	if got := refused(CodeRateLimitExceeded); got != 1 {
		t.Errorf("rate_limit_exceeded refusals = %v, want 1", got)
	}
	if got := refused(CodeInvalidRequest); got != 0 {
		t.Errorf("a malformed request was counted as a refusal")
	}

	_, key := b.customer(plan.Scale)
	b.natsProxy.Cut()
	wait.For(t, 15*time.Second, "the API to see NATS down", func() bool { return !b.srv.dispatch.Up() })
	b.verify(key, map[string]string{"email": "ann@acme.test"}).want(t, http.StatusServiceUnavailable, CodeServiceUnavailable)
	b.call(http.MethodPost, "/v1/email/verify/batch", key, map[string]any{"emails": []string{"ann@acme.test"}}).
		want(t, http.StatusServiceUnavailable, CodeServiceUnavailable)
	if got := refused(CodeServiceUnavailable); got != 2 {
		t.Errorf("service_unavailable refusals = %v, want 2", got)
	}
}
