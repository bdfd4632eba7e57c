package docs

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// Every relative link in every Markdown file of the repository reaches a file that exists, and
// every #anchor a heading (or an <a id/name>) of the page it names, as GitHub renders them.
func TestMarkdownLinks(t *testing.T) {
	t.Parallel()
	files := markdownFiles(t)
	if len(files) < 5 {
		t.Fatalf("only %d Markdown files found: %v", len(files), files)
	}
	anchors := map[string]map[string]bool{} // file -> anchors, read once
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := pageAnchors(t, path)
		anchors[path] = a
		return a
	}
	checked := 0
	for _, file := range files {
		for _, l := range pageLinks(t, file) {
			target, fragment, _ := strings.Cut(l.target, "#")
			if isExternal(target) {
				continue
			}
			checked++
			path := file
			if target != "" {
				path = filepath.Join(filepath.Dir(file), filepath.FromSlash(target))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link to %q: no such file", file, l.line, l.target)
					continue
				}
			}
			if fragment == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if !anchorsOf(path)[fragment] {
				t.Errorf("%s:%d: link to %q: %s has no heading with anchor #%s", file, l.line, l.target, path, fragment)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link checked")
	}
}

// The anchors follow GitHub's rules: the heading's text, lowercased, with everything but letters,
// digits, spaces, hyphens and underscores removed and spaces turned into hyphens; a repeated one
// gets -1, -2….
func TestSlug(t *testing.T) {
	t.Parallel()
	seen := map[string]int{}
	for _, c := range []struct{ heading, want string }{
		{"The demo world (`make demo`)", "the-demo-world-make-demo"},
		{"Verifying webhook signatures", "verifying-webhook-signatures"},
		{"A private Postgres for development", "a-private-postgres-for-development"},
		{"`bin/api admin`", "binapi-admin"},
		{"Limits — and metering", "limits--and-metering"},
		{"[Bulk lists](lists.md)", "bulk-lists"},
		{"Verifying webhook signatures", "verifying-webhook-signatures-1"},
		{"invalid_email", "invalid_email"},
	} {
		if got := slug(c.heading, seen); got != c.want {
			t.Errorf("slug(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}

// markdownFiles lists the repository's Markdown files that git tracks or would track (so no
// node_modules and nothing git-ignored).
func markdownFiles(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", "..", "ls-files", "--cached", "--others", "--exclude-standard", "*.md").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []string
	for _, f := range strings.Fields(string(out)) {
		if _, err := os.Stat(filepath.Join("..", f)); err == nil {
			files = append(files, filepath.Join("..", filepath.FromSlash(f)))
		}
	}
	return files
}

type link struct {
	line   int
	target string
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	inlineCode = regexp.MustCompile("`+[^`]*`+")
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	heading    = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	mdLink     = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
)

// pageLinks returns the link targets of a Markdown file, outside code blocks and code spans.
func pageLinks(t *testing.T, path string) []link {
	t.Helper()
	var links []link
	scanLines(t, path, func(n int, line string) {
		line = inlineCode.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			links = append(links, link{n, m[1]})
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			links = append(links, link{n, m[1]})
		}
	})
	return links
}

// pageAnchors returns the anchors of a Markdown file's headings and HTML anchors.
func pageAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	anchors := map[string]bool{}
	seen := map[string]int{}
	scanLines(t, path, func(_ int, line string) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			anchors[slug(m[2], seen)] = true
		}
	})
	return anchors
}

// scanLines calls fn for every line of path that is not inside a fenced code block.
func scanLines(t *testing.T, path string, fn func(n int, line string)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	inFence := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if !inFence {
			fn(n, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// slug is GitHub's anchor for a heading's text; seen counts the anchors of the page so far.
func slug(text string, seen map[string]int) string {
	text = mdLink.ReplaceAllString(text, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	s := b.String()
	n := seen[s]
	seen[s] = n + 1
	if n > 0 {
		s = fmt.Sprintf("%s-%d", s, n)
	}
	return s
}

func isExternal(target string) bool {
	return strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:")
}
