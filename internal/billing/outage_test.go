package billing

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/stripetest"
	"github.com/mailvet/mailvet/internal/testkit/tcpproxy"
)

// proxiedStripe is a client of stripe-mock through a tcpproxy, for outage tests.
func proxiedStripe(t *testing.T) (*Stripe, *tcpproxy.Proxy) {
	t.Helper()
	p := stripetest.Proxied(t)
	return NewStripe(Config{SecretKey: stripetest.SecretKey, APIBase: "http://" + p.Addr(),
		Prices: map[string]plan.Tier{"price_b": plan.Builder}}), p
}

// stripeCalls are the calls made on a request's path, each as the dashboard or the API makes it.
func stripeCalls(s *Stripe) map[string]func(context.Context) error {
	r := CheckoutRequest{AccountID: "0b6f7d8e-3333-4c3e-9a55-0000000000c1", Email: "ann@example.com", Tier: plan.Builder,
		CustomerID: "cus_1", SuccessURL: "https://mailvet.example/dashboard/billing", CancelURL: "https://mailvet.example/dashboard/billing"}
	return map[string]func(context.Context) error{
		"portal": func(ctx context.Context) error {
			_, err := s.PortalURL(ctx, "cus_1", "https://mailvet.example/dashboard/billing")
			return err
		},
		"customer": func(ctx context.Context) error {
			r := r
			r.CustomerID = ""
			_, err := s.PrepareCustomer(ctx, r)
			return err
		},
		"checkout": func(ctx context.Context) error {
			_, err := s.CheckoutURL(ctx, r)
			return err
		},
	}
}

// runAll runs every call at once and returns each one's error and duration.
func runAll(calls map[string]func(context.Context) error) (map[string]error, map[string]time.Duration) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs = map[string]error{}
		took = map[string]time.Duration{}
	)
	for name, call := range calls {
		wg.Go(func() {
			start := time.Now()
			err := call(context.Background())
			mu.Lock()
			errs[name], took[name] = err, time.Since(start)
			mu.Unlock()
		})
	}
	wg.Wait()
	return errs, took
}

// A black-holed Stripe (connections accepted, nothing answered) ends every call with
// ErrProviderUnreachable by CallTimeout, retry included, instead of two full HTTP timeouts; a
// refused connection ends it at once, after the one retry.
func TestStripeOutageEndsCallsWithinTheBudget(t *testing.T) {
	t.Parallel()
	s, p := proxiedStripe(t)
	errs, _ := runAll(stripeCalls(s))
	for name, err := range errs {
		if err != nil {
			t.Fatalf("%s through the proxy before the outage: %v", name, err)
		}
	}

	p.Hold()
	errs, took := runAll(stripeCalls(s))
	for name, err := range errs {
		if !errors.Is(err, ErrProviderUnreachable) {
			t.Errorf("%s, Stripe black-holed: %v, want ErrProviderUnreachable", name, err)
		}
		if took[name] < CallTimeout-100*time.Millisecond || took[name] > CallTimeout+time.Second {
			t.Errorf("%s, Stripe black-holed: answered after %v, want about %v", name, took[name], CallTimeout)
		}
	}

	p.Cut()
	errs, took = runAll(stripeCalls(s))
	for name, err := range errs {
		if !errors.Is(err, ErrProviderUnreachable) {
			t.Errorf("%s, Stripe refusing: %v, want ErrProviderUnreachable", name, err)
		}
		if took[name] > 2*time.Second {
			t.Errorf("%s, Stripe refusing: answered after %v, want about 0.5 s (one retry)", name, took[name])
		}
	}
}

// A caller's deadline earlier than CallTimeout is kept.
func TestStripeCallKeepsAnEarlierDeadline(t *testing.T) {
	t.Parallel()
	s, p := proxiedStripe(t)
	p.Hold()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := s.PortalURL(ctx, "cus_1", "https://mailvet.example/dashboard/billing")
	if !errors.Is(err, ErrProviderUnreachable) || time.Since(start) > 2*time.Second {
		t.Fatalf("1 s deadline, Stripe black-holed: %v after %v", err, time.Since(start))
	}
}

// A Stripe call answered with something stripe-go cannot read — a proxy's HTML page, a 500
// with a text body — got an answer: ErrPortalUnavailable (the API's 500
// billing_portal_unavailable), not ErrProviderUnreachable (503 "unreachable", retry).
func TestUnreadableStripeAnswerIsNotAnOutage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status int
		body   string
	}{
		{http.StatusOK, "<html>not json</html>"},
		{http.StatusInternalServerError, "upstream error"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(c.status)
			_, _ = w.Write([]byte(c.body))
		}))
		s := NewStripe(Config{SecretKey: stripetest.SecretKey, APIBase: srv.URL,
			Prices: map[string]plan.Tier{"price_b": plan.Builder}})
		errs, _ := runAll(stripeCalls(s))
		srv.Close()
		for name, err := range errs {
			if !errors.Is(err, ErrPortalUnavailable) || errors.Is(err, ErrProviderUnreachable) {
				t.Errorf("%s, Stripe answering %d %q: %v, want ErrPortalUnavailable", name, c.status, c.body, err)
			}
		}
	}
}
