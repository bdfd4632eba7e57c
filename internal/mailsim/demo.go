package mailsim

// The demo world of `make demo` (`api -dev -demo`): a few domains whose DNS and SMTP answers show
// every verification outcome on a machine with no route to the internet. Every simulated domain
// is under .example (RFC 2606), so no name here can exist on the internet and nothing the demo
// shows can be mistaken for a real mailbox. Two addresses need no simulation: the disposable one
// is decided from the embedded list before any look-up, and the typo's domain is simply absent
// from the world (NXDOMAIN).

// DemoAddress is one address of the demo world and what verifying it shows.
type DemoAddress struct {
	Email string
	Shows string // for people: the status and why
}

// DemoBlockedDomain plays a large provider that blocks probing. It must be on the prober's
// blocked list (MAILVET_SMTP_BLOCKED_DOMAINS), so its mail server is never dialled; the demo adds
// it there rather than imitating a real provider such as gmail.com.
const DemoBlockedDomain = "mail.example"

// DemoAddresses are the addresses the demo prints, one per outcome.
var DemoAddresses = []DemoAddress{
	{"ann@acme.example", "deliverable: the mailbox exists (RCPT 250)"},
	{"zoe@acme.example", "undeliverable: no such mailbox (RCPT 550 5.1.1)"},
	{"anyone@globex.example", "catch_all: the server accepts every address"},
	{"bob@initech.example", "unknown: greylisted (RCPT 450 4.7.1)"},
	{"ann@" + DemoBlockedDomain, "unknown, smtp_blocked: a provider that blocks probes is never dialled"},
	{"temp@mailinator.com", "invalid, disposable: decided locally from the embedded list"},
	{"ann@mial.example", "invalid, no_mx, suggestion mail.example: a typo"},
}

// StartDemo starts the demo world: its DNS server and one SMTP server per simulated domain.
func StartDemo() (*World, error) {
	w, err := Start(Options{})
	if err != nil {
		return nil, err
	}
	if err := scriptDemo(w); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// scriptDemo adds the simulated domains. Each has a mail server of its own, so that one domain's
// replies (a greylisting delay, a pipelined batch) never hold up another's.
func scriptDemo(w *World) error {
	domains := []struct {
		name   string
		script Domain
	}{
		{"acme.example", Domain{Users: []string{"ann", "bob", "info"}}},
		{"globex.example", Domain{CatchAll: true}},
		{"initech.example", Domain{All: &ReplyGreylisted}},
		// Scripted like a working domain, to show that the block list, not the server, decides.
		{DemoBlockedDomain, Domain{Users: []string{"ann"}}},
	}
	for _, d := range domains {
		mx := "mx." + d.name
		if _, err := w.AddServer(ServerOptions{Name: mx}); err != nil {
			return err
		}
		d.script.MX = []MX{{Pref: 10, Host: mx}}
		w.AddDomain(d.name, d.script)
	}
	return nil
}
