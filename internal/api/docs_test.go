package api

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// TestErrorDocs fetches GET /docs/errors, the page every error body's docs field links to, and
// checks that each error code the API can return has a section there: an element whose id is the
// code, so that {MAILVET_PUBLIC_URL}/docs/errors#<code> opens it. The codes are read from this
// package's source (every Code* constant, and every code literal passed to Errorf), so a new code
// without a section in docs/errors.md fails here.
func TestErrorDocs(t *testing.T) {
	t.Parallel()
	s := newBareServer(t)
	req, _ := http.NewRequest(http.MethodGet, "/docs/errors", nil)
	resp, raw := serve(s.Handler(), req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /docs/errors: %d %s", resp.StatusCode, raw)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("content type %q, want text/html", ct)
	}
	assertMatchesSpec(t, req, resp.StatusCode, resp.Header, raw)

	ids := elementIDs(t, raw)
	codes := errorCodes(t)
	if len(codes) < 20 {
		t.Fatalf("found only %d error codes in the source: %v", len(codes), codes)
	}
	for _, code := range codes {
		switch tag, ok := ids[code]; {
		case !ok:
			t.Errorf("error code %s has no section: add `## %s` to docs/errors.md", code, code)
		case tag != "h2":
			t.Errorf("the element with id %q is <%s>, want the <h2> of the code's section", code, tag)
		}
	}

	// The docs link of a real error body leads to this page and one of its anchors.
	_, body := do(t, s.Handler(), http.MethodGet, "/v1/nope")
	link, err := url.Parse(body["docs"].(string))
	if err != nil || link.Path != "/docs/errors" || ids[link.Fragment] == "" {
		t.Errorf("docs link %q does not point at a section of /docs/errors", body["docs"])
	}
}

// elementIDs parses an HTML page and returns every id with the tag of its element; an id used
// twice fails the test, since an anchor must name one place.
func elementIDs(t *testing.T, page []byte) map[string]string {
	t.Helper()
	doc, err := html.Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("parse HTML: %v", err)
	}
	ids := map[string]string{}
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			for _, a := range n.Attr {
				if a.Key != "id" {
					continue
				}
				if prev, dup := ids[a.Val]; dup {
					t.Errorf("id %q is used twice (<%s> and <%s>)", a.Val, prev, n.Data)
				}
				ids[a.Val] = n.Data
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return ids
}

// errorCodes returns the error codes of this package's source: the values of the constants named
// Code…, and the string literals passed as the code argument of Errorf.
func errorCodes(t *testing.T) []string {
	t.Helper()
	// The API's own codes, and the one error mapping's (internal/problem).
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	shared, err := filepath.Glob("../problem/*.go")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, shared...)
	var codes []string
	add := func(lit ast.Expr) {
		if bl, ok := lit.(*ast.BasicLit); ok && bl.Kind == token.STRING {
			if v, err := strconv.Unquote(bl.Value); err == nil {
				codes = append(codes, v)
			}
		}
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GenDecl:
				if n.Tok != token.CONST {
					return true
				}
				for _, spec := range n.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, id := range vs.Names {
						if strings.HasPrefix(id.Name, "Code") && i < len(vs.Values) {
							add(vs.Values[i])
						}
					}
				}
			case *ast.CallExpr:
				if fn, ok := n.Fun.(*ast.Ident); ok && fn.Name == "Errorf" && len(n.Args) >= 2 {
					add(n.Args[1])
				}
			}
			return true
		})
	}
	slices.Sort(codes)
	return slices.Compact(codes)
}

// TestRenderMarkdown covers what the error reference needs from the renderer: GitHub's heading
// ids (underscores kept), no raw HTML passed through, links only where the page can lead, tables
// with escaped pipes, lists, and code.
func TestRenderMarkdown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"heading id is the code", "## rate_limit_exceeded", `<h2 id="rate_limit_exceeded">rate_limit_exceeded</h2>`},
		{"heading id GitHub style", "### The usage log, and `refused` requests", `<h3 id="the-usage-log-and-refused-requests">The usage log, and <code>refused</code> requests</h3>`},
		{"repeated heading", "## a\n## a", `<h2 id="a">a</h2>` + "\n" + `<h2 id="a-1">a</h2>`},
		{"paragraph", "one\ntwo", "<p>one\ntwo</p>"},
		{"raw html is dropped, text escaped", "a <b> & `<i>`", "<p>a <!-- raw HTML omitted --> &amp; <code>&lt;i&gt;</code></p>"},
		{"strong and emphasis", "**When.** *not* 2 * 3", "<p><strong>When.</strong> <em>not</em> 2 * 3</p>"},
		{"links", "[`x`](#x) [bad](javascript:alert(1))", `<p><a href="#x"><code>x</code></a> bad</p>`},
		{"links to other documents are text", "see [lists.md](lists.md#limits) and [the spec](https://example.com/x)",
			`<p>see lists.md and <a href="https://example.com/x">the spec</a></p>`},
		{"escapes", `a \| b \*c\*`, "<p>a | b *c*</p>"},
		{"list with continuation and nesting", "- one\n  more\n- two:\n  - nested\n    too\n\nafter",
			"<ul>\n<li>one\nmore</li>\n<li>two:\n<ul>\n<li>nested\ntoo</li>\n</ul>\n</li>\n</ul>\n<p>after</p>"},
		{"numbered list", "1. a\n2. b", "<ol>\n<li>a</li>\n<li>b</li>\n</ol>"},
		{"table", "| a | b |\n|---|---|\n| `x\\|y` | [z](#z) |",
			"<table>\n<thead>\n<tr>\n<th>a</th>\n<th>b</th>\n</tr>\n</thead>\n<tbody>\n<tr>\n<td><code>x|y</code></td>\n<td><a href=\"#z\">z</a></td>\n</tr>\n</tbody>\n</table>"},
		{"fenced code", "```json\n{\"a\": \"<b>\"}\n```", "<pre><code class=\"language-json\">{&quot;a&quot;: &quot;&lt;b&gt;&quot;}\n</code></pre>"},
	} {
		if got := strings.TrimSpace(renderMarkdown(tc.in)); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}
