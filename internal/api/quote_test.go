package api

import (
	"fmt"
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

// The list upload's messages quote the header's column names cut too, and name at most the first
// few of a header of up to 1,000 columns (docs/lists.md, "Bad input").
func TestListUploadMessagesQuoteColumnsCut(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	_, key := b.customer(plan.Free)
	long := strings.Repeat("c", 5000)
	var wide []string
	for i := range 900 {
		wide = append(wide, fmt.Sprintf("column %d", i))
	}
	cases := []struct{ name, query, file, want string }{
		{"a long column that is not there", "?column=" + strings.Repeat("n", 200), "email\nann@acme.test\n",
			`column "` + strings.Repeat("n", 64) + `…"`},
		{"the columns of a long header", "?column=nope", long + ",email\nx,ann@acme.test\n", `"` + strings.Repeat("c", 64) + `…", "email"`},
		{"the columns of a wide header", "?column=nope", strings.Join(wide, ",") + "\n" + strings.Repeat("x,", 899) + "x\n", `"column 9" and 890 more`},
		{"a long column without addresses", "", long + "\nnot-an-address\n", `column "` + strings.Repeat("c", 64) + `…" holds no email addresses`},
		{"a long column with a NUL", "", long + ",email\na\x00,ann@acme.test\n", `column "` + strings.Repeat("c", 64) + `…"`},
		{"a column for a text file", "?column=" + strings.Repeat("n", 200), "ann@acme.test\n", `column "` + strings.Repeat("n", 64) + `…"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ct := "text/csv"
			if strings.Contains(c.name, "text file") {
				ct = "text/plain"
			}
			r := b.upload(key, ct, c.query, c.file).want(t, http.StatusBadRequest, CodeInvalidRequest)
			if msg := r.body["message"].(string); !strings.Contains(msg, c.want) || len(msg) > maxMessageLen {
				t.Errorf("message of %d bytes %.300q…, want it to hold %q", len(msg), msg, c.want)
			}
		})
	}
}
