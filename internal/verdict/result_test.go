package verdict

import (
	"encoding/json"
	"testing"
)

func TestConfidenceTable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		o          Outcome
		status     Status
		valid      bool
		confidence float64
	}{
		{OutcomeDeliverable, StatusDeliverable, true, 0.95},
		{OutcomeDeliverableRole, StatusDeliverable, true, 0.90},
		{OutcomeCatchAll, StatusCatchAll, false, 0.60},
		{OutcomeSMTPBlocked, StatusUnknown, false, 0.75},
		{OutcomeUnknown, StatusUnknown, false, 0.50},
		{OutcomeUndeliverable, StatusUndeliverable, false, 0.02},
		{OutcomeInvalid, StatusInvalid, false, 0},
	}
	for _, c := range cases {
		var r Result
		r.Apply(c.o)
		if r.Status != c.status || r.Valid != c.valid || r.Confidence != c.confidence {
			t.Errorf("outcome %d: got %s/%v/%v, want %s/%v/%v", c.o, r.Status, r.Valid, r.Confidence, c.status, c.valid, c.confidence)
		}
	}
}

// Nullable fields serialise as null, every field of the verify result is present.
func TestResultJSONShape(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(Result{Email: "a@b.example"})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"email", "valid", "status", "confidence", "failed_check", "disposable", "role",
		"free_provider", "catch_all", "smtp_blocked", "mx_found", "mx_host", "suggestion", "latency_ms"} {
		if _, ok := m[f]; !ok {
			t.Errorf("field %s missing from %s", f, b)
		}
	}
	for _, f := range []string{"failed_check", "mx_host", "suggestion"} {
		if m[f] != nil {
			t.Errorf("%s = %v, want null", f, m[f])
		}
	}
	var r Result
	r.Fail(CheckNoMX, OutcomeInvalid)
	b, _ = json.Marshal(r)
	_ = json.Unmarshal(b, &m)
	if m["failed_check"] != "no_mx" {
		t.Errorf("failed_check = %v", m["failed_check"])
	}
}
