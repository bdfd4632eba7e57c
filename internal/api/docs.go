package api

import (
	"bytes"
	"fmt"
	"html"
	"net/http"
	"strings"
	"sync"
	"unicode"

	"github.com/labstack/echo/v4"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"

	"github.com/mailvet/mailvet/docs"
)

// publicDocCache is the Cache-Control of the public documents (/docs/errors, /openapi.json):
// the same for everyone and fixed for the life of the binary, so caches may keep them a while.
const publicDocCache = "public, max-age=300"

// errorDocs is GET /docs/errors: the error reference (docs/errors.md) as an HTML page. The docs
// field of every error body is {MAILVET_PUBLIC_URL}/docs/errors#<code>, and each code's section
// is a heading whose id is the code, so that link opens the right section in a browser.
func (s *Server) errorDocs(c echo.Context) error {
	h := c.Response().Header()
	h.Set(echo.HeaderCacheControl, publicDocCache)
	// The page is static text with an inline style sheet: nothing else may load or run.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	return c.Blob(http.StatusOK, echo.MIMETextHTMLCharsetUTF8, errorDocsPage())
}

// errorDocsPage renders the page once; the Markdown is embedded, so it never changes at run time.
var errorDocsPage = sync.OnceValue(func() []byte {
	return []byte(htmlPage("Mailvet error reference", renderMarkdown(docs.ErrorsMarkdown())))
})

const pageCSS = `body{font:16px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1f2328;margin:0}
main{max-width:56rem;margin:0 auto;padding:1rem 1.5rem 4rem}
h1,h2,h3{line-height:1.25;margin:2rem 0 .75rem}h2{border-bottom:1px solid #d0d7de;padding-bottom:.3rem}
h2:target,h3:target{background:#fff8c5}
code{font:.875em ui-monospace,SFMono-Regular,Menlo,monospace;background:#f6f8fa;padding:.1em .3em;border-radius:4px}
pre{background:#f6f8fa;padding:1rem;overflow:auto;border-radius:6px}pre code{padding:0;background:none}
table{border-collapse:collapse;margin:1rem 0;display:block;overflow:auto}
th,td{border:1px solid #d0d7de;padding:.35rem .7rem;text-align:left;vertical-align:top}
a{color:#0969da}
p,li,h1,h2,h3{overflow-wrap:anywhere}
@media (max-width:560px){main{padding:.75rem .75rem 3rem}}`

func htmlPage(title, body string) string {
	return "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n" +
		"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n" +
		"<title>" + html.EscapeString(title) + "</title>\n<style>\n" + pageCSS + "\n</style>\n</head>\n" +
		"<body>\n<main>\n" + body + "</main>\n</body>\n</html>\n"
}

// renderMarkdown turns Markdown into HTML with goldmark: CommonMark and GitHub's pipe tables, each
// heading with GitHub's id (githubIDs), so that an anchor works the same on GitHub and on the
// served page. Raw HTML in the source is never passed through (goldmark drops it unless told
// otherwise), and links lead only where the page can send a reader (servedLinks).
func renderMarkdown(src string) string {
	md := goldmark.New(
		goldmark.WithExtensions(extension.Table),
		goldmark.WithParserOptions(
			parser.WithAutoHeadingID(),
			parser.WithASTTransformers(util.Prioritized(servedLinks{}, 100)),
		),
	)
	var out bytes.Buffer
	ctx := parser.NewContext(parser.WithIDs(&githubIDs{used: map[string]int{}}))
	if err := md.Convert([]byte(src), &out, parser.WithContext(ctx)); err != nil {
		// Rendering into memory fails only on a bug; the Markdown is embedded and checked by tests.
		panic(fmt.Sprintf("render Markdown: %v", err))
	}
	return out.String()
}

// githubIDs gives headings GitHub's anchors (slug), a repeated one suffixed -1, -2, … as on
// GitHub. goldmark's own ids turn "_" into "-", which would break every /docs/errors#<code> link
// whose code has an underscore.
type githubIDs struct {
	used map[string]int
}

func (g *githubIDs) Generate(value []byte, _ ast.NodeKind) []byte {
	id := slug(string(value))
	n := g.used[id]
	g.used[id]++
	if n > 0 {
		id = fmt.Sprintf("%s-%d", id, n)
	}
	return []byte(id)
}

func (g *githubIDs) Put(value []byte) { g.used[string(value)]++ }

// slug is GitHub's heading anchor: lower case, letters, digits, "-" and "_" kept, spaces turned
// into "-", everything else (backticks, punctuation) dropped. "## rate_limit_exceeded" is
// #rate_limit_exceeded.
func slug(text string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case unicode.IsLetter(c), unicode.IsDigit(c), c == '-', c == '_':
			b.WriteRune(c)
		case c == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// servedLinks replaces every link the page cannot follow by its text: a link to another document
// of docs/ (servedHref), or one with a scheme other than http(s) (safeHref).
type servedLinks struct{}

func (servedLinks) Transform(doc *ast.Document, _ text.Reader, _ parser.Context) {
	var unserved []*ast.Link
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if l, ok := n.(*ast.Link); ok && entering {
			if href := string(l.Destination); !safeHref(href) || !servedHref(href) {
				unserved = append(unserved, l)
			}
		}
		return ast.WalkContinue, nil
	})
	for _, l := range unserved {
		parent := l.Parent()
		for c := l.FirstChild(); c != nil; {
			next := c.NextSibling()
			parent.InsertBefore(parent, l, c)
			c = next
		}
		parent.RemoveChild(parent, l)
	}
}

// servedHref reports whether a link of the error page leads somewhere from where the page is
// served (/docs/errors): an anchor of the page, or an absolute URL. A link to another document of
// docs/ (lists.md#limits) is written there for readers of the repository; the API serves no such
// page, so it is shown as its text, which names the document.
func servedHref(href string) bool {
	lower := strings.ToLower(href)
	return strings.HasPrefix(href, "#") || strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://")
}

// safeHref allows in-page anchors, http(s) URLs and relative paths: never a javascript: or data:
// URL.
func safeHref(href string) bool {
	lower := strings.ToLower(href)
	if strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://") {
		return true
	}
	colon := strings.IndexByte(lower, ':')
	return colon < 0 || strings.ContainsAny(lower[:colon], "/?#")
}
