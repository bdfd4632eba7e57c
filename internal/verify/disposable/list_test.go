package disposable

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// embeddedList is loaded once: every test that needs the plain embedded list shares it.
var embeddedList = func() *List {
	l, err := Load("", "")
	if err != nil {
		panic(err)
	}
	return l
}()

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEmbeddedListSize(t *testing.T) {
	t.Parallel()
	if n := embeddedList.Len(); n < 150_000 {
		t.Fatalf("Len() = %d; the list must hold at least 150,000 domains", n)
	}
}

func TestIsDisposableEmbedded(t *testing.T) {
	t.Parallel()
	cases := []struct {
		domain string
		want   bool
		why    string
	}{
		{"mailinator.com", true, "listed domain"},
		{"guerrillamail.com", true, "listed domain"},
		{"yopmail.com", true, "listed domain"},
		{"10minutemail.com", true, "listed domain"},
		{"a.mailinator.com", true, "subdomain of a listed domain"},
		{"a.b.c.mailinator.com", true, "deep subdomain of a listed domain"},
		{"MAILINATOR.COM", true, "case is ignored"},
		{"Sub.Mailinator.Com", true, "case is ignored on subdomains"},
		{"mailinator.com.", true, "a trailing dot is ignored"},
		{"gmail.com", false, "large free provider"},
		{"outlook.com", false, "large free provider"},
		{"yahoo.com", false, "large free provider"},
		{"proton.me", false, "privacy provider, not throwaway"},
		{"example.com", false, "ordinary domain"},
		{"gmailinator.com", false, "suffix match is by whole labels"},
		{"mailinator.com.evil.org", false, "a listed domain as a prefix does not match"},
		{"com", false, "a TLD alone is never looked up"},
		{"", false, "empty input"},
		{".", false, "only a dot"},
		{"..", false, "only dots"},
	}
	for _, tc := range cases {
		t.Run(tc.why+"/"+tc.domain, func(t *testing.T) {
			t.Parallel()
			if got := embeddedList.IsDisposable(tc.domain); got != tc.want {
				t.Fatalf("IsDisposable(%q) = %v; want %v (%s)", tc.domain, got, tc.want, tc.why)
			}
		})
	}
}

// TestEveryEmbeddedDomainIsFound walks the embedded file, so a bug in the hash table (a lost
// entry on a collision chain, say) cannot hide behind a handful of hand-picked domains.
func TestEveryEmbeddedDomainIsFound(t *testing.T) {
	t.Parallel()
	n := 0
	for _, line := range strings.Split(embedded, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		n++
		if !embeddedList.IsDisposable(line) {
			t.Fatalf("IsDisposable(%q) = false for a domain of domains.txt", line)
		}
	}
	if n != embeddedList.Len() {
		t.Fatalf("domains.txt has %d domains but Len() = %d; the file should have no duplicates", n, embeddedList.Len())
	}
}

func TestEmbeddedFileIsSortedAndNormalised(t *testing.T) {
	t.Parallel()
	prev := ""
	for _, line := range strings.Split(embedded, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		if line <= prev {
			t.Fatalf("domains.txt is not sorted and deduplicated: %q after %q", line, prev)
		}
		prev = line
		if d, err := normalize(line); err != nil || d != line {
			t.Fatalf("domains.txt line %q normalises to %q, %v", line, d, err)
		}
	}
}

func TestOperatorFiles(t *testing.T) {
	t.Parallel()
	extra := writeFile(t, "extra.txt", `# our own blocklist

throwaway.example
*.wild.example
 Spaced.Example 
bücher-spam.de
mailinator.com
`)
	allow := writeFile(t, "allow.txt", `# customers who use a listed domain for real mail
good.mailinator.com
yopmail.com
throwaway.example
`)
	l, err := Load(extra, allow)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := l.Len(), embeddedList.Len()+4; got != want {
		t.Errorf("Len() = %d; want %d (four new domains, mailinator.com already listed)", got, want)
	}
	cases := []struct {
		domain string
		want   bool
		why    string
	}{
		{"spaced.example", true, "extra domain, trimmed and lowercased"},
		{"x.wild.example", true, "a wildcard entry blocks subdomains"},
		{"wild.example", true, "a wildcard entry blocks its base domain"},
		{"xn--bcher-spam-9db.de", true, "a Unicode entry is stored as A-labels"},
		{"throwaway.example", false, "the allow file wins over the extra file"},
		{"a.throwaway.example", false, "an allowed domain's subdomains are allowed too"},
		{"yopmail.com", false, "the allow file wins over the embedded list"},
		{"good.mailinator.com", false, "an allowed subdomain of a listed domain"},
		{"x.good.mailinator.com", false, "below an allowed subdomain"},
		{"bad.mailinator.com", true, "other subdomains stay blocked"},
		{"mailinator.com", true, "allowing a subdomain does not allow its parent"},
		{"gmail.com", false, "unlisted domain"},
	}
	for _, tc := range cases {
		if got := l.IsDisposable(tc.domain); got != tc.want {
			t.Errorf("IsDisposable(%q) = %v; want %v (%s)", tc.domain, got, tc.want, tc.why)
		}
	}
}

func TestOperatorFileErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		why, extra, allow, wantInErr string
	}{
		{"missing extra file", filepath.Join(t.TempDir(), "nope.txt"), "", "no such file"},
		{"missing allow file", "", filepath.Join(t.TempDir(), "nope.txt"), "no such file"},
		{"not a domain", writeFile(t, "bad.txt", "ok.example\nnot a domain\n"), "", "line 2"},
		{"single label", "", writeFile(t, "bad.txt", "# c\nlocalhost\n"), "line 2"},
	}
	for _, tc := range cases {
		if _, err := Load(tc.extra, tc.allow); err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
			t.Errorf("%s: Load error = %v; want one mentioning %q", tc.why, err, tc.wantInErr)
		}
	}
}

func TestIsDisposableDoesNotAllocate(t *testing.T) {
	for _, d := range []string{"a.b.mailinator.com", "Example.COM", "gmail.com"} {
		if n := testing.AllocsPerRun(100, func() { embeddedList.IsDisposable(d) }); n != 0 {
			t.Errorf("IsDisposable(%q) allocates %.0f times; want 0", d, n)
		}
	}
}

// heapOfLoad returns how much the heap grows to hold a freshly loaded embedded list.
func heapOfLoad(tb testing.TB) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l, err := Load("", "")
	if err != nil {
		tb.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(l)
	if after.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return after.HeapAlloc - before.HeapAlloc
}

// TestHeapBudget holds the list to its budget of 30 MB of heap (it is about 3 MB). Not
// parallel: other tests allocating at the same time would blur the measurement.
func TestHeapBudget(t *testing.T) {
	const budget = 30 << 20
	got := heapOfLoad(t)
	t.Logf("heap cost of the embedded list (%d domains): %.2f MB", embeddedList.Len(), float64(got)/(1<<20))
	if got > budget {
		t.Fatalf("the embedded list takes %d bytes of heap; the budget is %d", got, budget)
	}
}

func BenchmarkIsDisposable(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if embeddedList.IsDisposable("mail.example-corp.com") {
			b.Fatal("example-corp.com is not disposable")
		}
	}
}

func BenchmarkIsDisposableHit(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if !embeddedList.IsDisposable("a.b.mailinator.com") {
			b.Fatal("mailinator.com is disposable")
		}
	}
}

// BenchmarkLoad measures start-up cost and reports the heap the list takes as heap-MB.
func BenchmarkLoad(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load("", ""); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(heapOfLoad(b))/(1<<20), "heap-MB")
}
