package verifyworker

import (
	"fmt"

	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verify/disposable"
	"github.com/mailvet/mailvet/internal/verify/mx"
	"github.com/mailvet/mailvet/internal/verify/smtp"
)

// EngineConfig is the verification engine's part of cfg, for the binaries that verify (the
// verifier, and the API for its local layers). It reads the operator's disposable-domain files as
// the engine will, so that a line that is not a domain stops the start-up with an error naming its
// variable (docs/operations.md, "Data lists"): a typo in a blocklist must not silently block or
// allow nothing.
func EngineConfig(cfg config.Config) (verify.Config, error) {
	for _, f := range []struct{ name, path string }{
		{"MAILVET_DISPOSABLE_EXTRA_FILE", cfg.DisposableExtraFile},
		{"MAILVET_DISPOSABLE_ALLOW_FILE", cfg.DisposableAllowFile},
	} {
		if f.path == "" {
			continue
		}
		if err := disposable.CheckFile(f.path); err != nil {
			return verify.Config{}, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	return verify.Config{
		DisposableExtraFile: cfg.DisposableExtraFile,
		DisposableAllowFile: cfg.DisposableAllowFile,
		MX:                  mx.Config{Server: cfg.DNSResolver},
		SMTP: smtp.Config{
			Port:       cfg.SMTPPort,
			Helo:       cfg.SMTPHelo,
			MailFrom:   cfg.SMTPMailFrom,
			Timeout:    cfg.SMTPTimeout,
			Proxy:      cfg.SMTPProxy,
			Blocked:    cfg.SMTPBlockedDomains,
			MaxPerHost: cfg.SMTPMaxPerHost,
			AllowCIDRs: cfg.SMTPAllowCIDRs,
		},
	}, nil
}
