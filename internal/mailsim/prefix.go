package mailsim

import "net/netip"

// Prefix is the range every socket of a World is bound to. The SMTP prober refuses loopback MX
// addresses unless allowed, so whatever probes a World allows this range
// (MAILVET_SMTP_ALLOW_CIDRS, smtp.Config.AllowCIDRs).
var Prefix = netip.MustParsePrefix("127.0.0.0/8")
