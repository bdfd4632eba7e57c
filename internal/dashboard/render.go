package dashboard

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// view is what every page template gets.
type view struct {
	Title   string
	Nav     string // the active navigation entry
	Session *session
	CSRF    string // the anonymous forms' token; signed-in pages use Session.CSRF
	Error   string
	Notice  string
	Data    any
}

// Token is the CSRF token for the page's forms.
func (v *view) Token() string {
	if v.Session != nil {
		return v.Session.CSRF
	}
	return v.CSRF
}

var funcs = template.FuncMap{
	"date": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") },
	"datep": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04 UTC")
	},
	"day":  func(t time.Time) string { return t.UTC().Format("2 Jan 2006") },
	"eur":  func(v float64) string { return fmt.Sprintf("€%.2f", v) },
	"eur4": func(v float64) string { return fmt.Sprintf("€%.4f", v) },
	"num":  num,
	"deref": func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	},
	"status": func(p *int) string {
		if p == nil {
			return "—"
		}
		return fmt.Sprint(*p)
	},
}

// num writes n with thousands separators ("84,005"), as every count on the dashboard is written:
// the templates (as "num") and the chart's labels use it.
func num(n int) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// parsePages parses every page with the layout; a broken template is a build error, caught by
// the package's tests, so it panics.
func parsePages() map[string]*template.Template {
	pages := map[string]*template.Template{}
	files, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(path.Base(f), ".html")
		if name == "layout" {
			continue
		}
		pages[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", f))
	}
	return pages
}

// render writes page with v. It renders into a buffer first, so a template failure becomes a
// clean 500 instead of half a page.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, page string, v *view) {
	_ = h.renderPage(w, r, status, page, v)
}

// renderPage is render, and reports whether the page was written: an error when the template
// failed (the answer is then that 500) or when the page could not be written (the browser went
// away). A page that shows a billed result bills it only if it was (playground;
// docs/reliability.md, "Metering guarantees").
func (h *Handler) renderPage(w http.ResponseWriter, r *http.Request, status int, page string, v *view) error {
	if lf, ok := r.Context().Value(longFieldKey{}).(longField); ok && status >= 400 && status < 500 {
		// A form refused with a field far too long in it: that field is what to fix, whatever
		// check refused it (docs/dashboard.md, "Forms"); the page keeps the other fields.
		v.Error = tooLongText(lf.name, lf.n)
	}
	var buf bytes.Buffer
	if err := h.pages[page].ExecuteTemplate(&buf, "layout", v); err != nil {
		h.log.Error("dashboard: render", "page", page, "err", err)
		http.Error(w, "Something went wrong on our side.", http.StatusInternalServerError)
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, err := buf.WriteTo(w)
	return err
}

// notices are the confirmations shown after a redirect (?done=…). Only these fixed texts can be
// shown, so a crafted link cannot put words on a dashboard page.
var notices = map[string]string{
	"password":      "Your password was changed. Other sessions were signed out.",
	"revoked":       "The key was revoked. Requests with it now fail with 401.",
	"prov-gone":     "The provisioning key was revoked.",
	"retried":       "The delivery was queued again. Its attempts appear below as they happen.",
	"cap-set":       "The spend cap was saved.",
	"cap-clear":     "The spend cap was removed.",
	"checkout":      "Thank you. Your plan changes as soon as Stripe confirms the payment.",
	"no-revoked":    "There was no active provisioning key to revoke.",
	"uploaded":      "The list was uploaded and is being verified. This page refreshes until it is done.",
	"list-canceled": "The list was canceled. What was verified stays downloadable; the rest is not billed.",
	"list-deleted":  "The list and its results were deleted.",
	"confirmed":     "Your email is confirmed. You can now create API keys.",
	"sent":          "We sent the link again. It can take a few minutes; look in the spam folder too.",
	"reset":         "Your password was changed, and every other session was signed out.",
}

func notice(r *http.Request) string { return notices[r.URL.Query().Get("done")] }
