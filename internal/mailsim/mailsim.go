// Package mailsim is a scripted mail world on loopback for tests and benchmarks: one DNS server
// (UDP and TCP on 127.0.0.1) answering MX and A records per domain, and SMTP servers on distinct
// loopback addresses (127.0.0.2, 127.0.0.3, …) that all listen on one port, because the prober
// dials every MX address at the single configured MAILVET_SMTP_PORT.
//
// Behaviour is scripted per domain (DNS answers, mailboxes, catch-all, greylisting, policy blocks,
// slow replies, the wording of real servers' replies: dialect.go) and per server (tarpit,
// connection refused, STARTTLS required, SMTPUTF8 offered or not, added round-trip latency,
// recipient limits, a Postfix-like throttle after too many rejected recipients). Mailboxes may
// have UTF-8 names (RFC 6531), which a server accepts only in a transaction that declared
// SMTPUTF8. Every
// server counts sessions, peak concurrency, commands and round trips so that tests and
// benchmarks can assert on how politely and how efficiently a client behaved.
//
// Nothing here touches the internet: every socket is bound to 127.0.0.0/8.
package mailsim

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Options configure a World.
type Options struct {
	// RTT is the round-trip latency added to every DNS answer and every SMTP reply. A server's
	// own RTT, when set, overrides it.
	RTT time.Duration
}

// World is a DNS server plus any number of SMTP servers, all on loopback.
type World struct {
	opts Options
	dns  *dnsServer
	port int
	cert tls.Certificate

	mu      sync.Mutex
	domains map[string]*Domain    // lower-case domain ⇒ script
	hosts   map[string]netip.Addr // lower-case host name ⇒ address, for A answers
	cnames  map[string]string     // lower-case alias ⇒ lower-case canonical name (AddCNAME)
	servers []*Server
	nextIP  int
	holder  net.Listener // holds the common port on 127.0.0.2 for the World's lifetime

	greySince map[string]time.Time // domain ⇒ its first RCPT, for Domain.GreylistFor (greylist.go)
	rcptsTo   map[string]int64     // lower-case recipient ⇒ RCPT commands naming it (RcptsTo)
}

// Start starts the DNS server and reserves the common SMTP port. Call Close when done.
func Start(opts Options) (*World, error) {
	w := &World{opts: opts, domains: map[string]*Domain{}, hosts: map[string]netip.Addr{}, cnames: map[string]string{}, nextIP: 3}
	cert, err := selfSigned()
	if err != nil {
		return nil, err
	}
	w.cert = cert
	if w.dns, err = startDNS(w); err != nil {
		return nil, err
	}
	// 127.0.0.2 is never a server: holding the port there makes it unique among the Worlds alive
	// in this machine (each holds its own), so a "connection refused" server of one World can
	// never be answered by another World's listener on the same address and port.
	w.holder, err = net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		w.dns.close()
		return nil, fmt.Errorf("mailsim: reserve SMTP port: %w", err)
	}
	w.port = w.holder.Addr().(*net.TCPAddr).Port
	return w, nil
}

// Close stops every server.
func (w *World) Close() {
	w.dns.close()
	w.holder.Close()
	w.mu.Lock()
	servers := append([]*Server(nil), w.servers...)
	w.mu.Unlock()
	for _, s := range servers {
		s.close()
	}
}

// RcptsTo is how many RCPT commands, over every server and session, named addr (compared without
// regard to case): how often the World's servers were asked about that one mailbox.
func (w *World) RcptsTo(addr string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rcptsTo[strings.ToLower(addr)]
}

func (w *World) countRcpt(addr string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.rcptsTo == nil {
		w.rcptsTo = map[string]int64{}
	}
	w.rcptsTo[strings.ToLower(addr)]++
}

// DNSAddr is the resolver address (host:port) to configure, e.g. as MAILVET_DNS_RESOLVER.
func (w *World) DNSAddr() string { return w.dns.addr }

// SMTPPort is the port every SMTP server listens on.
func (w *World) SMTPPort() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.port
}

// Reply is one SMTP reply: a code, an optional enhanced status code like "5.1.1", and text.
type Reply struct {
	Code     int
	Enhanced string
	Text     string
}

// Common replies.
var (
	ReplyOK          = Reply{250, "2.1.5", "OK"}
	ReplyUnknownUser = Reply{550, "5.1.1", "No such user here"}
	ReplyGreylisted  = Reply{450, "4.7.1", "Greylisted, please try again later"}
	ReplyPolicy      = Reply{554, "5.7.1", "Client host rejected: access denied"}
	// ReplyNeedSMTPUTF8 refuses a UTF-8 mailbox in a transaction without SMTPUTF8 (Postfix).
	ReplyNeedSMTPUTF8 = Reply{553, "5.6.7", "Must declare SMTPUTF8 to send unicode address"}
)

func (r Reply) String() string {
	if r.Enhanced != "" {
		return fmt.Sprintf("%d %s %s", r.Code, r.Enhanced, r.Text)
	}
	return fmt.Sprintf("%d %s", r.Code, r.Text)
}

// MX is one MX record of a domain.
type MX struct {
	Pref uint16
	Host string // host name; its A record comes from the Server registered under that name
}

// Domain scripts one domain: its DNS answers and how its mailboxes answer RCPT.
type Domain struct {
	// DNS.
	MX       []MX
	NullMX   bool          // a single "0 ." MX record (RFC 7505)
	A        []string      // A records of the domain name itself (its implicit MX when it has no MX, RFC 5321 §5.1)
	Rcode    int           // a DNS error to answer with, like dns.RcodeNameError or dns.RcodeServerFailure
	Drop     bool          // never answer (the resolver times out)
	DropAAAA bool          // never answer AAAA queries, as some middleboxes do; others as set
	Delay    time.Duration // extra delay before the DNS answer
	NoGlue   bool          // leave MX hosts' addresses out of the additional section
	UDPTrunc bool          // answer UDP with TC=1 and no records, so that the client must retry on TCP

	// SMTP.
	Users     []string         // local parts that exist (250)
	CatchAll  bool             // every local part is accepted
	Unknown   *Reply           // the reply for a local part that does not exist; nil means the dialect's, else ReplyUnknownUser
	Dialect   *Dialect         // the wording of the domain's answers (dialect.go); nil means mailsim's own
	Mailboxes map[string]Reply // per-local-part replies that override everything else
	All       *Reply           // a reply for every RCPT of the domain (greylisting, policy block)
	RcptDelay time.Duration    // processing time before each RCPT reply for the domain
	// GreylistFor greylists every RCPT of the domain (ReplyGreylisted) until this long after its
	// first RCPT, then answers as scripted: real greylisting, which lets a retry in (greylist.go).
	GreylistFor time.Duration
}

// AddDomain scripts a domain (replacing an earlier script of the same name).
func (w *World) AddDomain(name string, d Domain) {
	w.mu.Lock()
	defer w.mu.Unlock()
	dd := d
	w.domains[strings.ToLower(strings.TrimSuffix(name, "."))] = &dd
}

// AddHost answers A queries for name with addr: a mail server the World does not run (a real
// Postfix beside it, say), reached through the World's DNS like its own servers.
func (w *World) AddHost(name string, addr netip.Addr) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hosts[strings.ToLower(strings.TrimSuffix(name, "."))] = addr
}

// AddCNAME declares name an alias of target (a CNAME record), replacing an earlier alias of the
// same name. A query of any type for name is answered as a recursive resolver would: the CNAME
// record, followed by target's own answer (its A records, or NXDOMAIN when target does not exist).
// A name that is an alias has no other records of its own, so it must not also be a domain or a
// server name. An MX host that is an alias gets no glue: the client has to look up its address.
func (w *World) AddCNAME(name, target string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cnames[strings.ToLower(strings.TrimSuffix(name, "."))] = strings.ToLower(strings.TrimSuffix(target, "."))
}

func (w *World) cname(name string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.cnames[strings.ToLower(strings.TrimSuffix(name, "."))]
	return t, ok
}

func (w *World) domain(name string) *Domain {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.domains[strings.ToLower(strings.TrimSuffix(name, "."))]
}

func (w *World) hostAddr(name string) (netip.Addr, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	a, ok := w.hosts[strings.ToLower(strings.TrimSuffix(name, "."))]
	return a, ok
}

// rcptReply decides the reply to RCPT TO:<addr> from the domain scripts.
func (w *World) rcptReply(addr string) (Reply, time.Duration) {
	at := strings.LastIndexByte(addr, '@')
	if at < 0 {
		return Reply{501, "5.1.3", "Bad recipient address syntax"}, 0
	}
	local, dom := addr[:at], addr[at+1:]
	d := w.domain(dom)
	if d == nil {
		return Reply{550, "5.7.1", "Relay access denied"}, 0
	}
	if r, ok := d.Mailboxes[local]; ok {
		return r, d.RcptDelay
	}
	if w.greylisted(dom, d) {
		return ReplyGreylisted, d.RcptDelay
	}
	if d.All != nil {
		return *d.All, d.RcptDelay
	}
	if d.CatchAll {
		return ReplyOK, d.RcptDelay
	}
	for _, u := range d.Users {
		if strings.EqualFold(u, local) {
			return ReplyOK, d.RcptDelay
		}
	}
	return d.unknownReply(), d.RcptDelay
}

// allocIP returns the next unused loopback address.
func (w *World) allocIP() (netip.Addr, error) {
	if w.nextIP > 250 {
		return netip.Addr{}, errors.New("mailsim: out of loopback addresses")
	}
	a := netip.AddrFrom4([4]byte{127, 0, 0, byte(w.nextIP)})
	w.nextIP++
	return a, nil
}
