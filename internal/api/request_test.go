package api

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

// A JSON value of the wrong type is named for what the field takes, in JSON's words.
func TestJSONTypeErrorsNameTheType(t *testing.T) {
	t.Parallel()
	var batch struct {
		Emails []string `json:"emails"`
		Strict *bool    `json:"strict"`
	}
	for body, want := range map[string]string{
		`{"emails":"x"}`:    "Field emails must be an array of strings, not string.",
		`{"emails":[1]}`:    "Field emails must be a string, not number.",
		`{"strict":"yes"}`:  "Field strict must be a boolean, not string.",
		`["a@example.com"]`: "Request body must be a JSON object, not array.",
	} {
		err := jsonError(json.NewDecoder(strings.NewReader(body)).Decode(&batch))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}

// What encoding/json lets through is refused on every route that takes a JSON body, with a 400
// naming the problem, and costs nothing: text that is not UTF-8 (invalid bytes, escaped lone
// surrogates, both of which encoding/json turns into U+FFFD), a field name in another case
// (encoding/json matches names case-insensitively, so Webhook_URL turned a verification
// asynchronous), and a field given twice (encoding/json keeps the last).
func TestStrictJSONBodies(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{})
	acct, std := b.customer(plan.Free)
	mgmt := b.provisioningKey(acct)
	keys := map[string]string{"std": std, "mgmt": mgmt}
	const hook = `"webhook_url": "https://hooks.example.com/x"`
	list := func(item3 string) string {
		return `{"emails": ["ann@acme.test", "bob@acme.test", "info@acme.test", ` + item3 + `, "ann@acme.test"]}`
	}
	cases := []struct {
		path, key, body, says string
	}{
		{"/v1/email/verify", "std", "{\"email\": \"ann\xff@acme.test\"}", "Field email is not valid UTF-8 (at byte 14)."},
		{"/v1/email/verify", "std", `{"email": "ann\ud800@acme.test"}`, `Field email holds \ud800 (at byte 14), a UTF-16 surrogate escape without its pair`},
		{"/v1/email/verify", "std", `{"email": "ann\ud800\u0041@acme.test"}`, `Field email holds \ud800`},
		{"/v1/email/verify", "std", `{"email": "\udc00ann@acme.test"}`, `Field email holds \udc00`},
		{"/v1/email/verify", "std", "{\"em\xffail\": \"ann@acme.test\"}", "A field name is not valid UTF-8 (at byte 4)."},
		{"/v1/email/verify", "std", `{"EMAIL": "ann@acme.test"}`, `Unknown field "EMAIL".`},
		{"/v1/email/verify", "std", `{"email": "zoe@acme.test", "email": "ann@acme.test"}`, "Field email is given more than once."},
		{"/v1/email/verify", "std", `{"email": "zoe@acme.test", "EMAIL": "ann@acme.test"}`, `Unknown field "EMAIL".`},
		{"/v1/email/verify", "std", `{"email": "zoe@acme.test", "em\u0061il": "ann@acme.test"}`, "Field email is given more than once."},
		// The async form: none of these may become a job.
		{"/v1/email/verify", "std", `{"email": "ann@acme.test", "Webhook_URL": "https://hooks.example.com/x"}`, `Unknown field "Webhook_URL".`},
		{"/v1/email/verify", "std", `{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/x", "webhook_url": "https://hooks.example.com/y"}`, "Field webhook_url is given more than once."},
		{"/v1/email/verify", "std", "{\"email\": \"ann@acme.test\", \"webhook_url\": \"https://hooks.example.com/\xfe\"}", "Field webhook_url is not valid UTF-8"},
		{"/v1/email/verify", "std", `{"email": "ann@acme.test", ` + hook + `, "webhook_secret": "long enough \ud83d secret"}`, `Field webhook_secret holds \ud83d`},
		{"/v1/email/verify", "std", `{"email": "ann@acme.test", ` + hook + `, "Webhook_Secret": "long enough secret"}`, `Unknown field "Webhook_Secret".`},
		{"/v1/email/verify/batch", "std", list("\"us\xffer3@acme.test\""), "Field emails[3] is not valid UTF-8"},
		{"/v1/email/verify/batch", "std", list(`"user3\ud800@acme.test"`), `Field emails[3] holds \ud800`},
		{"/v1/email/verify/batch", "std", `{"Emails": ["ann@acme.test"]}`, `Unknown field "Emails".`},
		{"/v1/email/verify/batch", "std", `{"emails": ["zoe@acme.test"], "emails": ["ann@acme.test"]}`, "Field emails is given more than once."},
		{"/v1/email/verify/batch", "std", `{"emails": []}`, "Field emails is empty; send 1 to 100 email addresses."},
		{"/v1/email/verify/stream", "std", `{"emails": []}`, "Field emails is empty; send 1 to 1000 email addresses."},
		{"/v1/email/verify/stream", "std", list("\"us\xffer3@acme.test\""), "Field emails[3] is not valid UTF-8"},
		{"/v1/email/verify/stream", "std", list(`"user3\udfff@acme.test"`), `Field emails[3] holds \udfff`},
		{"/v1/email/verify/stream", "std", `{"EMAILS": ["ann@acme.test"]}`, `Unknown field "EMAILS".`},
		{"/v1/email/verify/stream", "std", `{"emails": ["zoe@acme.test"], "emails": ["ann@acme.test"]}`, "Field emails is given more than once."},
		{"/v1/management/keys", "mgmt", "{\"label\": \"prod\xff\"}", "Field label is not valid UTF-8"},
		{"/v1/management/keys", "mgmt", `{"label": "prod\ud800"}`, `Field label holds \ud800`},
		{"/v1/management/keys", "mgmt", `{"Label": "prod"}`, `Unknown field "Label".`},
		{"/v1/management/keys", "mgmt", `{"label": "prod", "label": "test"}`, "Field label is given more than once."},
		{"/v1/management/keys", "mgmt", `{"label": "prod", "x": {"y": 1, "y": 2}}`, "Field x.y is given more than once."},
	}
	verifyRefusals := 0
	for _, c := range cases {
		r := b.call(http.MethodPost, c.path, keys[c.key], c.body).want(t, http.StatusBadRequest, CodeInvalidRequest)
		if msg, _ := r.body["message"].(string); !strings.Contains(msg, c.says) {
			t.Errorf("%s %q: message %q, want %q", c.path, c.body, msg, c.says)
		}
		if strings.HasPrefix(c.path, "/v1/email/") {
			verifyRefusals++
		}
	}
	// Escapes of real characters, a U+FFFD sent as such, and other faults keep their meaning
	// and messages.
	b.verify(std, `{"email": "\u0061nn@acme.test"}`).want(t, http.StatusOK, "")
	b.verify(std, `{"email": "\ud83d\ude00\ufffd@acme.test"}`).want(t, http.StatusOK, "")
	for body, says := range map[string]string{
		`{"email": 42, "EMAIL": 1}`:       "Field email must be a string, not number.",
		`{"emial": "ann@acme.test"`:       "Request body is truncated JSON.",
		`{"email": "ann@acme.test", "x"}`: "Request body is not valid JSON (at byte 31).",
		`{"email": "\x"}`:                 "Request body is not valid JSON (at byte 13).",
	} {
		r := b.verify(std, body).want(t, http.StatusBadRequest, CodeInvalidRequest)
		if msg, _ := r.body["message"].(string); msg != says {
			t.Errorf("%q: message %q, want %q", body, msg, says)
		}
		verifyRefusals++
	}
	// A body labelled compressed is refused, compressed or not: read as it is, a gzip body was
	// "a NUL byte", and a plain one was verified as if the label were not there.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"email": "ann@acme.test"}`))
	_ = zw.Close()
	for _, body := range []string{gz.String(), `{"email": "ann@acme.test"}`} {
		r := b.call(http.MethodPost, "/v1/email/verify", std, body, "Content-Encoding", "gzip").want(t, http.StatusBadRequest, CodeInvalidRequest)
		if msg, _ := r.body["message"].(string); !strings.Contains(msg, `Content-Encoding "gzip" is not supported`) {
			t.Errorf("gzip-labelled body: message %q", msg)
		}
		verifyRefusals++
	}

	b.srv.Close() // writes the usage rows still queued behind responses
	if n := b.usage(acct).Quota; n != 2 {
		t.Errorf("%d quota units used, want the 2 good verifications'", n)
	}
	if n := b.rows(acct, usagetest.Delivered); n != 2 {
		t.Errorf("%d usage rows of verifications, want 2", n)
	}
	if n := b.rows(acct, usagetest.Refused("invalid_request")); n != verifyRefusals {
		t.Errorf("%d invalid_request rows, want %d", n, verifyRefusals)
	}
	if n := b.count(`SELECT count(*) FROM jobs WHERE account_id = $1`, acct); n != 0 {
		t.Errorf("%d jobs stored from refused requests", n)
	}
	if n := b.count(`SELECT count(*) FROM api_keys WHERE account_id = $1 AND kind = 'standard'`, acct); n != 1 {
		t.Errorf("%d standard keys, want the fixture's only", n)
	}
}

// An NDJSON list whose address holds an escaped NUL or lone surrogate is refused whole, naming
// the line, like a raw NUL or bad bytes: not a 500 from Postgres, and not a list of U+FFFD.
func TestListNDJSONEscapesInEmail(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	acct, key := b.customer(plan.Builder)
	for _, c := range []struct {
		file string
		line float64
		says string
	}{
		{"{\"email\":\"bob@acme.test\"}\n{\"email\":\"ann\\u0000@acme.test\"}\n", 2, "NUL"},
		{"{\"email\":\"ann\\ud800@acme.test\"}\n{\"email\":\"bob@acme.test\"}\n", 1, "surrogate"},
	} {
		r := b.call(http.MethodPost, "/v1/email/lists", key, c.file, "Content-Type", "application/x-ndjson").
			want(t, http.StatusBadRequest, CodeInvalidRequest)
		if msg, _ := r.body["message"].(string); r.body["line"] != c.line || !strings.Contains(msg, c.says) {
			t.Errorf("%q: line %v, message %q; want line %v about the %s", c.file, r.body["line"], msg, c.line, c.says)
		}
	}
	if n := b.count(`SELECT count(*) FROM lists WHERE account_id = $1`, acct); n != 0 {
		t.Errorf("%d lists stored from refused uploads", n)
	}
	if n := b.charged(acct); n != 0 {
		t.Errorf("refused uploads charged %d", n)
	}
}

// BenchmarkStrictJSON is the strict pass bindJSON makes over a body before decoding it, for the
// largest batch (1,000 addresses): it must stay small beside the decode itself.
func BenchmarkStrictJSON(b *testing.B) {
	emails := make([]string, 1000)
	for i := range emails {
		emails[i] = "user" + strings.Repeat("x", i%7) + "@example-corp.com"
	}
	body, _ := json.Marshal(map[string]any{"emails": emails})
	t := reflect.TypeFor[listRequest]()
	b.ReportAllocs()
	for b.Loop() {
		if err := strictJSON(body, t); err != nil {
			b.Fatal(err)
		}
	}
}
