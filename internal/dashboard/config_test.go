package dashboard

import (
	"testing"

	"github.com/mailvet/mailvet/internal/config"
)

// testConfig is the dashboard's configuration from the environment env, read as a process reads
// it and mapped as the API server maps it (internal/api, dashboardConfig).
func testConfig(t *testing.T, env map[string]string) Config {
	t.Helper()
	cfg := loadConfig(t, env)
	return Config{
		PublicURL:      cfg.PublicURL,
		TrustedProxies: cfg.TrustedProxies,
		Plans:          cfg.Plans,
		Lists:          ListLimits{MaxRows: cfg.Lists.MaxRows, MaxBytes: cfg.Lists.MaxBytes},
		SessionTTL:     cfg.DashboardSessionTTL,
		SessionIdle:    cfg.DashboardSessionIdle,
		Signup:         cfg.Signup,
		ConfirmTTL:     cfg.ConfirmTTL,
		ResetTTL:       cfg.ResetTTL,
	}
}

// loadConfig is the API process's configuration from env.
func loadConfig(t *testing.T, env map[string]string) config.Config {
	t.Helper()
	cfg, err := config.Load(config.RoleAPI, false, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
