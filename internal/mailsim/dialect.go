package mailsim

// Dialect is how one kind of real mail server or provider words its answers: the replies it gives
// a recipient that does not exist, one whose mailbox is disabled, one over quota, a client it
// refuses by policy, and its greeting when it is too busy. A Domain answers in a dialect
// (Domain.Dialect); single mailboxes can answer in one through Domain.Mailboxes, a refusal of every
// recipient through Domain.All, and a busy greeting through ServerOptions.Banner.
//
// Every text is a real one, copied from the reply corpus of the prober's classifier
// (internal/verify/smtp/testdata/replies.tsv), which names where each was found (texts that the
// corpus has only as a lower-case fragment are written so here too); a zero Reply means the
// dialect has no wording of its own for that case.
type Dialect struct {
	Name        string
	UnknownUser Reply // a local part that does not exist
	Disabled    Reply // a mailbox that is disabled, suspended or inactive
	Full        Reply // a mailbox over quota
	Refusal     Reply // a refusal of the client that names no mailbox
	Busy        Reply // a 421 greeting
}

// The dialects.
var (
	// Google is Gmail and Google Workspace: multi-line replies that repeat the enhanced code on
	// every line ("550-5.1.1 The email account …"), written as the server writes them.
	Google = Dialect{
		Name: "google",
		UnknownUser: Reply{Code: 550, Text: "5.1.1 The email account that you tried to reach does not exist. Please try\n" +
			"5.1.1 double-checking the recipient's email address for typos or\n" +
			"5.1.1 unnecessary spaces. Learn more at\n" +
			"5.1.1 http://support.google.com/mail/bin/answer.py?answer=6596 vw5si4655694pab.333 - gsmtp"},
		Disabled: Reply{Code: 550, Enhanced: "5.2.1", Text: "The email account that you tried to reach is disabled."},
		Full:     Reply{Code: 452, Enhanced: "4.2.2", Text: "The email account that you tried to reach is over quota. Please direct the recipient to Clear Google Drive space & increase storage."},
		Refusal:  Reply{Code: 550, Enhanced: "5.7.1", Text: "Our system has detected an unusual rate of unsolicited mail originating from your IP address. To protect our users from spam, mail sent from your IP address has been blocked."},
		Busy:     Reply{Code: 421, Enhanced: "4.7.0", Text: "Try again later, closing connection. This usually indicates a Denial of Service (DoS) for the SMTP relay at the HELO stage."},
	}

	// Microsoft365 is Exchange Online.
	Microsoft365 = Dialect{
		Name:        "microsoft365",
		UnknownUser: Reply{Code: 550, Enhanced: "5.1.10", Text: "RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup"},
		Disabled:    Reply{Code: 550, Enhanced: "5.2.1", Text: "mailbox cannot be accessed"},
		Full:        Reply{Code: 550, Enhanced: "5.2.2", Text: "mailbox full"},
		Refusal:     Reply{Code: 550, Enhanced: "5.7.606", Text: "Access denied, banned sending IP [IP1.IP2.IP3.IP4]"},
		Busy:        Reply{Code: 421, Enhanced: "4.3.2", Text: "service not available"},
	}

	// Exim is Exim's wording for an address none of its routers accepts, as Freenet sends it.
	Exim = Dialect{
		Name:        "exim",
		UnknownUser: Reply{Code: 550, Text: "unrouteable address"},
		Refusal:     Reply{Code: 550, Text: "relay not permitted"},
	}

	// CPanel is Exim as cPanel configures it.
	CPanel = Dialect{
		Name:        "cpanel",
		UnknownUser: Reply{Code: 550, Text: "No Such User Here"},
		Refusal:     Reply{Code: 550, Text: "Verification failed"},
	}

	// Qmail answers with codes outside RFC 5321's table and writes the enhanced code into the
	// text ("(#5.1.1)").
	Qmail = Dialect{
		Name:        "qmail",
		UnknownUser: Reply{Code: 511, Text: "sorry, no mailbox here by that name. (#5.1.1)"},
		Refusal:     Reply{Code: 553, Text: "Sorry, this domain is not in my list of allowed hosts (#5.7.1)"},
		Busy:        Reply{Code: 421, Text: "temporary envelope failure (#4.3.0)"},
	}

	// Yahoo answers 554 without an enhanced code.
	Yahoo = Dialect{
		Name:        "yahoo",
		UnknownUser: Reply{Code: 554, Text: "delivery error: dd This user doesn't have a yahoo.com account (***@yahoo.com)"},
		Disabled:    Reply{Code: 554, Text: "delivery error: dd ****@yahoo.com is no longer valid."},
		Refusal:     Reply{Code: 553, Enhanced: "5.7.1", Text: "[BL23] Connections not accepted from IP addresses on Spamhaus XBL; see http://postmaster.yahoo.com/errors/550-bl23.html [550]"},
		Busy:        Reply{Code: 421, Enhanced: "4.7.0", Text: "[TSS04] Messages from 192.0.2.25 temporarily deferred due to unexpected volume or user complaints - 4.16.55.1; see https://postmaster.yahooinc.com/error-codes"},
	}

	// PolicyCodeUnknownUser says "no such user" under a policy code, 550 5.7.1, as a filtering
	// service in front of a provider's mailboxes does.
	PolicyCodeUnknownUser = Dialect{
		Name:        "policy-code",
		UnknownUser: Reply{Code: 550, Enhanced: "5.7.1", Text: ": Recipient address rejected: User email address is marked as invalid."},
		Refusal:     Reply{Code: 550, Enhanced: "5.7.1", Text: "Relay Access denied"},
	}

	// Gateway is a mail security gateway (Mimecast) refusing us under a bare 550 in words that
	// name no mailbox.
	Gateway = Dialect{
		Name:        "gateway",
		UnknownUser: Reply{Code: 550, Text: "invalid recipient"},
		Refusal:     Reply{Code: 550, Text: "administrative prohibition envelope blocked"},
		Busy:        Reply{Code: 421, Text: "sender address blocked"},
	}

	// Orange is Orange (Wanadoo) in France, which says in French and English and tells a full
	// mailbox under 5.1.1.
	Orange = Dialect{
		Name:        "orange",
		UnknownUser: Reply{Code: 550, Enhanced: "5.1.1", Text: "Adresse d au moins un destinataire invalide. Invalid recipient. OFR_416 [416]"},
		Full:        Reply{Code: 552, Enhanced: "5.1.1", Text: "Boite du destinataire pleine. Recipient overquota. OFR_417 [417]"},
		Refusal:     Reply{Code: 550, Text: "mwinf5c04 ME Adresse IP source bloquee pour incident de spam. Client host blocked for spamming issues. OFR006_102"},
		Busy:        Reply{Code: 421, Text: "mwinf5c79 ME Trop de connexions, veuillez verifier votre configuration. Too many connections, slow down. OFR005_104 [104]"},
	}

	// IONOS is 1&1/IONOS, whose refusal of a sender domain without a usable MX begins with the
	// words of a missing mailbox.
	IONOS = Dialect{
		Name:        "ionos",
		UnknownUser: Reply{Code: 550, Text: "Requested action not taken: mailbox unavailable"},
		Full:        Reply{Code: 550, Text: "Quota Exceeded"},
		Refusal:     Reply{Code: 550, Text: "Requested action not taken: mailbox unavailable invalid DNS MX or A/AAAA resource record"},
	}

	// Postfix is Postfix with its stock recipient checks.
	Postfix = Dialect{
		Name:        "postfix",
		UnknownUser: Reply{Code: 550, Enhanced: "5.1.1", Text: ": Recipient address rejected: User unknown in local recipient table"},
		Refusal:     Reply{Code: 550, Enhanced: "5.7.1", Text: "Service unavailable; Client host [x.x.x.x] blocked using Spamhaus"},
	}
)

// Dialects lists every dialect, for tests that go through all of them.
var Dialects = []Dialect{Google, Microsoft365, Exim, CPanel, Qmail, Yahoo, PolicyCodeUnknownUser, Gateway, Orange, IONOS, Postfix}

// unknownReply is the reply of d to a local part that does not exist.
func (d *Domain) unknownReply() Reply {
	switch {
	case d.Unknown != nil:
		return *d.Unknown
	case d.Dialect != nil && d.Dialect.UnknownUser.Code != 0:
		return d.Dialect.UnknownUser
	}
	return ReplyUnknownUser
}
