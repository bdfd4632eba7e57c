package list

import (
	"bufio"
	"encoding/json"
	"github.com/mailvet/mailvet/internal/verdict"
	"strings"
	"testing"
)

// An NDJSON download's lines are objects whose every key is unique: a CSV column named result (a
// file exported from another verification service), two columns of one name, or an empty name
// would otherwise make a JSON parser drop one of the fields — most keep the last of equal keys.
func TestNDJSONDownloadKeysAreUnique(t *testing.T) {
	cases := []struct {
		name string
		list List
		cols []string
		want string
	}{
		{"csv: result, a repeated name, an empty name",
			List{Format: CSV, Columns: []string{"email", "result", "name", "name", "", "result_2"}},
			[]string{"ann@acme.test", "valid", "Ann", "Lee", "x", "old"},
			`{"email":"ann@acme.test","result_3":"valid","name":"Ann","name_2":"Lee","column_5":"x","result_2":"old","result":{"ok":1}}`},
		{"csv: plain header unchanged",
			List{Format: CSV, Columns: []string{"first", "Email Address"}},
			[]string{"Ann", "ann@acme.test"},
			`{"first":"Ann","Email Address":"ann@acme.test","result":{"ok":1}}`},
		{"ndjson: its own result field is renamed, values as uploaded",
			List{Format: NDJSON},
			[]string{`{"email":"ann@acme.test", "result" : {"n": 1.50}, "result_2":[1,2]}`},
			`{"email":"ann@acme.test","result_3":{"n": 1.50},"result_2":[1,2],"result":{"ok":1}}`},
		{"ndjson: a result field written with an escape is renamed too",
			List{Format: NDJSON},
			[]string{`{"email":"ann@acme.test","r\u0065sult":"theirs"}`},
			`{"email":"ann@acme.test","result_2":"theirs","result":{"ok":1}}`},
		{"ndjson: result as a value or nested stays as uploaded",
			List{Format: NDJSON},
			[]string{`{"email":"ann@acme.test","tag":"result","meta":{"result":1}}`},
			`{"email":"ann@acme.test","tag":"result","meta":{"result":1},"result":{"ok":1}}`},
		{"text", List{Format: Text}, []string{"ann@acme.test"}, `{"email":"ann@acme.test","result":{"ok":1}}`},
	}
	for _, c := range cases {
		var out strings.Builder
		w := bufio.NewWriter(&out)
		e := exporter{list: c.list, w: w, keys: jsonKeys(c.list)}
		if err := e.jsonRow(c.cols, []byte(`{"ok":1}`)); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		w.Flush()
		got := strings.TrimSuffix(out.String(), "\n")
		if got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
		// Every key once: decoding into a map keeps as many keys as the line has.
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(got), &m); err != nil {
			t.Errorf("%s: not JSON: %v", c.name, err)
		}
		dec := json.NewDecoder(strings.NewReader(got))
		dec.Token()
		n := 0
		for dec.More() {
			dec.Token()
			var v json.RawMessage
			dec.Decode(&v)
			n++
		}
		if n != len(m) {
			t.Errorf("%s: %d fields, %d distinct keys", c.name, n, len(m))
		}
		if string(m["result"]) != `{"ok":1}` {
			t.Errorf("%s: result %s", c.name, m["result"])
		}
	}
}

// A CSV download flattens the result's smtp_reply into smtp_code, smtp_enhanced_code and
// smtp_text, empty when there was no reply; every row has a value for every result column.
func TestResultValuesCarryTheReply(t *testing.T) {
	enh := "5.1.1"
	withReply := &verdict.Result{Status: verdict.StatusUndeliverable, Reason: verdict.ReasonMailboxUnknown,
		SMTPReply: &verdict.SMTPReply{Code: 550, EnhancedCode: &enh, Text: `<bob@acme.test>: Recipient address rejected: "User unknown", sorry`}}
	noEnhanced := &verdict.Result{Status: verdict.StatusUnknown, Reason: verdict.ReasonTemporarilyUnavail,
		SMTPReply: &verdict.SMTPReply{Code: 421, Text: "Service not available"}}
	noReply := &verdict.Result{Status: verdict.StatusInvalid, Reason: verdict.ReasonInvalidSyntax}
	for _, c := range []struct {
		r    *verdict.Result
		want [3]string
	}{
		{withReply, [3]string{"550", "5.1.1", `<bob@acme.test>: Recipient address rejected: "User unknown", sorry`}},
		{noEnhanced, [3]string{"421", "", "Service not available"}},
		{noReply, [3]string{"", "", ""}},
		{nil, [3]string{"", "", ""}},
	} {
		vals := resultValues(c.r)
		if len(vals) != len(ResultColumns) {
			t.Fatalf("%d values for %d columns", len(vals), len(ResultColumns))
		}
		cols := map[string]string{}
		for i, name := range ResultColumns {
			cols[name] = vals[i]
		}
		if got := [3]string{cols["smtp_code"], cols["smtp_enhanced_code"], cols["smtp_text"]}; got != c.want {
			t.Errorf("%+v: smtp columns %q, want %q", c.r, got, c.want)
		}
	}
}

// A CSV download of an NDJSON upload shows, in its email column, the address that was verified:
// the line's "email" field, matched exactly as the upload matched it, never an "Email" or "EMAIL"
// beside it (encoding/json's struct decoding would take whichever of them comes last).
func TestCSVOfNDJSONShowsTheVerifiedEmail(t *testing.T) {
	e := exporter{list: List{Format: NDJSON}}
	for _, line := range []string{
		`{"email":"ann@acme.test","Email":"bob@acme.test"}`,
		`{"EMAIL":"bob@acme.test","email":"ann@acme.test"}`,
		`{"Email":"bob@acme.test","\u0065mail":"ann@acme.test"}`,
	} {
		if got := e.inputValues([]string{line}); len(got) != 1 || got[0] != "ann@acme.test" {
			t.Errorf("%s: %q, want the email field's ann@acme.test", line, got)
		}
	}
}
