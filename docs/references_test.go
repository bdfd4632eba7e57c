package docs

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docReference matches a comment's reference to a section of the docs: (docs/api.md, "Reasons").
var docReference = regexp.MustCompile(`docs/([a-z0-9_-]+\.md)[,:]?\s+"([^"]+)"`)

// runIn matches a paragraph's or list item's bold run-in title: "**Waiting for a slot.** When…".
var runIn = regexp.MustCompile(`^(?:\d+\. |- )?\*\*([^*]+?)[.:]?\*\*`)

// headings returns the titles of a Markdown file's sections, outside code blocks, without their
// backticks: the text of every heading and every bold run-in title.
func headings(t *testing.T, name string) []string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repoRoot, "docs", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fenced := false
	for _, l := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if fenced {
			continue
		}
		if strings.HasPrefix(l, "#") {
			out = append(out, strings.ReplaceAll(strings.TrimSpace(strings.TrimLeft(l, "#")), "`", ""))
		} else if m := runIn.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			out = append(out, strings.ReplaceAll(m[1], "`", ""))
		}
	}
	return out
}

// hasSection reports whether a heading is section, or section followed by a parenthesis
// ("1. Syntax" names "1. Syntax (verify/syntax)").
func hasSection(heads []string, section string) bool {
	for _, h := range heads {
		if h == section || strings.HasPrefix(h, section+" (") {
			return true
		}
	}
	return false
}

// TestCommentDocReferencesResolve checks every reference of the form (docs/<file>.md, "<Section>")
// in the comments of the module's Go files: the file exists and has a section with that title (a
// heading, or a paragraph's bold run-in title), so that a reader who follows a comment finds it,
// and a renamed heading shows up here.
func TestCommentDocReferencesResolve(t *testing.T) {
	t.Parallel()
	heads := map[string][]string{}
	checked := 0
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != repoRoot && (strings.HasPrefix(n, ".") || n == "node_modules" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		for _, cg := range f.Comments {
			// A reference may break across the lines of a comment.
			text := strings.Join(strings.Fields(cg.Text()), " ")
			for _, m := range docReference.FindAllStringSubmatch(text, -1) {
				file, section := m[1], m[2]
				if _, ok := heads[file]; !ok {
					if _, err := os.Stat(filepath.Join(repoRoot, "docs", file)); err != nil {
						t.Errorf("%s: (docs/%s, %q): no such file", rel, file, section)
						heads[file] = nil
						continue
					}
					heads[file] = headings(t, file)
				}
				checked++
				if !hasSection(heads[file], section) {
					t.Errorf("%s: (docs/%s, %q): docs/%s has no such section", rel, file, section, file)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no reference found: the pattern no longer matches how comments cite the docs")
	}
}
