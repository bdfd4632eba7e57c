package api

import (
	"testing"

	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verifyworker"
)

// engineConfig is the verification engine's part of cfg, as the binaries build it.
func engineConfig(tb testing.TB, cfg config.Config) verify.Config {
	tb.Helper()
	vc, err := verifyworker.EngineConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return vc
}
