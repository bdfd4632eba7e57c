package api

import (
	"testing"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/verify"
)

// engineConfig is the verification engine's part of cfg, as the binaries build it.
func engineConfig(tb testing.TB, cfg config.Config) verify.Config {
	tb.Helper()
	vc, err := app.VerifyConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return vc
}
