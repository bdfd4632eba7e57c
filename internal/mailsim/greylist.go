package mailsim

import (
	"strings"
	"time"
)

// greylisted reports whether d, scripted with GreylistFor, still greylists RCPTs: its clock starts
// at the domain's first RCPT, and every RCPT before GreylistFor has passed since then is deferred
// with ReplyGreylisted, like a greylisting daemon that lets a sender in once it has come back
// after the minimum delay. The clock is per domain, not per client: every client of a World is on
// loopback, and a per-recipient count would defer each new random local part of a catch-all
// check forever.
func (w *World) greylisted(dom string, d *Domain) bool {
	if d.GreylistFor <= 0 {
		return false
	}
	key := strings.ToLower(strings.TrimSuffix(dom, "."))
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.greySince == nil {
		w.greySince = map[string]time.Time{}
	}
	first, ok := w.greySince[key]
	if !ok {
		w.greySince[key] = now
		return true
	}
	return now.Sub(first) < d.GreylistFor
}
