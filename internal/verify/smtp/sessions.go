package smtp

import "net/netip"

// OpenSessions calls fn with every MX address this prober has sessions open to (busy or idle) and
// their number, for the mailvet_smtp_sessions gauge. It reads the pools when asked, so the probe
// path pays nothing for the gauge, and it skips the addresses with no session open, so a scrape
// sees at most as many addresses as there are sessions.
func (p *Prober) OpenSessions(fn func(ip netip.Addr, n int)) {
	p.mu.Lock()
	pools := make([]*pool, 0, len(p.pools))
	for _, pl := range p.pools {
		pools = append(pools, pl)
	}
	p.mu.Unlock()
	for _, pl := range pools {
		pl.mu.Lock()
		n := len(pl.live)
		pl.mu.Unlock()
		if n > 0 {
			fn(pl.ip, n)
		}
	}
}
