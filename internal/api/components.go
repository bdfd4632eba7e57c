package api

import (
	"github.com/mailvet/mailvet/internal/billing"
	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/dashboard"
)

// The API server takes the process configuration and builds from it the small configurations of
// the parts it serves, so that none of them depends on internal/config.

// billingConfig is the Stripe client's part of cfg.
func billingConfig(cfg config.Config) billing.Config {
	return billing.Config{SecretKey: cfg.StripeSecretKey, APIBase: cfg.StripeAPIBase, Prices: cfg.StripePrices}
}

// dashboardConfig is the dashboard's part of cfg.
func dashboardConfig(cfg config.Config) dashboard.Config {
	return dashboard.Config{
		PublicURL:      cfg.PublicURL,
		TrustedProxies: cfg.TrustedProxies,
		Plans:          cfg.Plans,
		Lists:          dashboard.ListLimits{MaxRows: cfg.Lists.MaxRows, MaxBytes: cfg.Lists.MaxBytes},
		SessionTTL:     cfg.DashboardSessionTTL,
		SessionIdle:    cfg.DashboardSessionIdle,
		Signup:         cfg.Signup,
		ConfirmTTL:     cfg.ConfirmTTL,
		ResetTTL:       cfg.ResetTTL,
	}
}
