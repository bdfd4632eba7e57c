package verify

// BenchmarkOraclePostfix is BenchmarkOracle's world served by a real Postfix instead of mailsim:
// the same 1,000 addresses, the same 20 ms round trip (a delay line in front of Postfix), and
// Postfix's own stock limits, so that the engine's and the oracles' times are measured against
// the software mailsim models, not only against the model. scripts/postfix-bench.sh (make
// bench-postfix) starts the Postfix and runs it; without it the benchmark is skipped.
// BENCHMARKS.md, "Against a real Postfix".

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/textproto"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/verify/mx"
	"github.com/mailvet/mailvet/internal/verify/smtp"
)

// postfixClient is the address the delay line dials Postfix from: the client Postfix counts
// connections and errors for, not exempt from its limits (scripts/postfix-bench.sh).
var postfixClient = netip.MustParseAddr("127.0.0.254")

// delayLine forwards connections to a server, delivering the server's bytes to the client one
// delay after they were sent, as mailsim's servers do (mailsim's conn.go): replies to pipelined
// commands arrive together one round trip later. It listens on from's address and port (0: any
// free one), and dials the server from that address: the client the server sees. open counts connections not yet closed on both
// sides, so that a run can wait until the server has none left.
type delayLine struct {
	ln     net.Listener
	from   netip.Addr
	target string
	delay  time.Duration
	open   atomic.Int64
	wg     sync.WaitGroup
}

func startDelayLine(tb testing.TB, from netip.AddrPort, target string, delay time.Duration) *delayLine {
	tb.Helper()
	ln, err := net.Listen("tcp", from.String())
	if err != nil {
		tb.Fatal(err)
	}
	d := &delayLine{ln: ln, from: from.Addr(), target: target, delay: delay}
	d.wg.Add(1)
	go d.accept()
	tb.Cleanup(func() { ln.Close(); d.wg.Wait() })
	return d
}

func (d *delayLine) port() int { return d.ln.Addr().(*net.TCPAddr).Port }

func (d *delayLine) accept() {
	defer d.wg.Done()
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		d.open.Add(1)
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer d.open.Add(-1)
			d.forward(c)
		}()
	}
}

type delayed struct {
	b  []byte
	at time.Time
}

func (d *delayLine) forward(client net.Conn) {
	defer client.Close()
	dialer := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(d.from, 0)), Timeout: 5 * time.Second}
	server, err := dialer.Dial("tcp", d.target)
	if err != nil {
		return
	}
	defer server.Close()
	go func() {
		_, _ = io.Copy(server, client) // the client's bytes go at once
		server.(*net.TCPConn).CloseWrite()
	}()
	queue := make(chan delayed, 1024)
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := server.Read(buf)
			if n > 0 {
				queue <- delayed{buf[:n], time.Now().Add(d.delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range queue {
		time.Sleep(time.Until(c.at))
		if _, err := client.Write(c.b); err != nil {
			for range queue {
			}
			return
		}
	}
}

// waitClosed waits until no connection is open through the delay line.
func (d *delayLine) waitClosed(tb testing.TB) {
	tb.Helper()
	for deadline := time.Now().Add(10 * time.Second); d.open.Load() > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("%d connections still open", d.open.Load())
		}
	}
}

// postfixSessions is what Postfix's log says of the sessions since a point: how many, the most
// rejected commands in one (its "commands=ok/total" tally at disconnect), and how many
// connections its concurrency limit turned away.
type postfixSessions struct {
	sessions, maxErrors, turnedAway int
}

var (
	disconnectRE = regexp.MustCompile(`disconnect from .* commands=(\d+)/(\d+)`)
	tooManyRE    = regexp.MustCompile(`(?i)connection concurrency limit exceeded|too many connections`)
)

// postfixLog reads path from offset until its session count stops growing for 300 ms (postlogd
// writes behind the sessions) and returns the tally and the new offset.
func postfixLog(tb testing.TB, path string, offset int64) (postfixSessions, int64) {
	tb.Helper()
	var (
		s    postfixSessions
		last = -1
	)
	for stable := 0; stable < 3; time.Sleep(100 * time.Millisecond) {
		f, err := os.Open(path)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			tb.Fatal(err)
		}
		s = postfixSessions{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			if m := disconnectRE.FindStringSubmatch(line); m != nil {
				ok, _ := strconv.Atoi(m[1])
				all, _ := strconv.Atoi(m[2])
				s.sessions++
				s.maxErrors = max(s.maxErrors, all-ok)
			}
			if tooManyRE.MatchString(line) {
				s.turnedAway++
			}
		}
		f.Close()
		if s.sessions == last {
			stable++
		} else {
			stable, last = 0, s.sessions
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	return s, fi.Size()
}

// checkSoftLimit checks, on the Postfix at addr, the rule mailsim's ThrottleAfter models and the
// engine's error budget rests on: the replies of a session's first 10 rejected commands come at
// once, and every reply after the 10th rejection is slowed by smtpd_error_sleep_time (1 s).
func checkSoftLimit(tb testing.TB, addr string) {
	tb.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	r := textproto.NewReader(bufio.NewReader(conn))
	step := func(cmd string, want int) time.Duration {
		t0 := time.Now()
		if cmd != "" {
			if _, err := fmt.Fprintf(conn, "%s\r\n", cmd); err != nil {
				tb.Fatal(err)
			}
		}
		code, msg, err := r.ReadResponse(0)
		if err != nil || code != want {
			tb.Fatalf("Postfix answered %q with %d %s (%v), want %d", cmd, code, msg, err, want)
		}
		return time.Since(t0)
	}
	step("", 220)
	step("EHLO probe.mailvet.test", 250)
	step("MAIL FROM:<verify@probe.mailvet.test>", 250)
	for i := range 10 {
		if d := step(fmt.Sprintf("RCPT TO:<user%02d@oracle00.test>", 2*i+1), 550); d > 500*time.Millisecond {
			tb.Fatalf("rejection %d was slowed (%v): Postfix's soft limit is not what mailsim models", i+1, d)
		}
	}
	if d := step("RCPT TO:<user00@oracle00.test>", 250); d < 900*time.Millisecond {
		tb.Fatalf("the reply after the 10th rejection came in %v: Postfix's soft limit is not what mailsim models", d)
	}
}

// BenchmarkOraclePostfix: see the top of the file. Each iteration runs Mailvet cold and warm, the
// pipelining oracle and the RFC 2920 oracle, as BenchmarkOracle does, and reads Postfix's log
// after each: a session with 10 or more rejected commands had its replies slowed, and a turned-
// away connection broke the concurrency limit; either fails the benchmark for the oracles, and
// is reported for Mailvet (mv-max-errors, mv-turned-away).
func BenchmarkOraclePostfix(b *testing.B) {
	target, logPath := os.Getenv("MAILVET_BENCH_POSTFIX"), os.Getenv("MAILVET_BENCH_POSTFIX_LOG")
	if target == "" || logPath == "" {
		b.Skip("needs a Postfix: run scripts/postfix-bench.sh (make bench-postfix)")
	}
	w, err := mailsim.Start(mailsim.Options{RTT: benchRTT}) // its DNS only: Postfix answers SMTP
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Close)
	line := startDelayLine(b, netip.AddrPortFrom(postfixClient, 0), target, benchRTT)
	w.AddHost("mx.postfix.test", postfixClient)
	world := addOracleWorld(w, "mx.postfix.test") // w answers DNS only: the users are Postfix's
	raws := world.raws
	plan := oraclePlan(world.addrs, oracleSoftLimit)
	via := netip.AddrPortFrom(postfixClient, uint16(line.port())).String()
	checkSoftLimit(b, target)
	_, offset := postfixLog(b, logPath, 0) // from after the check's own session
	var (
		mvColdT, mvWarmT, orT, orRFCT         time.Duration
		mvColdS, mvWarmS, mvLogS, orS         int
		mvMaxErr, mvTooMany, orMaxErr, orMany int
	)
	tally := func() postfixSessions {
		line.waitClosed(b)
		var s postfixSessions
		s, offset = postfixLog(b, logPath, offset)
		return s
	}
	for b.Loop() {
		v, err := New(Config{
			MX: mx.Config{Server: w.DNSAddr()},
			SMTP: smtp.Config{Port: line.port(), Helo: "probe.mailvet.test", MailFrom: "verify@probe.mailvet.test",
				Timeout: 3 * time.Second, MaxPerHost: oracleConnLimit, AllowCIDRs: []netip.Prefix{mailsim.Prefix}},
		})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		res := v.VerifyBatch(context.Background(), raws, nil)
		mvColdT += time.Since(t0)
		world.check(b, res)
		cold := v.ProbeStats()
		t0 = time.Now()
		res = v.VerifyBatch(context.Background(), raws, nil)
		mvWarmT += time.Since(t0)
		world.check(b, res)
		warm := v.ProbeStats()
		v.Close()
		s := tally()
		mvColdS += int(cold.Sessions)
		mvWarmS += int(warm.Sessions - cold.Sessions)
		mvLogS += s.sessions // both runs' sessions, as Postfix counted them
		mvMaxErr, mvTooMany = max(mvMaxErr, s.maxErrors), mvTooMany+s.turnedAway

		for _, rfc := range []bool{false, true} {
			run, err := runOracle(via, plan, oracleConnLimit, rfc)
			if err != nil {
				b.Fatal(err)
			}
			s := tally()
			if rfc {
				orRFCT += run.wall
			} else {
				orT += run.wall
				orS += s.sessions
			}
			orMaxErr, orMany = max(orMaxErr, s.maxErrors), orMany+s.turnedAway
		}
	}
	if orMaxErr >= oracleSoftLimit || orMany > 0 {
		b.Fatalf("an oracle run was not clean: %d rejected commands in a session, %d connections turned away", orMaxErr, orMany)
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
	b.ReportMetric(float64(mvColdS)/n, "mv-cold-sessions")
	b.ReportMetric(float64(mvWarmS)/n, "mv-warm-sessions")
	b.ReportMetric(float64(mvLogS)/n, "mv-postfix-sessions")
	b.ReportMetric(float64(orS)/n, "or-sessions")
	b.ReportMetric(ms(mvColdT), "mv-cold-ms")
	b.ReportMetric(ms(mvWarmT), "mv-warm-ms")
	b.ReportMetric(ms(orT), "or-cold-ms")
	b.ReportMetric(ms(orRFCT), "or-ehlo-wait-ms")
	b.ReportMetric(float64(mvColdT)/float64(orRFCT), "rfc-cold-ratio")
	b.ReportMetric(float64(mvWarmT)/float64(orRFCT), "rfc-warm-ratio")
	b.ReportMetric(float64(orRFCT)/float64(orT), "rfc-oracle-cold-ratio")
	b.ReportMetric(float64(mvMaxErr), "mv-max-errors")
	b.ReportMetric(float64(mvTooMany)/n, "mv-turned-away")
}
