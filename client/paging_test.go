package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/mailvet/mailvet/client"
)

// The three paged listings send a page's limit and cursor the same way, with their own filters
// beside them, and no query at all for the first page of the default size.
func TestPagedListingsQuery(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.RequestURI())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	c := client.New("sk_live_test", client.WithBaseURL(srv.URL))
	ctx := context.Background()
	steps := []struct {
		call func() error
		want string
	}{
		{func() error { _, err := c.Lists(ctx, client.ListsPage{}); return err }, "/v1/email/lists"},
		{func() error { _, err := c.Lists(ctx, client.ListsPage{Limit: 5, Cursor: "a b"}); return err },
			"/v1/email/lists?cursor=a+b&limit=5"},
		{func() error { _, err := c.Deliveries(ctx, client.DeliveryQuery{}); return err }, "/v1/management/deliveries"},
		{func() error {
			_, err := c.Deliveries(ctx, client.DeliveryQuery{Status: "failed", Limit: 3, Cursor: "c"})
			return err
		}, "/v1/management/deliveries?cursor=c&limit=3&status=failed"},
		{func() error { _, err := c.AuditEvents(ctx, client.AuditQuery{Cursor: "d"}); return err },
			"/v1/management/audit?cursor=d"},
	}
	for i, s := range steps {
		if err := s.call(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		mu.Lock()
		last := got[len(got)-1]
		mu.Unlock()
		if last != s.want {
			t.Errorf("call %d requested %s, want %s", i, last, s.want)
		}
	}
}
