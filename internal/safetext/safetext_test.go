package safetext

import (
	"strings"
	"testing"
)

func TestEscapeAndStrip(t *testing.T) {
	for s, want := range map[string][2]string{
		"June leads, 50% \"off\" ü 名单": {"June leads, 50% \"off\" ü 名单", "June leads, 50% \"off\" ü 名单"},
		"a\x00b":                       {`a\u0000b`, "ab"},
		"a\nb\tc":                      {`a\u000ab\u0009c`, "abc"},
		"\x1b[31mRED":                  {`\u001b[31mRED`, "[31mRED"},
		"a\u0085b":                     {`a\u0085b`, "ab"}, // NEL, a C1 control
		"\u202egpj.exe":                {`\u202egpj.exe`, "gpj.exe"},
		"a\u2067b\u200fc":              {`a\u2067b\u200fc`, "abc"}, // an isolate and a mark
	} {
		if got := Escape(s); got != want[0] {
			t.Errorf("Escape(%q) = %q, want %q", s, got, want[0])
		}
		if got := Strip(s); got != want[1] {
			t.Errorf("Strip(%q) = %q, want %q", s, got, want[1])
		}
	}
}

func TestCut(t *testing.T) {
	for s, want := range map[string]string{
		"":                            "",
		strings.Repeat("a", 64):       strings.Repeat("a", 64),
		strings.Repeat("a", 65):       strings.Repeat("a", 64) + "…",
		strings.Repeat("é", 40):       strings.Repeat("é", 32) + "…",       // 80 bytes: 64 is a character boundary
		"a" + strings.Repeat("é", 40): "a" + strings.Repeat("é", 31) + "…", // 64 falls inside an é
	} {
		if got := Cut(s); got != want {
			t.Errorf("Cut(%q) = %q, want %q", s, got, want)
		}
	}
}
