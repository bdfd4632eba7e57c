package dashboard

import "testing"

// The playground shows smtp_reply as the server wrote it, and every other field as its value.
func TestPlaygroundFieldValues(t *testing.T) {
	for _, c := range []struct{ name, raw, want string }{
		{"smtp_reply", `{"code":550,"enhanced_code":"5.1.1","text":"No such user here"}`, "550 5.1.1 No such user here"},
		{"smtp_reply", `{"code":421,"enhanced_code":null,"text":"Try later"}`, "421 Try later"},
		{"smtp_reply", `{"code":250,"enhanced_code":"2.0.0","text":""}`, "250 2.0.0"},
		{"smtp_reply", `null`, "null"},
		{"status", `"deliverable"`, "deliverable"},
		{"confidence", `0.95`, "0.95"},
	} {
		if got := fieldValue(c.name, []byte(c.raw)); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.name, c.raw, got, c.want)
		}
	}
}
