package dashboard

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// readURLEncoded keeps every field of a form with one far too long, cut to maxFormField, and
// names the long one with its unescaped length.
func TestReadURLEncoded(t *testing.T) {
	long := strings.Repeat("é", 2000)
	for _, c := range []struct {
		name  string
		value string
		n     int
	}{
		{"plain", strings.Repeat("a", 1<<20), 1 << 20},
		{"escaped", strings.Repeat("%", 5000), 5000},
		{"multibyte", long[:3000], 3000},
	} {
		body := url.Values{"csrf": {"tok"}, "label": {c.value}, "email": {"ann@example.com"}}.Encode()
		form, lng, err := readURLEncoded(strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if form.Get("csrf") != "tok" || form.Get("email") != "ann@example.com" {
			t.Errorf("%s: the other fields were lost: %v", c.name, form)
		}
		if got := form.Get("label"); len(got) > maxFormField || !strings.HasPrefix(c.value, got) || len(got) < maxFormField-3 {
			t.Errorf("%s: label kept as %d bytes", c.name, len(got))
		}
		if lng["label"] != c.n || len(lng) != 1 {
			t.Errorf("%s: long fields %v, want label %d", c.name, lng, c.n)
		}
	}
	// Short fields, escapes and repeated names as url.ParseQuery reads them.
	body := "a=1&b=x%20y+z&a=2&empty=&flag"
	form, lng, err := readURLEncoded(strings.NewReader(body))
	want, _ := url.ParseQuery(body)
	if err != nil || len(lng) != 0 || form.Encode() != want.Encode() {
		t.Errorf("%q: %v %v %v, want %v", body, form, lng, err, want)
	}
	// A body over maxFormBody is refused whole.
	rec := http.MaxBytesReader(nil, io.NopCloser(strings.NewReader(strings.Repeat("x", maxFormBody+1))), maxFormBody)
	if _, _, err := readURLEncoded(rec); err != errFormTooLarge {
		t.Errorf("over the body bound: %v", err)
	}
}
