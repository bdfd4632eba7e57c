package client_test

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/client"
)

// The client's types are the API's schemas (internal/api/openapi.json, served as /openapi.json):
// every property is a field, every field a property, and a property the schema allows to be null
// is null again when the client's value is written back out (as `mailvet … --json` does), so a
// consumer of the client sees what the API sent.
func TestTypesMatchTheOpenAPISchemas(t *testing.T) {
	raw, err := os.ReadFile("../internal/api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for schema, v := range map[string]any{
		"VerifyResult": client.Result{}, "JobResult": client.JobResult{}, "Job": client.Job{},
		"AsyncAccepted": client.Accepted{}, "Limits": client.Limits{}, "Account": client.Account{},
		"Key": client.Key{}, "CreatedKey": client.CreatedKey{}, "KeyList": client.KeyList{},
		"DailyUsage": client.DailyUsage{}, "UsageSummary": client.UsageSummary{},
		"DeliveryAttempt": client.DeliveryAttempt{}, "Delivery": client.Delivery{},
		"DeliveryPage": client.DeliveryPage{}, "List": client.List{}, "ListPage": client.ListPage{},
		"AuditEvent": client.AuditEvent{}, "AuditPage": client.AuditPage{},
		"HistoryDeleted": client.HistoryDeleted{},
	} {
		s, ok := doc.Components.Schemas[schema]
		if !ok {
			t.Errorf("no schema %s", schema)
			continue
		}
		fields := jsonFields(reflect.TypeOf(v))
		props := slices.Sorted(func(yield func(string) bool) {
			for p := range s.Properties {
				if !yield(p) {
					return
				}
			}
		})
		if !slices.Equal(fields, props) {
			t.Errorf("%s: the client's %T has %v, the schema %v", schema, v, fields, props)
		}
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%T: %v", v, err)
		}
		var zero map[string]json.RawMessage
		if err := json.Unmarshal(out, &zero); err != nil {
			t.Fatalf("%T: %v", v, err)
		}
		for p, ps := range s.Properties {
			var prop struct {
				Type json.RawMessage `json:"type"`
			}
			if err := json.Unmarshal(ps, &prop); err != nil {
				t.Fatal(err)
			}
			got, present := zero[p]
			// "null" as a type, or an anyOf branch of type null.
			nullable := strings.Contains(string(ps), `"null"`)
			scalar := slices.Contains([]string{`"string"`, `"number"`, `"integer"`, `"boolean"`}, string(prop.Type))
			switch {
			case nullable && present && string(got) != "null":
				t.Errorf("%s.%s may be null, but the client writes its empty value as %s", schema, p, got)
			case scalar && string(got) == "null":
				t.Errorf("%s.%s is never null, but the client writes its empty value as null", schema, p)
			}
		}
	}
}

// jsonFields is the sorted JSON names of t's fields, those of embedded structs included.
func jsonFields(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported():
		case f.Anonymous && name == "":
			names = append(names, jsonFields(f.Type)...)
		case name != "":
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// A list read from the API and written back out is what the API sent, nulls and all (the
// example of docs/lists.md, "Uploading").
func TestListRoundTrip(t *testing.T) {
	const sent = `{"id":"019ab3c2-0000-7000-8000-000000000001","name":"june-campaign","state":"running","format":"csv",
 "columns":["first","Email Address","city"],"email_column":"Email Address",
 "rows":48213,"unique":47950,"verified":0,"progress":0,"rate_per_second":0,"eta_seconds":null,
 "counts":{"by_status":{},"by_reason":{}},"webhook_url":"https://hooks.example.com/lists","error":null,
 "created_at":"2026-11-23T02:10:04Z","started_at":"2026-11-23T02:10:06Z","finished_at":null,
 "expires_at":null,"results_url":"https://api.mailvet.example/v1/email/lists/019ab3c2-0000-7000-8000-000000000001/results"}`
	var page client.ListPage
	if err := json.Unmarshal([]byte(`{"lists":[`+sent+`],"next_cursor":null}`), &page); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(page)
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if err := json.Unmarshal([]byte(`{"lists":[`+sent+`],"next_cursor":null}`), &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("written back out:\n%s\nsent:\n%s", out, sent)
	}
}
