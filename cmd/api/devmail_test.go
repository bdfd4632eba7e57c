package main

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// In dev mode without a relay, a sign-up's confirmation mail goes to the loopback sink, which
// logs its link: the link from the log confirms the account, as a developer running `make demo`
// would use it (docs/development.md, "Mail in dev mode").
func TestDevModeLogsTheConfirmationLink(t *testing.T) {
	t.Chdir(t.TempDir())
	s := startServing(t, []string{"-dev"}, map[string]string{"DATABASE_URL": pgtest.EmptyURL(t)})
	defer s.stop(t)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	base := "http://" + s.httpAddr
	field := func(body, name string) string {
		m := regexp.MustCompile(`name="` + name + `" value="([^"]+)"`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no %s field in:\n%s", name, body)
		}
		return m[1]
	}
	get := func(u string) (int, string) {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	post := func(u string, form url.Values) *http.Response {
		resp, err := c.PostForm(u, form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	_, page := get(base + "/dashboard/signup")
	const pw = "a developer's password"
	if resp := post(base+"/dashboard/signup", url.Values{"csrf": {field(page, "csrf")}, "email": {"dev@example.com"},
		"password": {pw}, "password_confirm": {pw}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-up: %d", resp.StatusCode)
	}
	link := devConfirmLink(t, s)
	if !strings.HasPrefix(link, "http://localhost:") {
		t.Fatalf("the link %q does not start with the public URL", link)
	}
	u, _ := url.Parse(link)
	code, page := get(base + u.RequestURI())
	if code != http.StatusOK {
		t.Fatalf("the logged link: %d", code)
	}
	resp := post(base+"/dashboard/confirm", url.Values{"csrf": {field(page, "csrf")}, "token": {field(page, "token")}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/?done=confirmed" {
		t.Fatalf("confirm: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if code, page := get(base + "/dashboard/keys"); code != http.StatusOK || !strings.Contains(page, `id="create-key"`) {
		t.Fatalf("keys after the confirmation: %d", code)
	}
}
