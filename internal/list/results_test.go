package list

import (
	"bufio"
	"encoding/json"
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
