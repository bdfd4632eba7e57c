package mailsim

import (
	"errors"
	"net"
	"net/smtp"
	"net/textproto"
	"strconv"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// mxAddr asks the world's DNS server for domain's MX and returns the first one's address.
func mxAddr(t *testing.T, w *World, domain string) (string, int) {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(domain), dns.TypeMX)
	in, err := dns.Exchange(m, w.DNSAddr())
	if err != nil {
		t.Fatal(err)
	}
	if in.Rcode != dns.RcodeSuccess || len(in.Answer) == 0 {
		return "", in.Rcode
	}
	for _, rr := range in.Extra {
		if a, ok := rr.(*dns.A); ok {
			return a.A.String(), in.Rcode
		}
	}
	t.Fatalf("%s: MX without an address: %v", domain, in)
	return "", 0
}

// rcpt runs one SMTP transaction up to RCPT and returns the reply code.
func rcpt(t *testing.T, host string, port int, addr string) int {
	t.Helper()
	c, err := smtp.Dial(net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Hello("demo.test"); err != nil {
		t.Fatal(err)
	}
	if err := c.Mail("verify@demo.test"); err != nil {
		t.Fatal(err)
	}
	err = c.Rcpt(addr)
	var te *textproto.Error
	switch {
	case err == nil:
		return 250
	case errors.As(err, &te):
		return te.Code
	}
	t.Fatal(err)
	return 0
}

// The demo world answers at the DNS and SMTP level as its banner says; what the verifier makes
// of it is tested end to end in cmd/api.
func TestDemoWorldAnswers(t *testing.T) {
	t.Parallel()
	w, err := StartDemo()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, tt := range []struct {
		email string
		code  int
	}{
		{"ann@acme.example", 250},
		{"zoe@acme.example", 550},
		{"anyone@globex.example", 250},
		{"bob@initech.example", 450},
		{"ann@" + DemoBlockedDomain, 250},
	} {
		_, domain, _ := cutAt(tt.email)
		host, rcode := mxAddr(t, w, domain)
		if rcode != dns.RcodeSuccess {
			t.Fatalf("%s: DNS rcode %d", domain, rcode)
		}
		if got := rcpt(t, host, w.SMTPPort(), tt.email); got != tt.code {
			t.Errorf("%s: RCPT %d, want %d", tt.email, got, tt.code)
		}
	}
	if _, rcode := mxAddr(t, w, "mial.example"); rcode != dns.RcodeNameError {
		t.Errorf("the typo's domain: rcode %d, want NXDOMAIN", rcode)
	}
	for _, a := range DemoAddresses {
		if _, domain, ok := cutAt(a.Email); !ok || (domain != "mailinator.com" && !isExample(domain)) {
			t.Errorf("%s: demo domains must be under .example (RFC 2606), apart from the disposable one", a.Email)
		}
	}
}

func cutAt(email string) (local, domain string, ok bool) {
	at := strings.LastIndexByte(email, '@')
	if at < 0 {
		return "", "", false
	}
	return email[:at], email[at+1:], true
}

func isExample(domain string) bool { return strings.HasSuffix(domain, ".example") }
