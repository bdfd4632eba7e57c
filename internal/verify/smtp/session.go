package smtp

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// rcpt is one RCPT of an exchange: either a job's address or a domain's catch-all probe.
type rcpt struct {
	j        *job
	probe    *caProbe // set for a catch-all probe
	known    bool     // j's domain catch-all answer was known when it was taken
	catchAll bool
	wait     *caProbe // the probe whose answer j's verdict waits for, when not known
	deadline time.Time
}

// session is one SMTP connection. Only its pool's run goroutine uses it.
type session struct {
	pl   *pool
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
	wake chan struct{}

	pipelining bool
	starttls   bool
	smtputf8   bool // EHLO offered SMTPUTF8 (RFC 6531)
	tls        bool
	rcptMax    int

	inTxn    bool // a MAIL FROM has been accepted and not reset
	txnUTF8  bool // the open transaction declared SMTPUTF8
	txnRcpts int
	txnTaken int  // RCPTs of this transaction answered other than "too many recipients"
	errors   int  // failed commands; see maxErrors
	broken   bool // the connection is in an unknown state
	full     bool // the server will take no more recipients in this session
	wrote    bool // something was written since the last reply was read
	last     bool // the exchange under way is the session's last: QUIT travels with it; set under pl.mu
	quitted  bool // QUIT has been sent
	stalled  bool // the budget ran out with replies outstanding: the server is still at work (drain)

	rcpts    int // RCPT replies read since the pool last counted them (arrivedLocked)
	rejected int // of which failed
	taken    int // RCPTs of the whole session answered other than "too many recipients"

	lease Lease // the fleet slot this session holds, or nil without a fleet-wide limit

	returning bool // see pool.replied; guarded by pl.mu
	left      int  // error budget as of the last take (maxErrors − errors); guarded by pl.mu
	inflight  int  // RCPTs of the exchange under way; guarded by pl.mu
}

func (s *session) usable() bool {
	return !s.broken && !s.full && !s.quitted && s.errors < maxErrors && (s.lease == nil || s.lease.Valid())
}

// open connects, reads the banner and says EHLO, within half the probe budget so that a silent
// server (a tarpit) leaves time for the next MX host.
func (pl *pool) open() (*session, error) {
	deadline := time.Now().Add(pl.p.cfg.Timeout / 2)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	pl.p.dials.Add(1)
	conn, err := pl.p.dialer.DialContext(ctx, "tcp", pl.addr)
	if err != nil {
		return nil, err
	}
	pl.p.sessions.Add(1)
	s := &session{pl: pl, conn: conn, r: bufio.NewReaderSize(conn, 4096), w: bufio.NewWriterSize(conn, 4096), wake: make(chan struct{}, 1), rcptMax: 100}
	conn.SetDeadline(deadline)
	fail := func(err error) (*session, error) {
		conn.Close()
		return nil, err
	}
	s.wrote = true // the connection itself: the banner is a round trip's wait
	banner, err := s.read()
	if err != nil {
		return fail(fmt.Errorf("banner: %w", err))
	}
	pl.p.observe("CONNECT", banner.Code)
	if banner.Code != 220 {
		return fail(&bannerError{banner})
	}
	pl.greeted()
	if err := s.ehlo(); err != nil {
		return fail(err)
	}
	if _, needTLS := pl.tlsState(); needTLS && s.starttls {
		if err := s.startTLS(); err != nil {
			return fail(err)
		}
	}
	conn.SetDeadline(time.Time{})
	return s, nil
}

func (s *session) ehlo() error {
	replies, err := s.send([]string{"EHLO " + s.pl.p.cfg.Helo})
	if err != nil {
		return fmt.Errorf("EHLO: %w", err)
	}
	rep := replies[0]
	if rep.Code != 250 {
		// A server without ESMTP: plain HELO, one command at a time.
		s.errors++
		if replies, err = s.send([]string{"HELO " + s.pl.p.cfg.Helo}); err != nil {
			return fmt.Errorf("HELO: %w", err)
		}
		if replies[0].Code != 250 {
			return fmt.Errorf("HELO: %s", replies[0])
		}
		return nil
	}
	for _, line := range strings.Split(rep.Text, "\n")[1:] {
		kw, arg, _ := strings.Cut(strings.ToUpper(strings.TrimSpace(line)), " ")
		switch kw {
		case "PIPELINING":
			s.pipelining = true
		case "STARTTLS":
			s.starttls = true
		case "SMTPUTF8":
			s.smtputf8 = true
		case "LIMITS":
			for _, f := range strings.Fields(arg) {
				if v, ok := strings.CutPrefix(f, "RCPTMAX="); ok {
					if n, err := strconv.Atoi(v); err == nil && n > 0 {
						s.rcptMax = n
					}
				}
			}
		}
	}
	return nil
}

// startTLS upgrades the session. The certificate is not verified: MTAs use opportunistic TLS,
// and a probe carries nothing secret.
func (s *session) startTLS() error {
	replies, err := s.send([]string{"STARTTLS"})
	if err != nil {
		return fmt.Errorf("STARTTLS: %w", err)
	}
	if replies[0].Code != 220 {
		return fmt.Errorf("STARTTLS: %s", replies[0])
	}
	tc := tls.Client(s.conn, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // see above
	if err := tc.Handshake(); err != nil {
		return fmt.Errorf("TLS handshake: %w", err)
	}
	s.conn, s.tls, s.inTxn = tc, true, false
	s.r.Reset(tc)
	s.w.Reset(tc)
	s.pipelining, s.starttls, s.smtputf8 = false, false, false
	return s.ehlo()
}

// exchange sends batch's RCPTs — after MAIL FROM when no transaction is open — and settles every
// job in it: finished, or handed back to the pool when the session could not answer it. An
// address with a UTF-8 local part goes in a transaction that declared SMTPUTF8, or is settled
// unknown when the server does not offer it (smtputf8.go).
func (s *session) exchange(batch []rcpt) {
	batch, utf8 := s.screenUTF8(batch)
	if len(batch) == 0 {
		s.pl.replied(s)
		if s.last {
			s.full = true // the session was to retire after this exchange: it still does
		}
		return
	}
	deadline := batch[0].deadline
	for _, it := range batch {
		if it.deadline.Before(deadline) {
			deadline = it.deadline
		}
	}
	s.conn.SetDeadline(deadline)
	defer s.conn.SetDeadline(time.Time{})

	var cmds []string
	if s.inTxn && (s.txnRcpts+len(batch) > s.rcptMax || utf8 && !s.txnUTF8) {
		cmds = append(cmds, "RSET")
		s.inTxn = false
	}
	if !s.inTxn {
		cmds = append(cmds, s.mailFrom(utf8))
		s.txnUTF8 = utf8
		plainOK, _ := s.pl.tlsState()
		// Until a MAIL FROM has been accepted here in plain text, a server that offers STARTTLS
		// may demand it first: the MAIL goes alone, since RCPTs pipelined behind a refused MAIL
		// would each count as an error against us. A server that does not offer it gets the MAIL
		// with the RCPTs, in a window that fillLocked left one error short of the budget so that
		// a refused MAIL and every RCPT behind it still stay under the limit.
		if !s.pipelining || (!s.tls && !plainOK && (s.starttls || len(batch) > maxErrors-s.errors-1)) {
			if !s.mail(cmds, batch) {
				return
			}
			cmds = nil
		}
	}
	pre := len(cmds)
	for _, it := range batch {
		if it.probe != nil {
			cmds = append(cmds, "RCPT TO:<"+it.probe.local+"@"+it.probe.domain+">")
		} else {
			cmds = append(cmds, "RCPT TO:<"+it.j.addr+">")
		}
	}
	if s.last {
		// The session retires after this exchange (pool.fillLocked): its QUIT travels with the
		// RCPTs, so that its connection slot is free one round trip sooner.
		cmds = append(cmds, "QUIT")
		s.quitted = true
	}
	replies, err := s.send(cmds)
	s.pl.replied(s)
	if pre > 0 {
		if len(replies) < pre {
			s.broken = true
			s.abandon(batch, err, false)
			return
		}
		if rep := replies[pre-1]; rep.Code/100 != 2 {
			s.errors++
			s.refusedMail(batch, rep)
			return
		}
		s.inTxn, s.txnRcpts, s.txnTaken = true, 0, 0
		if s.tls {
			s.pl.setTLSMailOK()
		} else {
			s.pl.setPlainOK()
		}
		replies = replies[pre:]
	}
	for i, it := range batch {
		if i >= len(replies) {
			s.broken = true
			s.abandon(batch[i:], err, false)
			return
		}
		s.settle(it, replies[i])
	}
}

// mail sends [RSET] MAIL FROM on its own, starting TLS when the server asks for it. It reports
// whether the transaction is open; when not, it has settled batch.
func (s *session) mail(cmds []string, batch []rcpt) bool {
	replies, err := s.send(cmds)
	if err != nil {
		s.broken = true
		s.abandon(batch, err, false)
		return false
	}
	rep := replies[len(replies)-1]
	if rep.Code/100 == 2 {
		s.inTxn, s.txnRcpts, s.txnTaken = true, 0, 0
		if s.tls {
			s.pl.setTLSMailOK()
		} else {
			s.pl.setPlainOK()
		}
		return true
	}
	s.errors++
	if (rep.Code == 530 || rep.Enhanced == "5.7.0") && s.starttls && !s.tls {
		s.pl.setNeedTLS()
		if err := s.startTLS(); err != nil {
			s.broken = true
			s.abandon(batch, err, false)
			return false
		}
		return s.mail([]string{s.mailFrom(s.txnUTF8)}, batch)
	}
	s.refusedMail(batch, rep)
	return false
}

// refusedMail settles batch after the server refused our MAIL FROM, which says nothing about the
// mailboxes. A 5xx refuses our sender (reason sender_rejected). A 421 closes the session: the
// addresses go to another, as after a 421 to a RCPT. Any other 4xx is temporary — greylisting, a
// busy server — and the addresses get that reply as their answer, so that its reason (greylisted,
// temporarily_unavailable) and retry hint are the reply's, and an async job is probed again.
func (s *session) refusedMail(batch []rcpt, rep Reply) {
	s.broken = true
	switch {
	case rep.Code == 421:
		for _, it := range batch {
			if it.j != nil {
				it.j.lastReply = rep
			}
		}
		s.abandon(batch, fmt.Errorf("MAIL FROM: %s", rep), false)
	case rep.Code/100 == 4:
		for _, it := range batch {
			if it.probe != nil {
				s.pl.p.resolveCatchAll(it.probe, caInconclusive)
				continue
			}
			it.j.finish(Result{Verdict: Unknown, Host: it.j.host(), Reply: rep})
		}
	default:
		s.abandon(batch, &mailRefused{rep}, true)
	}
}

// mailRefused is a permanent refusal of our MAIL FROM. It covers every address of the batch,
// and is their smtp_reply (Result.MailReply).
type mailRefused struct{ rep Reply }

func (e *mailRefused) Error() string { return "MAIL FROM: " + e.rep.String() }

// settle acts on the reply to one RCPT.
func (s *session) settle(it rcpt, rep Reply) {
	s.txnRcpts++
	s.rcpts++
	limit := tooManyRecipients(rep)
	if !limit {
		s.taken++
		s.txnTaken++
	}
	if rep.Code/100 != 2 {
		s.errors++
		s.rejected++
	}
	if limit {
		s.overLimit(it, rep)
		return
	}
	if it.probe != nil {
		o := caInconclusive
		switch {
		case rep.Code/100 == 2:
			o = caYes
		case rep.Code/100 == 5 && classify(rep) == Undeliverable:
			// Refused in "no such mailbox" or "disabled" words, whatever the code (a 550 5.7.1
			// "No such user", qmail's 511): the domain refuses what does not exist, so it is no
			// catch-all (docs/architecture.md, "Reading replies").
			o = caNo
		}
		var said Reply
		if o == caInconclusive && (rep.Code/100 == 4 || rep.Code/100 == 5) {
			// Deferred (greylisting, a busy server) or refused by policy (5.7.x, 554, our
			// sender): the addresses waiting on the probe get this reply as their answer, and
			// its reason, not a bare "inconclusive" (Prober.accepted).
			said = rep
		}
		s.pl.p.resolveCatchAllWith(it.probe, o, said)
		return
	}
	j := it.j
	switch {
	case rep.Code == 421:
		s.broken = true
		j.lastReply = rep
		s.pl.requeue([]*job{j})
		return
	}
	switch classify(rep) {
	case Deliverable:
		s.pl.p.accepted(j, it.known, it.catchAll, it.wait, j.host(), rep)
	case Undeliverable:
		j.finish(Result{Verdict: Undeliverable, Host: j.host(), Reply: rep})
	default:
		j.finish(Result{Verdict: Unknown, Host: j.host(), Reply: rep})
	}
}

// overLimit acts on "too many recipients" to one RCPT: not an answer about the mailbox, nor, for a
// catch-all probe, about the domain. When the transaction had taken some, that is the server's
// limit per transaction: the session goes on in a new one (RSET, MAIL FROM) no larger. When it
// had taken none but the session had, earlier, that is a limit per session: the session is spent,
// and the RCPT goes to a fresh one. Either way the RCPT is asked again — a probe too, since the
// accepted addresses of its domain wait for its answer. Said before the session took any
// recipient, it is no limit a new session can work around (sending it to one would open session
// after session): an address's answer is unknown, a probe's inconclusive.
func (s *session) overLimit(it rcpt, rep Reply) {
	switch {
	case s.txnTaken > 0:
		s.rcptMax = min(s.rcptMax, s.txnTaken)
		s.pl.learnTxnMax(s.txnTaken)
	case s.taken > 0:
		s.full = true
	default:
		s.full = true
		if it.probe != nil {
			s.pl.p.resolveCatchAll(it.probe, caInconclusive)
		} else {
			it.j.finish(Result{Verdict: Unknown, Host: it.j.host(), Reply: rep})
		}
		return
	}
	if it.probe != nil {
		s.pl.reask(it)
	} else {
		s.pl.requeueJobs([]*job{it.j}, false)
	}
}

// tooManyRecipients reports a 452 that is a recipient limit (enhanced code 4.5.3, or no enhanced
// code and "recipients" in the text), not a mailbox's answer such as 452 4.2.2 "Recipient's
// mailbox is full".
func tooManyRecipients(rep Reply) bool {
	return rep.Code == 452 && (rep.Enhanced == "4.5.3" || rep.Enhanced == "" && strings.Contains(strings.ToLower(rep.Text), "recipients"))
}

// abandon settles RCPTs that got no answer: probes are inconclusive; jobs past their budget are
// unknown, the others go back to the pool — unless final, when the server's refusal covers them.
func (s *session) abandon(batch []rcpt, err error, final bool) {
	now := time.Now()
	var back []*job
	for _, it := range batch {
		if it.probe != nil {
			s.pl.p.resolveCatchAll(it.probe, caInconclusive)
			continue
		}
		switch {
		case final:
			r := Result{Verdict: Unknown, Host: it.j.host(), Err: err}
			if mr := (*mailRefused)(nil); errors.As(err, &mr) {
				r.MailReply = mr.rep
			}
			it.j.finish(r)
		case it.j.expired(now) || isTimeout(err):
			it.j.finish(Result{Verdict: Unknown, Host: it.j.host(), Err: fmt.Errorf("%w: %v", ErrTimeout, err)})
		default:
			it.j.lastErr = err
			back = append(back, it.j)
		}
	}
	if len(back) > 0 {
		s.pl.requeue(back)
	}
}

// bannerError is a greeting other than 220.
type bannerError struct{ r Reply }

func (e *bannerError) Error() string { return "banner: " + e.r.String() }

// persistent reports whether a failure to open a session will not go away by itself: a 5xx
// greeting (554 "no SMTP service here", a blocked client). Refusals, timeouts and 421 may.
func persistent(err error) bool {
	var be *bannerError
	return errors.As(err, &be) && be.r.Code/100 == 5
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// errUnsolicited is a reply that no command asked for: bytes that were already waiting when a
// command was about to be sent, or that followed the last reply a write asked for. The server
// talks before its turn (an early talker) or answers some command twice; either way which reply
// answers which command is no longer known, so none of them is trusted.
var errUnsolicited = fmt.Errorf("%w: it sent a reply no command asked for", ErrProtocol)

// send writes cmds and reads one reply per command: all in one write when the server offers
// PIPELINING (RFC 2920), otherwise one at a time. It returns the replies read before any error,
// or none when the server sent more than was asked for (errUnsolicited).
func (s *session) send(cmds []string) ([]Reply, error) {
	replies := make([]Reply, 0, len(cmds))
	flush := func() error {
		if s.r.Buffered() > 0 {
			return errUnsolicited
		}
		s.wrote = true
		return s.w.Flush()
	}
	for i, c := range cmds {
		s.pl.p.commands.Add(1)
		s.w.WriteString(c)
		s.w.WriteString("\r\n")
		if s.pipelining && i < len(cmds)-1 {
			continue
		}
		if err := flush(); err != nil {
			if err == errUnsolicited {
				return nil, err
			}
			return replies, err
		}
		for len(replies) <= i {
			rep, err := s.read()
			if err != nil {
				s.stalled = s.stalled || isTimeout(err)
				return replies, err
			}
			s.pl.p.observe(cmds[len(replies)], rep.Code)
			replies = append(replies, rep)
		}
	}
	if s.r.Buffered() > 0 {
		return nil, errUnsolicited
	}
	return replies, nil
}

// read reads one (possibly multi-line) reply; the lines of a multi-line reply are joined by \n.
// What it reads is bounded: a line longer than the reader's buffer (4 KiB), a reply of more than
// maxReplyLines lines, or lines whose codes differ (RFC 5321 §4.2.1 has every line carry the
// same one; "550-… 250 Ok" would otherwise read as whichever came last) are a malformed reply,
// and the connection's deadline bounds the time, however slowly the bytes come.
func (s *session) read() (Reply, error) {
	if s.wrote {
		s.wrote = false
		s.pl.p.roundTrips.Add(1)
	}
	var lines []string
	first := 0
	for n := 0; ; n++ {
		line, err := s.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return Reply{}, fmt.Errorf("%w: a reply line longer than %d bytes", ErrProtocol, s.r.Size())
		}
		if err != nil {
			return Reply{}, err
		}
		l := strings.TrimRight(string(line), "\r\n")
		if len(l) < 3 || n >= maxReplyLines {
			return Reply{}, fmt.Errorf("%w: malformed reply %q", ErrProtocol, l)
		}
		code, err := strconv.Atoi(l[:3])
		if err != nil || code < 200 || code > 599 {
			return Reply{}, fmt.Errorf("%w: malformed reply %q", ErrProtocol, l)
		}
		if n == 0 {
			first = code
		} else if code != first {
			return Reply{}, fmt.Errorf("%w: malformed reply: code %d after %d", ErrProtocol, code, first)
		}
		text := ""
		if len(l) > 4 {
			text = l[4:]
		}
		lines = append(lines, text)
		if len(l) == 3 || l[3] == ' ' {
			enh, rest := parseEnhanced(code, text)
			if len(lines) > 1 {
				rest = strings.Join(lines, "\n")
			}
			return Reply{Code: code, Enhanced: enh, Text: rest}, nil
		}
		if l[3] != '-' {
			return Reply{}, fmt.Errorf("%w: malformed reply %q", ErrProtocol, l)
		}
	}
}

// maxReplyLines bounds the lines of one reply: real EHLO replies, the longest, have a few dozen.
const maxReplyLines = 101

// quit ends the session. No result waits for the reply to QUIT; but the session's slot is only
// freed once the server has answered or hung up (within a short bound), so that the server never
// counts more than MaxPerHost connections from this worker.
func (s *session) quit() {
	if s.quitted {
		s.conn.Close()
		return
	}
	s.conn.SetDeadline(time.Now().Add(quitWait))
	s.w.WriteString("QUIT\r\n")
	s.pl.p.commands.Add(1)
	if s.w.Flush() == nil && !s.broken {
		s.r.ReadSlice('\n')
	}
	s.conn.Close()
}

// quitWait bounds the wait for the server to acknowledge QUIT.
const quitWait = 250 * time.Millisecond

// drainWait bounds how long a stalled session waits for the server to answer what it was sent;
// drainStep is how often it looks whether it should stop waiting sooner.
const (
	drainWait = 30 * time.Second
	drainStep = 100 * time.Millisecond
)

// drain keeps a stalled session's connection, and so its place among MaxPerHost and its fleet
// slot, until the server has answered the commands it was sent and QUIT, or hung up: a server
// still at work on a connection counts it, whether or not the client has closed its end, and
// closing at once would let a slow server collect one such connection per session abandoned
// (docs/architecture.md, "Misbehaving servers"). It stops sooner, closing, once drainWait has
// passed, the prober closes, or the lease lapses (the slot may soon be someone else's).
func (s *session) drain() {
	end := time.Now().Add(drainWait)
	if !s.quitted {
		s.conn.SetDeadline(time.Now().Add(quitWait))
		s.w.WriteString("QUIT\r\n")
		s.pl.p.commands.Add(1)
		s.quitted = true
		if s.w.Flush() != nil {
			return
		}
	}
	buf := make([]byte, 4096)
	for now := time.Now(); now.Before(end); now = time.Now() {
		select {
		case <-s.pl.p.closing:
			return
		default:
		}
		if s.lease != nil && !s.lease.Valid() {
			return
		}
		step := now.Add(drainStep)
		if step.After(end) {
			step = end
		}
		s.conn.SetReadDeadline(step)
		if _, err := s.r.Read(buf); err != nil && !isTimeout(err) {
			return // EOF: the server has hung up
		}
	}
}
