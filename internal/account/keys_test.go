package account

import (
	"strings"
	"testing"
)

func TestCheckLabel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		label string
		ok    bool
	}{
		{"production", true},
		{"ünïcödé ✓", true},
		{strings.Repeat("é", MaxLabelLen), true},
		{strings.Repeat("é", MaxLabelLen+1), false},
		{"", false},
		{" \t ", false},
		{"line\nbreak", false},
		{"bell\a", false},
		{"bad \xff utf8", false},
		{"prod\u202euction", false}, // right-to-left override
		{"team \u2067a\u2069", false},
		{"👩\u200d💻 dev", true}, // a zero-width joiner in an emoji is fine
	}
	for _, tt := range tests {
		if err := CheckLabel(tt.label); (err == nil) != tt.ok {
			t.Errorf("CheckLabel(%q) = %v, want ok=%v", tt.label, err, tt.ok)
		}
	}
}
