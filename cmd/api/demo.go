package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/verify"
)

// serveDemo is dev mode in the demo world of `make demo`: the embedded mail simulator answers
// every DNS look-up and SMTP probe of the in-process verifier, so that the demo addresses show
// every outcome on a machine with no route to the internet.
func serveDemo(ctx context.Context, cfg config.Config, log *slog.Logger, stdout io.Writer) error {
	world, err := mailsim.StartDemo()
	if err != nil {
		return fmt.Errorf("demo mail world: %w", err)
	}
	defer world.Close()
	log.Info("demo mail world started", "dns", world.DNSAddr(), "smtp_port", world.SMTPPort())
	return serve(ctx, cfg, log, stdout, world)
}

// engineConfig is the verification engine's configuration: cfg, or, in the demo world, cfg pointed
// at the world as the tests do it — DNS through the world's resolver, probes to its SMTP port and
// never through a proxy (the world is on loopback), the world's loopback range allowed to the
// prober (which refuses private and reserved MX addresses otherwise), and the demo's "large
// provider" on the blocked list. Only the engine is pointed there: webhook deliveries keep the real resolver.
func engineConfig(cfg verify.Config, world *mailsim.World) verify.Config {
	if world == nil {
		return cfg
	}
	cfg.MX.Server = world.DNSAddr()
	cfg.SMTP.Port = world.SMTPPort()
	cfg.SMTP.Proxy = ""
	cfg.SMTP.AllowCIDRs = append(slices.Clone(cfg.SMTP.AllowCIDRs), mailsim.Prefix)
	cfg.SMTP.Blocked = append(slices.Clone(cfg.SMTP.Blocked), mailsim.DemoBlockedDomain)
	return cfg
}

// writeDemoAddresses lists the demo addresses and what each shows, for the start-up banner.
func writeDemoAddresses(w io.Writer) {
	width := 0
	for _, a := range mailsim.DemoAddresses {
		width = max(width, len(a.Email))
	}
	fmt.Fprintln(w, "Demo world: a mail simulator on loopback answers every DNS look-up and SMTP probe. Verify:")
	for _, a := range mailsim.DemoAddresses {
		fmt.Fprintf(w, "  %-*s  %s\n", width, a.Email, a.Shows)
	}
	fmt.Fprintln(w)
}
