package api

import (
	"fmt"
	"html"
	"net/http"
	"strings"
	"sync"
	"unicode"

	"github.com/labstack/echo/v4"

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
	h.Set("X-Content-Type-Options", "nosniff")
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
a{color:#0969da}`

func htmlPage(title, body string) string {
	return "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n" +
		"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n" +
		"<title>" + html.EscapeString(title) + "</title>\n<style>\n" + pageCSS + "\n</style>\n</head>\n" +
		"<body>\n<main>\n" + body + "</main>\n</body>\n</html>\n"
}

// renderMarkdown turns the Markdown subset the error reference uses into HTML: ATX headings with
// GitHub-style ids (so an anchor works the same on GitHub and on the served page), paragraphs,
// bullet and numbered lists (nested by indentation), fenced code blocks, pipe tables, and the
// inline forms `code`, **strong**, *emphasis*, [text](url) and backslash escapes. Everything else
// is text and is HTML-escaped, so no markup passes through from the source. It is not a general
// Markdown renderer; keep docs/errors.md within this subset (TestErrorDocs checks the result).
func renderMarkdown(src string) string {
	r := &mdRenderer{ids: map[string]int{}}
	r.blocks(strings.Split(strings.ReplaceAll(src, "\r\n", "\n"), "\n"))
	return r.out.String()
}

type mdRenderer struct {
	out strings.Builder
	ids map[string]int // heading ids used so far: a repeated one gets -1, -2, … as on GitHub
}

// blocks renders a sequence of lines as block elements.
func (r *mdRenderer) blocks(lines []string) {
	for i := 0; i < len(lines); {
		switch line := lines[i]; {
		case strings.TrimSpace(line) == "":
			i++
		case strings.HasPrefix(strings.TrimSpace(line), "```"):
			i = r.fence(lines, i)
		case headingLevel(line) > 0:
			r.heading(line)
			i++
		case isTableStart(lines, i):
			i = r.table(lines, i)
		case listMarker(line) > 0:
			i = r.list(lines, i)
		default:
			i = r.paragraph(lines, i)
		}
	}
}

// startsBlock reports whether lines[i] begins a block other than a paragraph.
func startsBlock(lines []string, i int) bool {
	line := lines[i]
	return strings.HasPrefix(strings.TrimSpace(line), "```") || headingLevel(line) > 0 ||
		isTableStart(lines, i) || listMarker(line) > 0
}

func (r *mdRenderer) fence(lines []string, i int) int {
	var code []string
	for i++; i < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i]), "```"); i++ {
		code = append(code, lines[i])
	}
	r.out.WriteString("<pre><code>" + html.EscapeString(strings.Join(code, "\n")) + "</code></pre>\n")
	return i + 1 // past the closing fence
}

// headingLevel is n for a line "#…# text" with n (1–6) hashes, else 0.
func headingLevel(line string) int {
	n := 0
	for n < len(line) && line[n] == '#' {
		n++
	}
	if n == 0 || n > 6 || n >= len(line) || line[n] != ' ' {
		return 0
	}
	return n
}

func (r *mdRenderer) heading(line string) {
	n := headingLevel(line)
	text := strings.TrimSpace(line[n:])
	fmt.Fprintf(&r.out, "<h%d id=\"%s\">%s</h%d>\n", n, html.EscapeString(r.uniqueID(slug(text))), inline(text), n)
}

// slug is GitHub's heading anchor: lower case, letters, digits, "-" and "_" kept, spaces turned
// into "-", everything else (backticks, punctuation) dropped. "## rate_limit_exceeded" is
// #rate_limit_exceeded.
func slug(text string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(c), unicode.IsDigit(c), c == '-', c == '_':
			b.WriteRune(c)
		case c == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func (r *mdRenderer) uniqueID(id string) string {
	n := r.ids[id]
	r.ids[id]++
	if n > 0 {
		return fmt.Sprintf("%s-%d", id, n)
	}
	return id
}

// isTableStart reports whether lines[i] is a table's header row: a "|" row followed by a
// delimiter row such as "|---|:---:|".
func isTableStart(lines []string, i int) bool {
	if i+1 >= len(lines) || !strings.HasPrefix(strings.TrimSpace(lines[i]), "|") {
		return false
	}
	delim := strings.TrimSpace(lines[i+1])
	return strings.HasPrefix(delim, "|") && strings.Contains(delim, "-") && strings.Trim(delim, "|-: ") == ""
}

func (r *mdRenderer) table(lines []string, i int) int {
	r.out.WriteString("<table>\n<thead>\n")
	r.row("th", lines[i])
	r.out.WriteString("</thead>\n<tbody>\n")
	for i += 2; i < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i]), "|"); i++ {
		r.row("td", lines[i])
	}
	r.out.WriteString("</tbody>\n</table>\n")
	return i
}

// row writes one table row. Cells are split at every "|" that is not escaped as "\|"; an escaped
// one is a literal "|", in code spans too, as on GitHub.
func (r *mdRenderer) row(tag, line string) {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	if strings.HasSuffix(line, "|") && !strings.HasSuffix(line, `\|`) {
		line = line[:len(line)-1]
	}
	r.out.WriteString("<tr>")
	start := 0
	for j := 0; j <= len(line); j++ {
		if j == len(line) || line[j] == '|' && (j == 0 || line[j-1] != '\\') {
			cell := strings.ReplaceAll(strings.TrimSpace(line[start:j]), `\|`, "|")
			fmt.Fprintf(&r.out, "<%s>%s</%s>", tag, inline(cell), tag)
			start = j + 1
		}
	}
	r.out.WriteString("</tr>\n")
}

// listMarker is the width of the list marker that starts line ("- " is 2, "12. " is 4), or 0.
func listMarker(line string) int {
	if strings.HasPrefix(line, "- ") || strings.HasPrefix(line, "* ") {
		return 2
	}
	n := 0
	for n < len(line) && line[n] >= '0' && line[n] <= '9' {
		n++
	}
	if n > 0 && n+1 < len(line) && line[n] == '.' && line[n+1] == ' ' {
		return n + 2
	}
	return 0
}

// list renders the list that starts at lines[i]. An item is its marker line plus the lines
// indented under it; those are rendered as blocks of their own, so lists nest by indentation.
func (r *mdRenderer) list(lines []string, i int) int {
	tag := "ul"
	if c := lines[i][0]; c >= '0' && c <= '9' {
		tag = "ol"
	}
	r.out.WriteString("<" + tag + ">\n")
	for i < len(lines) && listMarker(lines[i]) > 0 {
		w := listMarker(lines[i])
		item := []string{lines[i][w:]}
		i++
		for i < len(lines) {
			line := lines[i]
			switch {
			case strings.TrimSpace(line) == "":
				// A blank line continues the item only if indented content follows.
				j := i + 1
				for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
					j++
				}
				if j < len(lines) && strings.HasPrefix(lines[j], "  ") {
					item = append(item, "")
					i++
					continue
				}
			case strings.HasPrefix(line, "  "):
				item = append(item, dedent(line, w))
				i++
				continue
			case listMarker(line) == 0 && !startsBlock(lines, i):
				item = append(item, line) // a lazy continuation of the item's text
				i++
				continue
			}
			break
		}
		r.out.WriteString("<li>")
		r.item(item)
		r.out.WriteString("</li>\n")
		// Blank lines between items keep the list going.
		j := i
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j < len(lines) && j > i && listMarker(lines[j]) > 0 {
			i = j
		}
	}
	r.out.WriteString("</" + tag + ">\n")
	return i
}

// item renders a list item: its first lines of text inline, then any further blocks (a nested
// list, more paragraphs).
func (r *mdRenderer) item(lines []string) {
	n := 0
	for n < len(lines) && strings.TrimSpace(lines[n]) != "" && (n == 0 || !startsBlock(lines, n)) {
		n++
	}
	r.out.WriteString(inline(joinLines(lines[:n])))
	if rest := lines[n:]; len(rest) > 0 {
		r.out.WriteString("\n")
		r.blocks(rest)
	}
}

// dedent removes up to n leading spaces.
func dedent(line string, n int) string {
	for n > 0 && strings.HasPrefix(line, " ") {
		line, n = line[1:], n-1
	}
	return line
}

func (r *mdRenderer) paragraph(lines []string, i int) int {
	start := i
	for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "" && !startsBlock(lines, i); i++ {
	}
	r.out.WriteString("<p>" + inline(joinLines(lines[start:i])) + "</p>\n")
	return i
}

func joinLines(lines []string) string {
	trimmed := make([]string, len(lines))
	for i, l := range lines {
		trimmed[i] = strings.TrimSpace(l)
	}
	return strings.Join(trimmed, " ")
}

// mdPunct are the characters a backslash escapes.
const mdPunct = "\\`*_{}[]()#+-.!|<>"

// inline renders the inline forms of one paragraph, table cell or heading.
func inline(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && strings.IndexByte(mdPunct, s[i+1]) >= 0:
			b.WriteString(html.EscapeString(s[i+1 : i+2]))
			i += 2
			continue
		case c == '`':
			n := 0
			for i+n < len(s) && s[i+n] == '`' {
				n++
			}
			fence := s[i : i+n]
			if j := strings.Index(s[i+n:], fence); j >= 0 {
				code := s[i+n : i+n+j]
				if len(code) > 1 && code[0] == ' ' && code[len(code)-1] == ' ' {
					code = code[1 : len(code)-1]
				}
				b.WriteString("<code>" + html.EscapeString(code) + "</code>")
				i += n + j + n
				continue
			}
			b.WriteString(fence)
			i += n
			continue
		case strings.HasPrefix(s[i:], "**"):
			if j := strings.Index(s[i+2:], "**"); j > 0 {
				b.WriteString("<strong>" + inline(s[i+2:i+2+j]) + "</strong>")
				i += j + 4
				continue
			}
		case c == '*' && i+1 < len(s) && s[i+1] != ' ':
			if j := strings.IndexByte(s[i+1:], '*'); j > 0 && s[i+j] != ' ' {
				b.WriteString("<em>" + inline(s[i+1:i+1+j]) + "</em>")
				i += j + 2
				continue
			}
		case c == '[':
			if text, href, n, ok := link(s[i:]); ok {
				if safeHref(href) && servedHref(href) {
					b.WriteString("<a href=\"" + html.EscapeString(href) + "\">" + inline(text) + "</a>")
				} else {
					b.WriteString(inline(text))
				}
				i += n
				continue
			}
		}
		b.WriteString(html.EscapeString(s[i : i+1]))
		i++
	}
	return b.String()
}

// link parses "[text](href)" at the start of s and returns its parts and length.
func link(s string) (text, href string, n int, ok bool) {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '`':
			// A code span may hold brackets; skip it whole.
			if j := strings.IndexByte(s[i+1:], '`'); j >= 0 {
				i += j + 1
			}
		case '[':
			depth++
		case ']':
			depth--
			if depth > 0 {
				continue
			}
			if !strings.HasPrefix(s[i+1:], "(") {
				return "", "", 0, false
			}
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				return "", "", 0, false
			}
			return s[1:i], s[i+2 : i+2+end], i + 3 + end, true
		}
	}
	return "", "", 0, false
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
