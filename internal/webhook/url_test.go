package webhook

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url  string
		rule string // "" means accepted
	}{
		{"https://hooks.example.com/cb", ""},
		{"https://hooks.example.com", ""},
		{"https://hooks.example.com:8443/cb?x=1&y=2", ""},
		{"https://hooks.example.com/cb#frag", ""},
		{"HTTPS://Hooks.Example.COM/cb", ""},
		{"https://example.com./cb", ""},
		{"https://xn--bcher-kva.example/cb", ""},
		{"https://bücher.example/cb", ""},
		{"https://a-b.c-d.example.com/", ""},
		{"https://a_b.example.com/", "host"},
		{"https://example.com:1/", ""},
		{"https://example.com:65535/", ""},
		{"https://1.2.3.example.com/", ""},
		{"https://0x.example.com/", ""},
		{"", "syntax"},
		{"http://hooks.example.com/cb", "https"},
		{"ftp://hooks.example.com/cb", "https"},
		{"//hooks.example.com/cb", "https"},
		{"hooks.example.com/cb", "https"},
		{"https:hooks.example.com", "syntax"},
		{"https://user:pass@hooks.example.com/", "userinfo"},
		{"https://user@hooks.example.com/", "userinfo"},
		{"https://@hooks.example.com/", "userinfo"},
		{"https://127.0.0.1/", "ip"},
		{"https://8.8.8.8/", "ip"},
		{"https://[::1]/", "ip"},
		{"https://[2001:db8::1]:443/", "ip"},
		{"https://[::ffff:127.0.0.1]/", "ip"},
		{"https://2130706433/", "ip"},
		{"https://0x7f000001/", "ip"},
		{"https://0177.0.0.1/", "ip"},
		{"https://127.1/", "ip"},
		{"https://0x7f.1/", "ip"},
		{"https://1.2.3.4./", "ip"},
		{"https://localhost/", "local"},
		{"https://LOCALHOST:8443/", "local"},
		{"https://api.localhost/", "local"},
		{"https://printer.local/", "local"},
		{"https://nas.LOCAL./", "local"},
		{"https://metadata.google.internal/", "local"},
		{"https://intranet/", "host"},
		{"https:///cb", "host"},
		{"https://:443/cb", "host"},
		{"https://-bad.example.com/", "host"},
		{"https://bad-.example.com/", "host"},
		{"https://exa mple.com/", "syntax"},
		{"https://ex!ample.com/", "host"},
		{"https://" + strings.Repeat("a", 64) + ".example.com/", "host"},
		{"https://example.com:0/", "port"},
		{"https://example.com:70000/", "port"},
		{"https://example.com:http/", "syntax"},
		{"https://example.com/" + strings.Repeat("a", MaxURLLength), "length"},
		// The limit counts characters, as documented, not bytes: 2,048 of them in 4,076 bytes.
		{"https://example.com/" + strings.Repeat("é", MaxURLLength-len("https://example.com/")), ""},
		{"https://example.com/" + strings.Repeat("é", MaxURLLength-len("https://example.com/")+1), "length"},
	}
	for _, tt := range tests {
		err := CheckURL(tt.url)
		if tt.rule == "" {
			if err != nil {
				t.Errorf("CheckURL(%q) = %v, want nil", tt.url, err)
			}
			continue
		}
		var ue *URLError
		if !errors.As(err, &ue) {
			t.Errorf("CheckURL(%q) = %v, want a URLError for rule %s", tt.url, err, tt.rule)
			continue
		}
		if ue.Rule != tt.rule {
			t.Errorf("CheckURL(%q) broke rule %q (%v), want %q", tt.url, ue.Rule, err, tt.rule)
		}
		if !errors.Is(err, ErrInvalidURL) || !strings.HasPrefix(err.Error(), "webhook_url: ") {
			t.Errorf("CheckURL(%q) = %v: must wrap ErrInvalidURL and name webhook_url", tt.url, err)
		}
	}
}
