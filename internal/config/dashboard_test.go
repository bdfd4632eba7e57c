package config

import (
	"strings"
	"testing"
	"time"
)

// MAILVET_DASHBOARD_SESSION_TTL defaults to 12h and accepts 5m to 720h (docs/dashboard.md).
func TestDashboardSessionTTL(t *testing.T) {
	t.Parallel()
	c, err := Load(RoleAPI, false, envOf(nil))
	if err != nil || c.DashboardSessionTTL != 12*time.Hour {
		t.Fatalf("default: %v %v", c.DashboardSessionTTL, err)
	}
	c, err = Load(RoleAPI, false, envOf(map[string]string{"MAILVET_DASHBOARD_SESSION_TTL": "30m"}))
	if err != nil || c.DashboardSessionTTL != 30*time.Minute {
		t.Fatalf("30m: %v %v", c.DashboardSessionTTL, err)
	}
	for _, bad := range []string{"1m", "721h", "soon", "-1h"} {
		_, err := Load(RoleAPI, false, envOf(map[string]string{"MAILVET_DASHBOARD_SESSION_TTL": bad}))
		if err == nil || !strings.Contains(err.Error(), "MAILVET_DASHBOARD_SESSION_TTL:") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
