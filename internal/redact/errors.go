package redact

import (
	"errors"
	"net"
	"regexp"
	"strings"
)

// Address returns err with every occurrence of the email address addr, in any case, replaced by
// placeholder, for the log line of a failure whose other end quotes the address it refused: a
// mail relay ("550 5.1.1 <ann@example.com>: Recipient address rejected"), Stripe ("Invalid email
// address: ann@example.com"). Logs carry no email address (docs/personal-data.md). errors.Is and
// errors.As still see err.
func Address(err error, addr, placeholder string) error {
	if err == nil || addr == "" {
		return err
	}
	re := regexp.MustCompile("(?i)" + regexp.QuoteMeta(addr))
	msg := err.Error()
	if !re.MatchString(msg) {
		return err
	}
	return &scrubbed{msg: re.ReplaceAllLiteralString(msg, placeholder), err: err}
}

// Peer returns err with the remote address of the network operation it wraps taken out of its
// text, for the log lines of a write to a client that went away: Go's error names both ends of
// the connection ("write tcp 10.0.0.5:8080->203.0.113.7:51234: broken pipe"), and the remote one
// is the client's IP address, which logs carry only where docs/personal-data.md says so.
// errors.Is and errors.As still see err.
func Peer(err error) error {
	var op *net.OpError
	if err == nil || !errors.As(err, &op) || op.Addr == nil {
		return err
	}
	addr := op.Addr.String()
	msg := err.Error()
	if addr == "" || !strings.Contains(msg, addr) {
		return err
	}
	return &scrubbed{msg: strings.ReplaceAll(msg, addr, "(the client)"), err: err}
}

type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }
