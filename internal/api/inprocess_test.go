package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mailvet/mailvet/internal/auth"
	"github.com/mailvet/mailvet/internal/plan"
)

// ServeAs stands in for the key look-up only: the principal's kind is still checked against the
// route family, it serves nothing outside /v1/email/, and without it a request still needs a key.
func TestServeAsChecksKindAndScope(t *testing.T) {
	t.Parallel()
	s := newBareServer(t)
	serveAs := func(path string, p auth.Principal) (int, map[string]any) {
		rec := httptest.NewRecorder()
		s.ServeAs(rec, httptest.NewRequest(http.MethodGet, path, nil), p)
		var body map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		return rec.Code, body
	}
	mgmt := auth.Principal{AccountID: "0b6f7d8e-3333-4c3e-9a55-000000000001", Tier: plan.Free, Kind: auth.KindProvisioning}
	if code, body := serveAs("/v1/email/jobs/0b6f7d8e-3333-4c3e-9a55-000000000002", mgmt); code != http.StatusForbidden || body["error"] != CodeWrongKeyType {
		t.Fatalf("provisioning principal on the verify API: %d %v", code, body)
	}
	std := mgmt
	std.Kind = auth.KindStandard
	if code, _ := serveAs("/v1/management/account", std); code != http.StatusInternalServerError {
		t.Fatalf("ServeAs outside /v1/email/: %d", code)
	}
	resp, body := do(t, s.Handler(), http.MethodGet, "/v1/email/jobs/0b6f7d8e-3333-4c3e-9a55-000000000002")
	if resp.StatusCode != http.StatusUnauthorized || body["error"] != CodeMissingAPIKey {
		t.Fatalf("a network request without a key: %d %v", resp.StatusCode, body)
	}
}
