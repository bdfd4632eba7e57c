package dashboard

import (
	"bytes"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/usage"
)

// The chart writes its counts as the rest of the dashboard does ("84,005"), and its SVG, which
// stretches to the card's width, holds no text: the labels are HTML around it, so they keep
// their shape on a phone.
func TestChartNumbersAndLabels(t *testing.T) {
	var days []usage.Day
	for i := range 30 {
		days = append(days, usage.Day{Date: time.Date(2026, 10, 25+i, 0, 0, 0, 0, time.UTC).Format(time.DateOnly), Calls: 1000})
	}
	days[29].Calls = 84005
	c := newChart(days)
	if want := "25 Oct to 23 Nov: 113,005 in total, at most 84,005 on one day."; !strings.HasSuffix(c.Label, want) {
		t.Errorf("label %q, want it to end with %q", c.Label, want)
	}
	if got := c.Bars[29].Title; got != "2026-11-23: 84,005 calls" {
		t.Errorf("bar title %q", got)
	}

	var buf bytes.Buffer
	v := &view{Title: "Overview", Session: &session{Email: "ann@example.com"}, Data: overviewData{Chart: c}}
	if err := parsePages()["overview"].ExecuteTemplate(&buf, "layout", v); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	if !strings.Contains(page, "max 84,005") {
		t.Errorf("no formatted maximum on the overview:\n%s", page)
	}
	svg := regexp.MustCompile(`(?s)<svg.*?</svg>`).FindString(page)
	if svg == "" || !strings.Contains(svg, `preserveAspectRatio="none"`) || strings.Contains(svg, "<text") {
		t.Errorf("the stretched SVG must hold no text:\n%s", svg)
	}
	for _, label := range []string{"25 Oct", "23 Nov"} {
		if !strings.Contains(page, "<span>"+label+"</span>") {
			t.Errorf("date %q is not under the chart", label)
		}
	}
}

func TestNum(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 84005: "84,005", -1234567: "-1,234,567"} {
		if got := num(n); got != want {
			t.Errorf("num(%d) = %q, want %q", n, got, want)
		}
	}
}

// Every page names the dashboard's own icon, so the browser never asks the API for
// /favicon.ico (its JSON 404 was a console error on every page), and the icon is served.
func TestFavicon(t *testing.T) {
	f := newFixture(t, nil)
	b := f.browser(t)
	for _, path := range []string{"/dashboard/signin", "/dashboard/signup", "/dashboard/nowhere"} {
		_, body := b.get(path)
		if !strings.Contains(body, `<link rel="icon" href="/dashboard/static/favicon.svg" type="image/svg+xml">`) {
			t.Errorf("%s links no icon", path)
		}
	}
	b.signup("ann@example.com")
	if _, body := b.get("/dashboard/"); !strings.Contains(body, `rel="icon"`) {
		t.Error("the overview links no icon")
	}
	resp, body := b.get("/dashboard/static/favicon.svg")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/svg+xml" || !strings.HasPrefix(body, "<svg") {
		t.Errorf("favicon: %d %q %.40q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}

// The stylesheet never splits code words ("statu|s", "P|OST"), and its focus ring has at least
// WCAG's 3:1 for non-text contrast against both the page background and white cards.
func TestStylesheet(t *testing.T) {
	css, err := staticFS.ReadFile("static/style.css")
	if err != nil {
		t.Fatal(err)
	}
	s := string(css)
	if strings.Contains(s, "break-all") {
		t.Error("style.css breaks words anywhere (word-break: break-all)")
	}
	if !regexp.MustCompile(`:focus-visible \{ outline: 3px solid var\(--focus\)`).MatchString(s) {
		t.Error("the focus ring does not use --focus")
	}
	colour := func(name string) string {
		m := regexp.MustCompile(`--` + name + `: (#[0-9a-fA-F]{6})`).FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("no --%s in style.css", name)
		}
		return m[1]
	}
	focus := colour("focus")
	for _, bg := range []string{colour("bg"), "#ffffff"} { // the page and the cards (--card: #fff)
		if r := contrast(focus, bg); r < 3 {
			t.Errorf("focus ring %s against %s: %.2f:1, want at least 3:1", focus, bg, r)
		}
	}
}

// contrast is WCAG 2's contrast ratio of two #rrggbb colours.
func contrast(a, b string) float64 {
	la, lb := luminance(a), luminance(b)
	return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)
}

func luminance(hex string) float64 {
	var l float64
	for i, w := range []float64{0.2126, 0.7152, 0.0722} {
		v, _ := strconv.ParseUint(hex[1+2*i:3+2*i], 16, 8)
		c := float64(v) / 255
		if c <= 0.03928 {
			c /= 12.92
		} else {
			c = math.Pow((c+0.055)/1.055, 2.4)
		}
		l += w * c
	}
	return l
}
