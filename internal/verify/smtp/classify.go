package smtp

import (
	"strings"
	"unicode/utf8"
)

// Meaning is what a reply says about the address it answers, named like the API's reasons
// (docs/api.md, "Reasons") so that the verify package passes it on unchanged.
type Meaning string

// The meanings a reply can have.
const (
	MeaningAccepted        Meaning = "accepted"                // 250, 251
	MeaningMailboxUnknown  Meaning = "mailbox_unknown"         // the mailbox does not exist
	MeaningMailboxDisabled Meaning = "mailbox_disabled"        // the mailbox exists no more: disabled, suspended, inactive
	MeaningMailboxFull     Meaning = "mailbox_full"            // over quota
	MeaningPolicyBlocked   Meaning = "policy_blocked"          // the server refuses us, or says nothing we can read
	MeaningSenderRejected  Meaning = "sender_rejected"         // the server refuses our envelope sender
	MeaningGreylisted      Meaning = "greylisted"              // a deferral that asks to come back later
	MeaningTemporary       Meaning = "temporarily_unavailable" // any other deferral
)

// Meanings lists every meaning Classify can return.
var Meanings = []Meaning{
	MeaningAccepted, MeaningMailboxUnknown, MeaningMailboxDisabled, MeaningMailboxFull,
	MeaningPolicyBlocked, MeaningSenderRejected, MeaningGreylisted, MeaningTemporary,
}

// Class is the reading of one reply: the verdict it gives the address, and why.
type Class struct {
	Verdict Verdict
	Meaning Meaning
}

// Classify reads a reply to RCPT by its code, its enhanced code and its text together, by the
// rules of docs/architecture.md, "Reading replies". The rules are the table below, tried in
// order; the first that matches decides. The phrase families they test are the lists after it.
func Classify(r Reply) Class {
	s := readSignals(r)
	for _, rule := range rules {
		if rule.match(s) {
			return rule.out
		}
	}
	// Unreachable: the last rule matches every reply.
	return Class{Unknown, MeaningTemporary}
}

// classify is the verdict alone, for the session code.
func classify(r Reply) Verdict { return Classify(r).Verdict }

// signals are what a reply says, found once and tested by the rules.
type signals struct {
	code     int
	class    int    // the first digit: a code outside RFC 5321's table is read by it
	enhanced string // like "5.1.1", or empty
	sender   bool   // our envelope sender is refused (SenderRefused)
	found    uint32 // a bit per family whose phrases the text holds
}

func (s signals) has(f family) bool { return s.found&(1<<f) != 0 }

// rule is one row of the table: a condition on the signals and the class it gives.
type rule struct {
	name  string
	match func(signals) bool
	out   Class
}

// rules is the classifier's table. Its order is its precedence:
//   - the sender's refusal first, since it would say the same of every address;
//   - a deferral (4xx) never says anything for good;
//   - for a refusal (5xx), text that names us (our address, our host, our reputation, a block
//     list, relaying, an administrative rule) first, then text about the mailbox (full, a rate
//     it receives at, disabled, gone), then the enhanced code, then the fallback: a refusal that
//     says nothing we can read is a policy refusal (unknown), never "no such mailbox".
var rules = []rule{
	{"accepted", func(s signals) bool { return s.code == 250 || s.code == 251 }, Class{Deliverable, MeaningAccepted}},
	{"sender refused for good", func(s signals) bool { return s.sender && s.class == 5 }, Class{Unknown, MeaningSenderRejected}},

	{"deferred: mailbox full", func(s signals) bool { return s.class == 4 && (s.has(famFull) || s.enhanced == "4.2.2") }, Class{Unknown, MeaningMailboxFull}},
	{"deferred: service closing", func(s signals) bool { return s.code == 421 }, Class{Unknown, MeaningTemporary}},
	{"deferred: greylisting", func(s signals) bool {
		return s.class == 4 && (s.has(famGreylist) || (s.code == 450 || s.code == 451) && strings.HasPrefix(s.enhanced, "4.7."))
	}, Class{Unknown, MeaningGreylisted}},
	{"deferred: other", func(s signals) bool { return s.class == 4 }, Class{Unknown, MeaningTemporary}},

	// Microsoft 365's directory-based edge blocking refuses a recipient its directory does not
	// have in these words, which would otherwise read as a refusal of us.
	{"refused: recipient not in the directory", func(s signals) bool {
		return s.class == 5 && s.has(famDirectory) && (s.enhanced == "5.4.1" || s.enhanced == "5.7.504")
	}, Class{Undeliverable, MeaningMailboxUnknown}},
	{"refused: names us", func(s signals) bool { return s.class == 5 && s.has(famUs) }, Class{Unknown, MeaningPolicyBlocked}},
	{"refused: mailbox full", func(s signals) bool { return s.class == 5 && s.has(famFull) }, Class{Unknown, MeaningMailboxFull}},
	{"refused: recipient receives too fast", func(s signals) bool { return s.class == 5 && s.has(famRate) }, Class{Unknown, MeaningTemporary}},
	{"refused: mailbox disabled", func(s signals) bool {
		return s.class == 5 && s.has(famDisabled) && !s.has(famTemporary)
	}, Class{Undeliverable, MeaningMailboxDisabled}},
	{"refused: no such mailbox", func(s signals) bool { return s.class == 5 && s.has(famGone) }, Class{Undeliverable, MeaningMailboxUnknown}},
	{"refused: mailbox unavailable", func(s signals) bool {
		return s.class == 5 && s.has(famWeakGone) && !s.has(famRefusal) && !s.has(famTemporary)
	}, Class{Undeliverable, MeaningMailboxUnknown}},
	{"refused: says temporary", func(s signals) bool { return s.class == 5 && s.has(famTemporary) }, Class{Unknown, MeaningTemporary}},
	{"refused: 5.2.1 mailbox disabled", func(s signals) bool { return s.class == 5 && s.enhanced == "5.2.1" }, Class{Undeliverable, MeaningMailboxDisabled}},
	{"refused: 5.1.x bad address", func(s signals) bool { return s.class == 5 && strings.HasPrefix(s.enhanced, "5.1.") }, Class{Undeliverable, MeaningMailboxUnknown}},
	{"refused: 5.2.2 mailbox full", func(s signals) bool { return s.class == 5 && s.enhanced == "5.2.2" }, Class{Unknown, MeaningMailboxFull}},
	{"refused: unreadable", func(s signals) bool { return s.class == 5 }, Class{Unknown, MeaningPolicyBlocked}},
	{"anything else", func(signals) bool { return true }, Class{Unknown, MeaningTemporary}},
}

func readSignals(r Reply) signals {
	s := signals{code: r.Code, class: r.Code / 100, enhanced: r.Enhanced}
	if s.class != 4 && s.class != 5 {
		return s // an acceptance, or no reply class: its words change nothing
	}
	text := normalise(r)
	s.sender = senderRefused(r.Enhanced, text)
	if s.enhanced == "" {
		s.enhanced = hashEnhanced(text, s.class)
	}
	have := bytesOf(text)
	for _, p := range matchers {
		if !s.has(p.fam) && have.holds(p.bytes) && p.in(text) {
			s.found |= 1 << p.fam
		}
	}
	return s
}

// normalise lower-cases the reply's text and joins a multi-line reply into one line, without
// the enhanced code some servers repeat at the start of every line ("550-5.1.1 ..."), so that a
// phrase broken over two lines is still found.
func normalise(r Reply) string {
	lines := strings.Split(r.Text, "\n")
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if r.Enhanced != "" {
			l = strings.TrimSpace(strings.TrimPrefix(l, r.Enhanced))
		}
		lines[i] = l
	}
	return strings.ToLower(strings.Join(lines, " "))
}

// hashEnhanced finds an enhanced code written in the text as qmail and Cisco do ("no mailbox
// here by that name. (#5.1.1)", "#5.1.0 Address rejected."), when its class agrees with the
// reply's; "" when there is none.
func hashEnhanced(text string, class int) string {
	for _, after := range strings.Split(text, "#")[1:] {
		first, _, _ := strings.Cut(after, " ")
		if enh, _ := parseEnhanced(class*100, strings.TrimRight(first, ").,;")); enh != "" {
			return enh
		}
	}
	return ""
}

// matcher is one phrase made ready for matching, once, from the table below.
type matcher struct {
	fam   family
	text  string  // without the stem mark
	left  bool    // the phrase must not follow a word character
	right bool    // the phrase must not be followed by a word character
	bytes byteSet // the bytes the phrase is written with
}

// byteSet is a set of byte values. A text without one of a phrase's bytes cannot hold the
// phrase, and comparing two sets costs far less than looking for the phrase: most phrases are
// passed over so.
type byteSet [4]uint64

func bytesOf(s string) byteSet {
	var set byteSet
	for i := 0; i < len(s); i++ {
		set[s[i]>>6] |= 1 << (s[i] & 63)
	}
	return set
}

// holds reports whether every byte of sub is in set.
func (set byteSet) holds(sub byteSet) bool {
	return sub[0]&^set[0]|sub[1]&^set[1]|sub[2]&^set[2]|sub[3]&^set[3] == 0
}

var matchers = compile(phrases)

// compile reads each phrase's edges once. A phrase is matched as words (docs/architecture.md,
// "Reading replies"): not inside a longer word, so that "rbl" is not found in "verbless" nor
// "ip address" in "recip address". A phrase ending in '*' is a stem and may be followed by more
// letters ("prohibit*" finds "prohibited"). An edge in a script written without spaces between
// words (Chinese, Japanese) needs no boundary: "見つかりません" is found in "見つかりません。".
func compile(list []struct {
	fam  family
	text string
}) []matcher {
	out := make([]matcher, len(list))
	for i, p := range list {
		text, stem := strings.CutSuffix(p.text, "*")
		first, _ := utf8.DecodeRuneInString(text)
		last, _ := utf8.DecodeLastRuneInString(text)
		out[i] = matcher{fam: p.fam, text: text, left: spacedWordRune(first), right: !stem && spacedWordRune(last), bytes: bytesOf(text)}
	}
	return out
}

// in reports whether the phrase occurs in text as words.
func (m matcher) in(text string) bool {
	for from := 0; from < len(text); {
		i := strings.Index(text[from:], m.text)
		if i < 0 {
			return false
		}
		i += from
		end := i + len(m.text)
		if (!m.left || i == 0 || !isWordByte(text[i-1])) && (!m.right || end == len(text) || !isWordByte(text[end])) {
			return true
		}
		from = i + 1
	}
	return false
}

// spacedWordRune reports whether r is a letter or digit of a script whose words are set apart
// by spaces; CJK and the scripts after them are not.
func spacedWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return isWordByte(byte(r))
	}
	return r < 0x2E80
}

// isWordByte reports whether b belongs to a word: an ASCII letter, digit or '_', or any byte of
// a multi-byte character.
func isWordByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '_' || b >= 0x80
}

// family is a kind of phrase the rules test for.
type family int

const (
	famGone      family = iota // the mailbox does not exist
	famWeakGone                // "mailbox unavailable" and the like: gone unless the text also refuses us
	famDisabled                // the mailbox is disabled, suspended, inactive
	famFull                    // the mailbox is over quota
	famRate                    // the recipient receives mail faster than it may
	famUs                      // the refusal is about us: address, host, reputation, block list, relaying, rules
	famRefusal                 // words of a refusal ("denied", "blocked"), which make "mailbox unavailable" ambiguous
	famTemporary               // the text says the condition is temporary
	famGreylist                // greylisting
	famDirectory               // Microsoft 365's "Recipient address rejected: Access denied"
)

// phrases are the words each family is recognised by, lower case. They come from the corpus of
// real replies in testdata/replies.tsv; a phrase added here needs a row there that shows it.
var phrases = []struct {
	fam  family
	text string
}{
	// The mailbox does not exist.
	{famGone, "no such user"}, {famGone, "no such mailbox"}, {famGone, "no such recipient"},
	{famGone, "no such address"}, {famGone, "no such account"}, {famGone, "no such person"},
	{famGone, "user unknown"}, {famGone, "unknown user"}, {famGone, "user is unknown"},
	{famGone, "unknown recipient"}, {famGone, "recipient unknown"}, {famGone, "unknown mailbox"},
	{famGone, "unknown address"}, {famGone, "address unknown"}, {famGone, "addressee unknown"},
	{famGone, "unknown local part"}, {famGone, "unknown local-part"}, {famGone, "unknown e-mail address"},
	{famGone, "unknown email address"}, {famGone, "unknown or illegal"}, {famGone, "unknown virtual user"},
	{famGone, "user not found"}, {famGone, "recipient not found"}, {famGone, "mailbox not found"},
	{famGone, "address not found"}, {famGone, "account not found"}, {famGone, "recipientnotfound"},
	{famGone, "recipnotfound"}, {famGone, "does not exist"}, {famGone, "doesn't exist"},
	{famGone, "does not exists"}, {famGone, "does no exist*"}, {famGone, "host unknown"},
	{famGone, "address not known"}, {famGone, "user not known"}, {famGone, "not exist"}, {famGone, "no mailbox"}, {famGone, "no mail box"},
	{famGone, "invalid recipient"}, {famGone, "invalid mailbox"}, {famGone, "invalid user"},
	{famGone, "invalid address"}, {famGone, "address invalid"}, {famGone, "mailbox invalid"},
	{famGone, "not a valid mailbox"}, {famGone, "not a valid recipient"}, {famGone, "not a valid user"},
	{famGone, "not a known user"}, {famGone, "unrouteable address"}, {famGone, "unroutable address"},
	{famGone, "bad destination mailbox address"}, {famGone, "user not local"}, {famGone, "not our customer"},
	{famGone, "doesn't have a"}, {famGone, "does not have an account"}, {famGone, "no account by that name"},
	{famGone, "no one at this address"}, {famGone, "unavailable mail user"}, {famGone, "not listed in domino directory"},
	{famGone, "user doesn't exist"}, {famGone, "non-existent"}, {famGone, "nonexistent user"},
	{famGone, "marked as invalid"}, {famGone, "dosn't exist"}, {famGone, "could not be found"},
	{famGone, "not present in directory"}, {famGone, "not an active address"},
	{famGone, "invalid-recipient"}, {famGone, "userunknown"}, {famGone, "user has moved"},
	{famGone, "has been replaced by"},
	// The same in other languages: Italian, Spanish, French, and HCL Domino's directory in
	// Spanish, French and Japanese.
	{famGone, "nessun utente"}, {famGone, "no existe"}, {famGone, "utilisateur inconnu"},
	{famGone, "no se encuentra en el directorio"}, {famGone, "non répertorié dans l'annuaire"},
	{famGone, "ディレクトリには見つかりません"},

	{famWeakGone, "mailbox unavailable"}, {famWeakGone, "mailbox is unavailable"},
	{famWeakGone, "mailbox not available"}, {famWeakGone, "mailbox currently unavailable"}, {famWeakGone, "not found"},
	{famWeakGone, "mailbox unavaiable"}, {famWeakGone, "account unavailable"},

	// The mailbox is disabled.
	{famDisabled, "disabled"}, {famDisabled, "deactivated"}, {famDisabled, "inactive"},
	{famDisabled, "suspend*"}, {famDisabled, "account closed"}, {famDisabled, "account has been closed"},
	{famDisabled, "no longer active"}, {famDisabled, "no longer valid"}, {famDisabled, "no longer accepts mail"},
	{famDisabled, "is locked"}, {famDisabled, "frozen"}, {famDisabled, "terminated"},
	{famDisabled, "discontinued"}, {famDisabled, "archived recipient"}, {famDisabled, "user not active"},

	// The mailbox is full.
	{famFull, "over quota"}, {famFull, "quota exceeded"}, {famFull, "exceeds quota"}, {famFull, "exceeded storage"},
	{famFull, "mailbox full"}, {famFull, "mailbox is full"}, {famFull, "out of storage"},
	{famFull, "storage space"}, {famFull, "over storage quota"}, {famFull, "insufficient disk space"},
	{famFull, "mailbox size limit"}, {famFull, "recipient storage full"},
	{famFull, "too many messages on the server"}, {famFull, "overquota"},
	// A mailbox that exists but has no room: qmail's "mailbox unavailable (not enough free
	// space)" must not read as "mailbox unavailable".
	{famFull, "not enough free space"}, {famFull, "full mailbox"}, {famFull, "mailbox exceeds allowed size"},
	{famFull, "exceed maximum allowed storage"}, {famFull, "mailfolder is full"},
	{famFull, "not sufficient disk space"}, {famFull, "quota violation"}, {famFull, "too much mail data"},
	{famFull, "exceeded quota"}, {famFull, "space has been used up"}, {famFull, "no space left on device"},

	// The recipient receives mail faster than it may: not about the mailbox's existence.
	{famRate, "receiving mail too quickly"}, {famRate, "receiving mail at a rate"},
	{famRate, "receive limit"}, {famRate, "recipient thread limit"}, {famRate, "frequency of receiving"},
	{famRate, "rate that prevents"}, {famRate, "exceeded their limit"},

	// The refusal is about us.
	{famUs, "your ip"}, {famUs, "ip address"}, {famUs, "ip addresses"}, {famUs, "client host"},
	{famUs, "client ip"}, {famUs, "sending ip"}, {famUs, "sender ip"}, {famUs, "banned sending"},
	{famUs, "your host"}, {famUs, "your server"}, {famUs, "your network"}, {famUs, "mail server ["},
	{famUs, "reverse dns"}, {famUs, "rdns"}, {famUs, "ptr"}, {famUs, "reverse lookup"},
	// The prober reached the domain's MX through its DNS records, so a reply that speaks of DNS
	// records speaks of ours: our sender domain's MX, our host name (1&1/IONOS's "mailbox
	// unavailable invalid DNS MX or A/AAAA resource record" refuses our sender's domain).
	{famUs, "dns"},
	{famUs, "your domain"}, {famUs, "sending domain"}, {famUs, "your account"}, {famUs, "helo"}, {famUs, "ehlo"},
	{famUs, "blocked using"}, {famUs, "blacklist*"}, {famUs, "black list*"}, {famUs, "blocklist*"},
	{famUs, "block list*"}, {famUs, "black listed"}, {famUs, "block listed"}, {famUs, "rbl"},
	{famUs, "dnsbl"}, {famUs, "spamhaus"}, {famUs, "spamcop"}, {famUs, "barracudacentral"},
	{famUs, "sorbs"}, {famUs, "reputation"}, {famUs, "relay access"}, {famUs, "relaying"},
	{famUs, "relay denied"}, {famUs, "relay not permitted"}, {famUs, "unable to relay"},
	{famUs, "open relay"}, {famUs, "relay prohibited"}, {famUs, "mail relay"}, {famUs, "as a relay"},
	{famUs, "rcpthosts"},
	// "Administrative prohibition" refuses us; "Mailaddress is administratively disabled"
	// (qmail-ldap) says the mailbox is disabled, so the word is no stem.
	{famUs, "administrative"}, {famUs, "envelope blocked"},
	{famUs, "envelope rejected"}, {famUs, "prohibit*"}, {famUs, "spam"}, {famUs, "unsolicited"},
	{famUs, "spf"}, {famUs, "dkim"}, {famUs, "dmarc"}, {famUs, "authenticat*"},
	{famUs, "not authorized"}, {famUs, "banned"}, {famUs, "dynamic ip"}, {famUs, "blocked"},
	{famUs, "denied"}, {famUs, "sending limit"}, {famUs, "sending quota"}, {famUs, "submission quota"},
	{famUs, "relay limit"}, {famUs, "rate limit*"}, {famUs, "too many connections"},
	{famUs, "unusual rate"}, {famUs, "sender"}, {famUs, "message sending"},

	{famRefusal, "denied"}, {famRefusal, "deny"}, {famRefusal, "blocked"}, {famRefusal, "policy"},
	{famRefusal, "refused"}, {famRefusal, "not allowed"}, {famRefusal, "not permitted"},

	{famTemporary, "temporar*"}, {famTemporary, "try again later"}, {famTemporary, "try later"},

	{famGreylist, "greylist*"}, {famGreylist, "graylist*"}, {famGreylist, "grey-list*"},
	{famGreylist, "gray-list*"}, {famGreylist, "try again later"}, {famGreylist, "retry later"},

	{famDirectory, "recipient address rejected: access denied"},
}
