package smtp

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// The prober talks to whatever MX hosts a domain's DNS names, so each server here misbehaves in
// one way a broken or hostile one can; the probe must end within its budget, with a bounded
// read, and with an answer that does not trust what it could not make sense of
// (docs/architecture.md, "Misbehaving servers").

// hostileBudget is the probe budget of these tests: short, so that each ends quickly.
const hostileBudget = 400 * time.Millisecond

// hostile serves every connection on a loopback port with serve, and returns a prober whose MX
// port is that one, and the MX host to probe. ended receives once per connection when serve
// returns, which it does when the prober has closed the connection (or serve gives up).
func hostile(t *testing.T, serve func(c net.Conn, r *bufio.Reader)) (*Prober, []Host, <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ended := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { ended <- struct{}{} }()
				defer c.Close()
				// No test server outlives its test by much, whatever the prober does.
				c.SetDeadline(time.Now().Add(10 * time.Second))
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	ap := netip.MustParseAddrPort(ln.Addr().String())
	p := newProber(t, Config{Port: int(ap.Port()), Timeout: hostileBudget, IdleTimeout: 50 * time.Millisecond, AllowCIDRs: loopbackOnly})
	return p, []Host{{Name: "mx.hostile.test", Addrs: []netip.Addr{ap.Addr()}}}, ended
}

// writeLines writes each line with CRLF, in one write.
func writeLines(c net.Conn, lines ...string) error {
	_, err := c.Write([]byte(strings.Join(lines, "\r\n") + "\r\n"))
	return err
}

// converse answers a well-behaved EHLO and MAIL FROM, then calls rcpt with the first RCPT
// command's connection (the server's replies are one command at a time: no PIPELINING).
func converse(rcpt func(c net.Conn, r *bufio.Reader)) func(c net.Conn, r *bufio.Reader) {
	return func(c net.Conn, r *bufio.Reader) {
		if writeLines(c, "220 mx.hostile.test ESMTP") != nil {
			return
		}
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			switch cmd := strings.ToUpper(line); {
			case strings.HasPrefix(cmd, "EHLO"):
				writeLines(c, "250-mx.hostile.test", "250 8BITMIME")
			case strings.HasPrefix(cmd, "MAIL"):
				writeLines(c, "250 2.1.0 Ok")
			case strings.HasPrefix(cmd, "RCPT"):
				rcpt(c, r)
				return
			case strings.HasPrefix(cmd, "QUIT"):
				writeLines(c, "221 Bye")
				return
			default:
				writeLines(c, "250 Ok")
			}
		}
	}
}

// probeHostile probes one address at hosts and checks that the answer came within the budget.
func probeHostile(t *testing.T, p *Prober, hosts []Host) Result {
	t.Helper()
	start := time.Now()
	r := p.Probe(context.Background(), Request{Addr: "ann@hostile.test", Domain: "hostile.test", Hosts: hosts})
	if took := time.Since(start); took > hostileBudget+200*time.Millisecond {
		t.Errorf("the probe took %v, past its %v budget", took, hostileBudget)
	}
	return r
}

// waitEnded waits for the server's connection to be closed by the prober.
func waitEnded(t *testing.T, ended <-chan struct{}) {
	t.Helper()
	select {
	case <-ended:
	case <-time.After(2 * time.Second):
		t.Fatal("the prober kept the connection open")
	}
}

// endless writes lines of line until the prober stops reading.
func endless(c net.Conn, line string) {
	buf := []byte(strings.Repeat(line+"\r\n", 64))
	for {
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

func TestHostileServers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		serve func(c net.Conn, r *bufio.Reader)
		want  Verdict
	}{
		{"endless multi-line banner", func(c net.Conn, r *bufio.Reader) { endless(c, "220-mx.hostile.test hello") }, Unknown},
		{"endless multi-line RCPT reply", converse(func(c net.Conn, r *bufio.Reader) { endless(c, "250-2.1.5 Ok") }), Unknown},
		{"a banner of megabytes without CRLF", func(c net.Conn, r *bufio.Reader) {
			c.Write([]byte("220 "))
			endless(c, strings.Repeat("a", 1<<16)+"b")
		}, Unknown},
		{"slow-loris banner", func(c net.Conn, r *bufio.Reader) {
			for {
				if _, err := c.Write([]byte("2")); err != nil {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}, Unknown},
		{"slow-loris RCPT reply", converse(func(c net.Conn, r *bufio.Reader) {
			for _, b := range []byte("250-2.1.5 Ok\r\n250-2.1.5 Ok\r\n250-2.1.5 Ok\r\n250-2.1.5 Ok\r\n" + strings.Repeat("x", 1000)) {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}), Unknown},
		{"EHLO with thousands of extensions", func(c net.Conn, r *bufio.Reader) {
			writeLines(c, "220 mx.hostile.test ESMTP")
			r.ReadString('\n')
			ext := make([]string, 5000)
			for i := range ext {
				ext[i] = "250-X-EXTENSION-" + strings.Repeat("X", i%50)
			}
			writeLines(c, append(ext, "250 PIPELINING")...)
			r.ReadString('\n')
		}, Unknown},
		{"banner then close", func(c net.Conn, r *bufio.Reader) { writeLines(c, "220 mx.hostile.test ESMTP") }, Unknown},
		{"replies change code", converse(func(c net.Conn, r *bufio.Reader) {
			writeLines(c, "550-5.1.1 No such user", "250 2.1.5 Ok")
			r.ReadString('\n')
		}), Unknown},
		{"replies change code the other way", converse(func(c net.Conn, r *bufio.Reader) {
			writeLines(c, "250-2.1.5 Ok", "550 5.1.1 No such user")
			r.ReadString('\n')
		}), Unknown},
		{"early talker", func(c net.Conn, r *bufio.Reader) {
			// Every reply at once, before any command: they answer nothing.
			writeLines(c, "220 mx.hostile.test ESMTP", "250 mx.hostile.test", "250 2.1.0 Ok", "250 2.1.5 Ok", "250 2.1.5 Ok")
			for {
				if _, err := r.ReadString('\n'); err != nil {
					return
				}
			}
		}, Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, hosts, ended := hostile(t, tc.serve)
			r := probeHostile(t, p, hosts)
			if r.Verdict != tc.want {
				t.Errorf("verdict %v (%s, %v), want %v", r.Verdict, r.Reply, r.Err, tc.want)
			}
			// In a batch each address has the budget from when a session takes it (the wait for
			// one is bounded by the caller's context: a list chunk's, a job's): at worst one
			// budget after the other here, where the second waits for the first's session.
			start := time.Now()
			reqs := []Request{{Addr: "ann@hostile.test", Domain: "hostile.test", Hosts: hosts}, {Addr: "bob@hostile.test", Domain: "hostile.test", Hosts: hosts}}
			for _, r := range p.ProbeAll(context.Background(), reqs, nil) {
				if r.Verdict != tc.want {
					t.Errorf("ProbeAll: verdict %v (%s, %v), want %v", r.Verdict, r.Reply, r.Err, tc.want)
				}
			}
			if took := time.Since(start); took > time.Duration(len(reqs))*hostileBudget+200*time.Millisecond {
				t.Errorf("ProbeAll took %v, past two %v budgets", took, hostileBudget)
			}
			p.Close()
			waitEnded(t, ended)
		})
	}
}

// A server that never answers QUIT nor closes the connection holds neither the probe, which does
// not wait for QUIT's reply, nor the session's end, which waits quitWait for it at most.
func TestServerThatNeverClosesAfterQuit(t *testing.T) {
	t.Parallel()
	p, hosts, ended := hostile(t, func(c net.Conn, r *bufio.Reader) {
		writeLines(c, "220 mx.hostile.test ESMTP")
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			switch cmd := strings.ToUpper(line); {
			case strings.HasPrefix(cmd, "EHLO"), strings.HasPrefix(cmd, "MAIL"):
				writeLines(c, "250 Ok")
			case strings.HasPrefix(cmd, "RCPT TO:<ANN@"):
				writeLines(c, "250 2.1.5 Ok")
			case strings.HasPrefix(cmd, "RCPT"):
				writeLines(c, "550 5.1.1 No such user")
			case strings.HasPrefix(cmd, "QUIT"):
				// Neither a reply nor a close: read on until the client goes.
			default:
				writeLines(c, "250 Ok")
			}
		}
	})
	if r := probeHostile(t, p, hosts); r.Verdict != Deliverable {
		t.Fatalf("verdict %v (%s, %v), want deliverable", r.Verdict, r.Reply, r.Err)
	}
	// The session idles IdleTimeout (50ms), sends QUIT and waits quitWait for its reply.
	start := time.Now()
	waitEnded(t, ended)
	if took := time.Since(start); took > 50*time.Millisecond+quitWait+200*time.Millisecond {
		t.Errorf("the session ended %v after the probe", took)
	}
}
