package signals

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestIsRole(t *testing.T) {
	t.Parallel()
	cases := []struct {
		local string
		want  bool
		why   string
	}{
		{"admin", true, "classic role"},
		{"info", true, "classic role"},
		{"support", true, "classic role"},
		{"noreply", true, "notification address"},
		{"no-reply", true, "notification address with a hyphen"},
		{"sales", true, "department"},
		{"postmaster", true, "RFC 2142 mailbox"},
		{"abuse", true, "RFC 2142 mailbox"},
		{"Admin", true, "case is ignored"},
		{"INFO", true, "case is ignored"},
		{"support+billing", true, "a +tag is ignored"},
		{"Support+Billing", true, "a +tag and case are ignored"},
		{"info+", true, "an empty +tag is ignored"},
		{"john", false, "a person"},
		{"jane.doe", false, "a person"},
		{"admin.john", false, "a role word inside a personal local part"},
		{"johnadmin", false, "a role word as a suffix"},
		{"+admin", false, "only a tag"},
		{"", false, "empty"},
		{strings.Repeat("a", 300), false, "longer than any list entry"},
	}
	for _, tc := range cases {
		if got := IsRole(tc.local); got != tc.want {
			t.Errorf("IsRole(%q) = %v; want %v (%s)", tc.local, got, tc.want, tc.why)
		}
	}
}

func TestIsFreeProvider(t *testing.T) {
	t.Parallel()
	cases := []struct {
		domain string
		want   bool
		why    string
	}{
		{"gmail.com", true, "freemail list"},
		{"yahoo.com", true, "freemail list"},
		{"outlook.com", true, "freemail list"},
		{"hotmail.co.uk", true, "freemail list"},
		{"gmx.de", true, "freemail list"},
		{"mail.ru", true, "freemail list"},
		{"qq.com", true, "freemail list"},
		{"proton.me", true, "added by Mailvet"},
		{"pm.me", true, "added by Mailvet"},
		{"tuta.io", true, "added by Mailvet"},
		{"tutanota.com", true, "added by Mailvet"},
		{"hey.com", true, "added by Mailvet"},
		{"GMail.COM", true, "case is ignored"},
		{"gmail.com.", true, "a trailing dot is ignored"},
		{"mailinator.com", false, "disposable domains are removed from the free list"},
		{"yopmail.com", false, "disposable domains are removed from the free list"},
		{"example-corp.com", false, "a company domain"},
		{"mail.gmail.com", false, "the match is exact, not by suffix"},
		{"", false, "empty"},
	}
	for _, tc := range cases {
		if got := IsFreeProvider(tc.domain); got != tc.want {
			t.Errorf("IsFreeProvider(%q) = %v; want %v (%s)", tc.domain, got, tc.want, tc.why)
		}
	}
}

func TestListsAreNotEmpty(t *testing.T) {
	t.Parallel()
	if len(roles) < 500 || len(free) < 4000 {
		t.Fatalf("roles has %d entries and free %d; the generated lists look truncated", len(roles), len(free))
	}
}

func TestSuggest(t *testing.T) {
	t.Parallel()
	cases := []struct {
		domain, want, why string
	}{
		{"gmial.com", "gmail.com", "swapped letters"},
		{"gmail.con", "gmail.com", "top-level typo"},
		{"GMIAL.COM", "gmail.com", "case is ignored"},
		{"yaho.com", "yahoo.com", "second-level typo against mailcheck's second-level names"},
		{"hotmail.co.uj", "hotmail.co.uk", "top-level typo of a two-label TLD"},
		{"comcast.nt", "comcast.net", "close to a default domain"},
		{"gmail.com", "", "already correct"},
		{"yahoo.co.uk", "", "a known second-level name with a known top-level domain"},
		{"example.com", "", "nothing close"},
		{"acme-industries.com", "", "nothing close"},
		{"hey.com", "", "a free provider is never corrected (mailcheck says sky.com)"},
		{"proton.me", "", "a free provider is never corrected (mailcheck says proton.de)"},
		{"pm.me", "", "a free provider is never corrected (mailcheck says gmx.de)"},
		{"", "", "empty"},
	}
	for _, tc := range cases {
		if got := Suggest(tc.domain); got != tc.want {
			t.Errorf("Suggest(%q) = %q; want %q (%s)", tc.domain, got, tc.want, tc.why)
		}
	}
}

// TestMailcheckGolden holds the port to the real mailcheck.js: testdata/golden.json is its
// output over a few hundred domains (data/mailcheck-golden.js, run by `make data`).
func TestMailcheckGolden(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Mailcheck string
		Cases     []struct{ Domain, Suggestion string }
	}
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	if golden.Mailcheck != "1.1.1" || len(golden.Cases) < 200 {
		t.Fatalf("golden file is for mailcheck %q with %d cases; want 1.1.1 and at least 200", golden.Mailcheck, len(golden.Cases))
	}
	for _, c := range golden.Cases {
		if got := mailcheck(c.Domain); got != c.Suggestion {
			t.Errorf("mailcheck(%q) = %q; mailcheck.js says %q", c.Domain, got, c.Suggestion)
		}
	}
}

func TestSift3(t *testing.T) {
	t.Parallel()
	// mailcheck's sift3Distance (run under node) for these pairs, doubled.
	cases := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 6},
		{"abc", "", 6},
		{"gmail.com", "gmail.com", 0},
		{"gmial.com", "gmail.com", 4},
		{"yaho", "yahoo", 1},
		{"a", "gmx", 4},
	}
	for _, tc := range cases {
		if got := sift3x2(tc.a, tc.b); got != tc.want {
			t.Errorf("sift3x2(%q, %q) = %d; want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestLocalSignalsDoNotAllocate(t *testing.T) {
	n := testing.AllocsPerRun(100, func() {
		IsRole("Support+billing")
		IsFreeProvider("GMail.com")
		Suggest("example-corp.com")
		Suggest("gmail.con")
	})
	// Suggest allocates only to build a corrected domain by replacement ("gmail.con" → the
	// top-level domain replaced), which is once per such call.
	if n > 1 {
		t.Fatalf("the signals allocate %.0f times; want at most 1", n)
	}
}

func BenchmarkSuggest(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Suggest("example-corp.com")
	}
}

func BenchmarkSuggestTypo(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if Suggest("gmial.com") != "gmail.com" {
			b.Fatal("no suggestion for gmial.com")
		}
	}
}

func TestIsProvider(t *testing.T) {
	for d, want := range map[string]bool{
		"gmail.com": true, "proton.me": true, "comcast.net": true, "web.de": true, "yahoo.ca": true,
		"hotmail.de": true, "Yahoo.co.uk.": true, "company.de": false, "acme.test": false,
		"example-corp.com": false, "yahoo.test": false, "": false,
	} {
		if got := IsProvider(d); got != want {
			t.Errorf("IsProvider(%q) = %v, want %v", d, got, want)
		}
	}
}
