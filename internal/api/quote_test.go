package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/plan"
)

// An error message quotes at most the first 64 bytes of a value from the request
// (docs/errors.md): the host of a webhook_url that is no host name, up to 2,048 characters, is
// quoted cut, on the JSON route and on the list upload's query string alike.
func TestMessagesQuoteAHostCut(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	_, key := b.customer(plan.Free)
	host := strings.Repeat("-", 2000) + ".example.com"
	want := `host "` + strings.Repeat("-", 64) + `…" is not a valid hostname`
	for _, r := range []reply{
		b.call(http.MethodPost, "/v1/email/verify", key, map[string]string{"email": "ann@acme.test", "webhook_url": "https://" + host + "/x"}),
		b.upload(key, "text/plain", "?webhook_url=https://"+host+"/x", "ann@acme.test\n"),
	} {
		r.want(t, http.StatusBadRequest, CodeInvalidRequest)
		if msg := r.body["message"].(string); !strings.Contains(msg, want) || len(msg) > 200 {
			t.Errorf("message of %d bytes %.120q…, want it to quote the host as %q", len(msg), msg, want)
		}
	}
}
