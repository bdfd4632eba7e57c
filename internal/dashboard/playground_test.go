package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"strings"
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

// The playground verifies through the verification service: a result the local layers decide is
// shown field by field and billed once it is on the page; what the API's JSON decoder would
// refuse (a NUL, text that is not UTF-8) never reaches the service.
func TestPlaygroundVerifiesThroughTheService(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup("ann@example.com")
	acct := f.accountOf(t, "ann@example.com")
	k, err := account.NewStore(f.pool).CreateStandardKey(context.Background(), acct, "play", func(plan.Tier) int { return 10 })
	if err != nil {
		t.Fatal(err)
	}
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
