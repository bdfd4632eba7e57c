package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

// The playground shows smtp_reply as the server wrote it, and every other field as its value.
func TestPlaygroundFieldValues(t *testing.T) {
	for _, c := range []struct{ name, raw, want string }{
		{"smtp_reply", `{"code":550,"enhanced_code":"5.1.1","text":"No such user here"}`, "550 5.1.1 No such user here"},
		{"smtp_reply", `{"code":421,"enhanced_code":null,"text":"Try later"}`, "421 Try later"},
		{"smtp_reply", `{"code":250,"enhanced_code":"2.0.0","text":""}`, "250 2.0.0"},
		{"smtp_reply", `null`, "null"},
		{"status", `"deliverable"`, "deliverable"},
		{"confidence", `0.95`, "0.95"},
	} {
		if got := fieldValue(c.name, []byte(c.raw)); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.name, c.raw, got, c.want)
		}
	}
}

// playgroundUser is a fixture, a signed-in user's browser and a standard key of theirs to verify
// with in the playground.
func playgroundUser(t *testing.T) (f *fixture, b *browser, acct string, k account.CreatedKey) {
	t.Helper()
	f = newFixture(t, nil)
	b = f.browser(t)
	b.signup("ann@example.com")
	acct = f.accountOf(t, "ann@example.com")
	k, err := account.NewStore(f.pool).CreateStandardKey(context.Background(), acct, "play", func(plan.Tier) int { return 10 })
	if err != nil {
		t.Fatal(err)
	}
	return f, b, acct, k
}

// The playground verifies through the verification service: a result the local layers decide is
// shown field by field and billed once it is on the page; what the API's JSON decoder would
// refuse (a NUL, text that is not UTF-8) never reaches the service.
func TestPlaygroundVerifiesThroughTheService(t *testing.T) {
	f, b, acct, k := playgroundUser(t)
	csrf := b.csrf("/dashboard/playground")
	for _, bad := range []string{"a\x00@b.example", "a\xff@b.example"} {
		resp, body := b.post("/dashboard/playground", url.Values{"csrf": {csrf}, "key_id": {k.ID}, "email": {bad}})
		if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "plain text") {
			t.Errorf("email %q: %d\n%s", bad, resp.StatusCode, body)
		}
	}
	if n := f.svc.calls.Load(); n != 0 {
		t.Fatalf("%d refused addresses reached the service", n)
	}
	resp, body := b.post("/dashboard/playground", url.Values{"csrf": {csrf}, "key_id": {k.ID}, "email": {"not-an-address"}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `data-field="status"`) || !strings.Contains(body, "invalid") {
		t.Fatalf("playground: %d\n%s", resp.StatusCode, body)
	}
	usagetest.Settle(t, f.pool)
	rows := usagetest.Rows(t, f.pool, acct)
	if len(rows) != 1 || rows[0].Route != "verify" || !usagetest.Delivered(rows[0]) {
		t.Fatalf("usage rows %+v, want the one delivered verify row", rows)
	}
	if c := usagetest.Of(t, f.pool, acct); c.Quota != 1 || c.Held != 0 || c.Holds != 0 {
		t.Fatalf("counts %+v, want one quota unit and nothing held", c)
	}
}

// goneWriter is the connection of a browser that went away while its playground request ran:
// every write of the page fails, as it does on a reset connection.
type goneWriter struct{ header http.Header }

func (w *goneWriter) Header() http.Header       { return w.header }
func (w *goneWriter) WriteHeader(int)           {}
func (w *goneWriter) Write([]byte) (int, error) { return 0, syscall.ECONNRESET }

// A playground result whose page could not be written did not reach the page, so it is not billed
// and its hold goes back, as the API's verify route does when its answer cannot be written
// (docs/reliability.md, "Metering guarantees": nothing undelivered is billed).
func TestPlaygroundResultNotWrittenIsNotBilled(t *testing.T) {
	f, b, acct, k := playgroundUser(t)
	csrf := b.csrf("/dashboard/playground")
	form := url.Values{"csrf": {csrf}, "key_id": {k.ID}, "email": {"x@mailinator.com"}} // disposable: billable, decided locally
	req := httptest.NewRequest(http.MethodPost, f.srv.URL+"/dashboard/playground", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	u, _ := url.Parse(f.srv.URL + "/dashboard/playground")
	for _, c := range b.c.Jar.Cookies(u) {
		req.AddCookie(c)
	}
	f.h.ServeHTTP(&goneWriter{header: http.Header{}}, req)
	if n := f.svc.calls.Load(); n != 1 {
		t.Fatalf("the service verified %d times, want 1", n)
	}
	usagetest.Settle(t, f.pool)
	if rows := usagetest.Rows(t, f.pool, acct); usagetest.Count(rows, usagetest.Delivered) != 0 {
		t.Errorf("usage rows %+v: a result whose page was never written is billed", rows)
	}
	if c := usagetest.Of(t, f.pool, acct); c.Quota != 0 || c.Billable != 0 || c.Held != 0 || c.Holds != 0 {
		t.Errorf("counts %+v, want nothing used, billed or held", c)
	}
}
