package listname

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for name, want := range map[string]string{
		"":                       "",
		"June leads, 50% off":    "",
		"Ünïcödé 名单 📧":           "",
		strings.Repeat("n", 200): "",
		strings.Repeat("n", 201): "is longer than 200 characters",
		strings.Repeat("é", 201): "is longer than 200 characters",
		"line1\nline2":           "control character",
		"tab\there":              "control character",
		"\x1b[31mRED":            "control character",
		"a\x00b":                 "control character",
		"a\u0085b":               "control character", // NEL, a C1 control
		"\u202egpj.exe":          "bidirectional control",
		"a\u2067b":               "bidirectional control", // first-strong isolate
		"bad \xff byte":          "not valid UTF-8",
	} {
		err := Check(name)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("Check(%q) = %v, want %q", name, err, want)
		}
	}
}

func TestFromFile(t *testing.T) {
	for path, want := range map[string]string{
		"leads.csv":                       "leads.csv",
		"/home/ann/lists/leads.csv":       "leads.csv",
		`/home/ann/q1\q2 leads.csv`:       `q1\q2 leads.csv`, // a backslash is a character of a Unix file name
		"june\nmay.csv":                   "junemay.csv",
		"\u202egpj.exe":                   "gpj.exe",
		"\x1b[31m.csv":                    "[31m.csv",
		"bad\xff.csv":                     "bad.csv",
		"  spaced.csv ":                   "spaced.csv",
		"\n":                              "",
		strings.Repeat("é", 250) + ".csv": strings.Repeat("é", 200),
	} {
		got := FromFile(path)
		if got != want {
			t.Errorf("FromFile(%q) = %q, want %q", path, got, want)
		}
		if err := Check(got); err != nil {
			t.Errorf("FromFile(%q) = %q, which Check refuses: %v", path, got, err)
		}
	}
}

func TestFromBrowser(t *testing.T) {
	for name, want := range map[string]string{
		"leads.csv":              "leads.csv",
		`C:\Users\ann\leads.csv`: "leads.csv",
		"C:/Users/ann/leads.csv": "leads.csv",
		"May \u202eleads.csv":    "May leads.csv",
		"dir/":                   "",
		"\x00":                   "",
	} {
		if got := FromBrowser(name); got != want {
			t.Errorf("FromBrowser(%q) = %q, want %q", name, got, want)
		}
	}
}
