package api

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

// nulBodyCase is a JSON body with a NUL in one field, and the field the 400 must name.
type nulBodyCase struct {
	path, body, field string
	key               string // "std" (standard key), "mgmt" (provisioning key) or "" (Stripe webhook)
}

// nulBodyCases puts a NUL, spelled as nul, in every field of every route that takes a JSON body.
// emails[3] is deliberately not the first item, so a message naming emails[0] would be wrong.
func nulBodyCases(nul string) []nulBodyCase {
	const hook = `"webhook_url": "https://hooks.example.com/x"`
	list := func(n int) string {
		items := make([]string, n)
		for i := range items {
			items[i] = fmt.Sprintf(`"user%d@acme.test"`, i)
		}
		items[3] = `"us` + nul + `er3@acme.test"`
		return `{"emails": [` + strings.Join(items, ",") + `]}`
	}
	return []nulBodyCase{
		{"/v1/email/verify", `{"email": "ann` + nul + `@acme.test"}`, "email", "std"},
		{"/v1/email/verify", `{"email": "` + nul + `"}`, "email", "std"},
		{"/v1/email/verify", `{"email": "ann@acme.test", "webhook_url": "https://hooks.example.com/` + nul + `"}`, "webhook_url", "std"},
		{"/v1/email/verify", `{"email": "ann@acme.test", "callback_url": "https://hooks.example.com/` + nul + `"}`, "callback_url", "std"},
		{"/v1/email/verify", `{"email": "ann@acme.test", ` + hook + `, "webhook_secret": "long enough ` + nul + ` secret"}`, "webhook_secret", "std"},
		{"/v1/email/verify/batch", list(5), "emails[3]", "std"},
		{"/v1/email/verify/stream", list(8), "emails[3]", "std"},
		{"/v1/management/keys", `{"label": "prod` + nul + `"}`, "label", "mgmt"},
		{"/v1/management/billing/portal", `{"return_url": "https://app.example.com/` + nul + `"}`, "return_url", "mgmt"},
		// A NUL in a field name, known or not, is refused before the name is looked up.
		{"/v1/email/verify", `{"em` + nul + `ail": "ann@acme.test"}`, "Field name", "std"},
		{"/v1/management/keys", `{"label": "prod", "x": {"y": ["` + nul + `"]}}`, "x.y[0]", "mgmt"},
	}
}

// A NUL character cannot be stored by Postgres, so it is bad input: a 400 naming the field, on
// every route and in either spelling, never a 503 "retry later", and never an empty 200 stream.
// Nothing is charged, and the verify routes log the refusals as invalid_request.
func TestNULIsBadInput(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{env: stripeEnv})
	acct, std := b.customer(plan.Builder)
	mgmt := b.provisioningKey(acct)
	keys := map[string]string{"std": std, "mgmt": mgmt}

	verifyRefusals := 0
	for _, spelling := range []struct{ name, nul string }{{"escape", `\u0000`}, {"raw byte", "\x00"}} {
		for _, c := range nulBodyCases(spelling.nul) {
			r := b.call(http.MethodPost, c.path, keys[c.key], c.body).want(t, http.StatusBadRequest, CodeInvalidRequest)
			msg, _ := r.body["message"].(string)
			if !strings.Contains(msg, c.field+" ") || !strings.Contains(msg, "NUL") {
				t.Errorf("%s, %s: message %q does not name %s and the NUL", c.path, spelling.name, msg, c.field)
			}
			if strings.HasPrefix(c.path, "/v1/email/") {
				verifyRefusals++
			}
		}
	}
	// A NUL byte outside any string is still named as one, not as generic bad JSON.
	r := b.call(http.MethodPost, "/v1/email/verify", std, "{\"email\": \"ann@acme.test\"\x00}").want(t, http.StatusBadRequest, CodeInvalidRequest)
	if msg, _ := r.body["message"].(string); !strings.Contains(msg, "NUL byte (at byte 25)") {
		t.Errorf("NUL outside a string: message %q", msg)
	}
	verifyRefusals++
	// An escaped backslash followed by u0000 is text, not a NUL: the address is verified.
	r = b.call(http.MethodPost, "/v1/email/verify", std, `{"email": "\\u0000@acme.test"}`).want(t, http.StatusOK, "")
	if r.body["email"] != `\u0000@acme.test` {
		t.Errorf(`"\\u0000" was not read as text: %v`, r.body)
	}

	// A signed Stripe event with a NUL is refused with a 400, so Stripe does not resend it.
	b.deliver([]byte(`{"id": "evt_nul", "object": "event", "type": "customer.subscription.updated", "created": 1793491200,
		"data": {"object": {"id": "sub_1", "object": "subscription", "customer": "cus_\u0000"}}}`)).
		want(t, http.StatusBadRequest, CodeInvalidRequest)

	b.srv.Close() // writes the usage rows still queued behind responses
	if n := b.charged(acct); n != 0 {
		t.Errorf("refused requests charged %d quota units and billable calls", n)
	}
	if n := b.rows(acct, usagetest.Delivered); n != 1 {
		t.Errorf("%d usage rows of verifications, want 1 (the escaped backslash)", n)
	}
	if n := b.rows(acct, usagetest.Refused("invalid_request")); n != verifyRefusals {
		t.Errorf("%d invalid_request rows, want %d", n, verifyRefusals)
	}
	if n := b.count(`SELECT count(*) FROM jobs WHERE account_id = $1`, acct) + b.count(`SELECT count(*) FROM stripe_events`); n != 0 {
		t.Errorf("%d jobs or Stripe events stored from refused requests", n)
	}
	if n := b.count(`SELECT count(*) FROM api_keys WHERE account_id = $1 AND kind = 'standard'`, acct); n != 1 {
		t.Errorf("%d standard keys, want the fixture's only", n)
	}
}

// Path and query parameters reach SQL too: a NUL or any other garbage there is a 400 or the
// route's 404 for an unknown id, never a 5xx.
func TestNULAndGarbageInPathAndQuery(t *testing.T) {
	t.Parallel()
	b := setupVerify(t, verifyOpts{noWorkers: true})
	acct, std := b.customer(plan.Builder)
	mgmt := b.provisioningKey(acct)
	garbage := []string{"\x00", "%00", "\\u0000", "\xff\xfe", "' OR 1=1 --", strings.Repeat("9", 500),
		"00000000-0000-0000-0000-00000000000\x00", "{00000000-0000-0000-0000-000000000000}", "..", " "}
	for _, g := range garbage {
		seg := url.PathEscape(g)
		b.call(http.MethodGet, "/v1/email/jobs/"+seg, std, nil).want(t, http.StatusNotFound, "job_not_found")
		b.call(http.MethodDelete, "/v1/management/keys/"+seg, mgmt, nil).want(t, http.StatusNotFound, CodeKeyNotFound)
		b.call(http.MethodPost, "/v1/management/deliveries/"+seg+"/retry", mgmt, nil).want(t, http.StatusNotFound, CodeDeliveryNotFound)
		q := url.QueryEscape(g)
		for _, param := range []string{"status", "limit", "cursor"} {
			b.call(http.MethodGet, "/v1/management/deliveries?"+param+"="+q, mgmt, nil).want(t, http.StatusBadRequest, CodeInvalidRequest)
		}
	}
	// Cursors of the right shape whose time Postgres cannot hold (before 4713 BC, after 294276).
	for _, micros := range []int64{-1 << 63, 1<<63 - 1, -210866803200000000 - 1} {
		b.call(http.MethodGet, "/v1/management/deliveries?cursor="+cursorAt(micros), mgmt, nil).
			want(t, http.StatusBadRequest, CodeInvalidRequest)
	}
	// A well-formed cursor still pages.
	b.call(http.MethodGet, "/v1/management/deliveries?cursor="+cursorAt(time.Now().UnixMicro()), mgmt, nil).want(t, http.StatusOK, "")
	if n := b.count(`SELECT count(*) FROM api_keys WHERE account_id = $1 AND revoked_at IS NOT NULL AND kind = 'standard'`, acct); n != 0 {
		t.Errorf("%d keys revoked by garbage ids", n)
	}
}

// cursorAt is a delivery-list cursor of the shape the webhook package issues (base64url of the
// Unix microseconds and an id), for any time.
func cursorAt(micros int64) string {
	b := make([]byte, 8, 24)
	binary.BigEndian.PutUint64(b, uint64(micros))
	id := uuid.New()
	return base64.RawURLEncoding.EncodeToString(append(b, id[:]...))
}
