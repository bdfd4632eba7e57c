package list_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/list"
)

// An NDJSON address is checked after its escapes are decoded: an escaped NUL, which Postgres
// cannot store, and an escaped lone surrogate, which encoding/json would turn into U+FFFD, are
// refused with the line, like the raw bytes they stand for.
func TestNDJSONEscapesInEmailAreRefusedWithTheLine(t *testing.T) {
	t.Parallel()
	const good = "{\"email\":\"a@x.test\"}\n"
	for _, c := range []struct {
		name, line, says string
	}{
		{"escaped NUL", `{"email":"ann\u0000@x.test"}`, "NUL"},
		{"lone high surrogate", `{"email":"ann\ud800@x.test"}`, "surrogate"},
		{"lone low surrogate", `{"email":"ann\uDC00@x.test"}`, "surrogate"},
		{"high surrogate and no low one", `{"email":"ann\ud800\u0041@x.test", "n": 1}`, "surrogate"},
	} {
		_, _, err := readAll(t, list.NDJSON, "", good+"\n"+c.line+"\n"+good)
		var in *list.InputError
		if !errors.As(err, &in) || in.Line != 3 || !strings.Contains(in.Msg, c.says) || !strings.Contains(in.Msg, `"email"`) {
			t.Errorf("%s: %v, want an InputError on line 3 about the email's %s", c.name, err, c.says)
		}
	}
	// A field given twice: which "email" was meant is a guess (encoding/json takes the last).
	for _, line := range []string{`{"email":"ann@x.test","email":"bob@x.test"}`, `{"email":"ann@x.test","crm":1,"crm":2}`,
		`{"email":"ann@x.test","note":"\ud800"}`} {
		_, _, err := readAll(t, list.NDJSON, "", good+line+"\n")
		var in *list.InputError
		if !errors.As(err, &in) || in.Line != 2 || !strings.Contains(in.Msg, "more than once") {
			t.Errorf("%s: %v, want an InputError on line 2", line, err)
		}
	}
	// Escapes of real characters are addresses like any other.
	_, rows, err := readAll(t, list.NDJSON, "", `{"email":"\ud83d\ude00@x.test"}`+"\n"+`{"email":"\ufffd@x.test"}`+"\n")
	if err != nil || len(rows) != 2 || rows[0].Email != "\U0001F600@x.test" || rows[1].Email != "\uFFFD@x.test" {
		t.Errorf("valid escapes: rows %+v, err %v", rows, err)
	}
}
