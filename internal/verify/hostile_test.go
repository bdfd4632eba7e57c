package verify

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/verdict"
	"github.com/mailvet/mailvet/internal/verify/mx"
	"github.com/mailvet/mailvet/internal/verify/smtp"
)

// rawMX serves SMTP on a loopback port of its own with rcpt as the reply to every RCPT, and
// counts the connections it takes.
func rawMX(t *testing.T, rcpt string) (port int, conns *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				r := bufio.NewReader(c)
				c.Write([]byte("220 mx.hostile.test ESMTP\r\n"))
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					reply := "250 Ok"
					switch cmd := strings.ToUpper(line); {
					case strings.HasPrefix(cmd, "RCPT"):
						reply = rcpt
					case strings.HasPrefix(cmd, "QUIT"):
						c.Write([]byte("221 Bye\r\n"))
						return
					}
					c.Write([]byte(reply + "\r\n"))
				}
			}()
		}
	}()
	return int(netip.MustParseAddrPort(ln.Addr().String()).Port()), conns
}

// hostileVerifier is a Verifier whose DNS is w's and whose SMTP port is port, allowed to dial
// allow (nil: the production configuration, no private address).
func hostileVerifier(t *testing.T, w *mailsim.World, port int, allow []netip.Prefix) *Verifier {
	t.Helper()
	v, err := New(Config{
		MX: mx.Config{Server: w.DNSAddr()},
		SMTP: smtp.Config{Port: port, Helo: "probe.mailvet.test", MailFrom: "verify@probe.mailvet.test",
			Timeout: 500 * time.Millisecond, IdleTimeout: 50 * time.Millisecond, AllowCIDRs: allow},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

// A server's reply text with NUL, escape and other control bytes, bytes that are not UTF-8 and
// a line of nearly 4 KiB (the longest the prober reads) becomes an smtp_reply text that is valid UTF-8, has no
// control characters and is at most verdict.MaxReplyText bytes; the verdict is still read from it.
func TestHostileReplyText(t *testing.T) {
	t.Parallel()
	w, err := mailsim.Start(mailsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	w.AddDomain("hostile.test", mailsim.Domain{A: []string{"127.0.0.1"}})
	text := "5.1.1 <ann@hostile.test>\x00\x07\x1b[31m: Recipient \xff\xfe\xc3address rejected:\r\x0b User unknown\u202e" +
		strings.Repeat("\x01\x80é", 1000)
	port, _ := rawMX(t, "550 "+text)
	v := hostileVerifier(t, w, port, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})

	r := v.Verify(context.Background(), "ann@hostile.test")
	if r.Status != verdict.StatusUndeliverable || r.Reason != verdict.ReasonMailboxUnknown || r.SMTPReply == nil {
		t.Fatalf("%s, want undeliverable, mailbox_unknown, with the reply", jsonOf(r))
	}
	got := r.SMTPReply.Text
	if !utf8.ValidString(got) || len(got) > verdict.MaxReplyText || !strings.HasPrefix(got, "<ann@hostile.test>") {
		t.Errorf("smtp_reply.text %q (%d bytes): want valid UTF-8, at most %d bytes", got, len(got), verdict.MaxReplyText)
	}
	for _, c := range got {
		if unicode.IsControl(c) || unicode.Is(unicode.Bidi_Control, c) {
			t.Errorf("smtp_reply.text %q has the control character %U", got, c)
		}
	}
}

// With the production configuration (no MAILVET_SMTP_ALLOW_CIDRS), a domain whose MX hosts or
// implicit MX are on loopback, RFC 1918, link-local (the cloud metadata address) or reserved
// addresses is answered unknown, mx_private, never undeliverable, and nothing is dialled: not
// even the listener on 127.0.0.1 that an allowed prober would reach.
func TestPrivateMXIsNeverDialled(t *testing.T) {
	t.Parallel()
	w, err := mailsim.Start(mailsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	port, conns := rawMX(t, "550 5.1.1 No such user")
	for name, addr := range map[string]string{
		"loopback.test": "127.0.0.1", "rfc1918.test": "10.0.0.1", "metadata.test": "169.254.169.254",
		"cgnat.test": "100.64.0.1", "reserved.test": "240.0.0.1",
	} {
		w.AddDomain(name, mailsim.Domain{MX: mxOf("mx." + name)})
		w.AddHost("mx."+name, netip.MustParseAddr(addr))
	}
	w.AddDomain("implicit.test", mailsim.Domain{A: []string{"192.168.1.1"}})
	v := hostileVerifier(t, w, port, nil)

	raws := []string{"ann@loopback.test", "ann@rfc1918.test", "ann@metadata.test", "ann@cgnat.test",
		"ann@reserved.test", "ann@implicit.test"}
	batch := v.VerifyBatch(context.Background(), raws, nil)
	for i, raw := range raws {
		for _, r := range []verdict.Result{v.Verify(context.Background(), raw), batch[i]} {
			if r.Status != verdict.StatusUnknown || r.Reason != verdict.ReasonMXPrivate || r.FailedCheck != nil || r.SMTPReply != nil || !r.MXFound {
				t.Errorf("%s: %s, want unknown, mx_private, no reply", raw, jsonOf(r))
			}
		}
	}
	if n := conns.Load(); n != 0 {
		t.Fatalf("the listener on 127.0.0.1 took %d connections from a prober that must not dial it", n)
	}
	if s := v.ProbeStats(); s.Sessions != 0 {
		t.Fatalf("the prober opened %d sessions", s.Sessions)
	}
}

// A server that took the connection and then broke SMTP — lines of one reply with different
// codes, a reply line longer than the prober reads — leaves the address unknown with reason
// temporarily_unavailable: it was reached, so never connection_refused, and never a verdict read
// from the broken reply.
func TestServerBreakingTheProtocolIsNotARefusedConnection(t *testing.T) {
	t.Parallel()
	for name, rcpt := range map[string]string{
		"codes differ":  "550-5.1.1 No such user\r\n250 Ok",
		"line too long": "550 5.1.1 " + strings.Repeat("x", 8<<10),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w, err := mailsim.Start(mailsim.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Close)
			w.AddDomain("broken.test", mailsim.Domain{A: []string{"127.0.0.1"}})
			port, _ := rawMX(t, rcpt)
			v := hostileVerifier(t, w, port, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
			r := v.Verify(context.Background(), "ann@broken.test")
			if r.Status != verdict.StatusUnknown || r.Reason != verdict.ReasonTemporarilyUnavail || r.SMTPReply != nil {
				t.Fatalf("%s, want unknown, temporarily_unavailable, no reply", jsonOf(r))
			}
		})
	}
}
