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

// The mail relay and sign-up variables (docs/operations.md, "Mail"): parsed, checked together,
// and the start-up rule that confirmed sign-ups need a relay outside dev mode.
func TestSignupMail(t *testing.T) {
	t.Parallel()
	c, err := Load(RoleAPI, false, envOf(nil))
	if err != nil || c.Signup != SignupConfirm || c.Mail.Addr != "" || c.ConfirmTTL != 24*time.Hour || c.ResetTTL != time.Hour {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	if err := c.CheckSignupMail(); err == nil || !strings.Contains(err.Error(), "MAILVET_MAIL_SMTP_ADDR") {
		t.Fatalf("confirm without a relay outside dev mode: %v", err)
	}
	dev, err := Load(RoleAPI, true, envOf(nil))
	if err != nil || dev.CheckSignupMail() != nil {
		t.Fatalf("dev mode without a relay (the sink): %v %v", err, dev.CheckSignupMail())
	}
	for _, mode := range []string{SignupOff, SignupUnconfirmed} {
		c, err := Load(RoleAPI, false, envOf(map[string]string{"MAILVET_DASHBOARD_SIGNUP": mode}))
		if err != nil || c.CheckSignupMail() != nil {
			t.Fatalf("%s without a relay: %v %v", mode, err, c.CheckSignupMail())
		}
	}
	c, err = Load(RoleAPI, false, envOf(map[string]string{"MAILVET_MAIL_SMTP_ADDR": "smtp.example.com:587",
		"MAILVET_MAIL_FROM": "noreply@example.com", "MAILVET_MAIL_USERNAME": "u", "MAILVET_MAIL_PASSWORD": "p",
		"MAILVET_EMAIL_CONFIRM_TTL": "48h", "MAILVET_PASSWORD_RESET_TTL": "30m"}))
	if err != nil || c.CheckSignupMail() != nil || c.Mail != (Mail{Addr: "smtp.example.com:587", From: "noreply@example.com", Username: "u", Password: "p"}) ||
		c.ConfirmTTL != 48*time.Hour || c.ResetTTL != 30*time.Minute {
		t.Fatalf("a relay: %+v %v", c.Mail, err)
	}
	for _, bad := range []map[string]string{
		{"MAILVET_DASHBOARD_SIGNUP": "yes"},
		{"MAILVET_MAIL_SMTP_ADDR": "smtp.example.com"},
		{"MAILVET_MAIL_SMTP_ADDR": "smtp.example.com:25"},
		{"MAILVET_MAIL_SMTP_ADDR": "smtp.example.com:25", "MAILVET_MAIL_FROM": "Mailvet <noreply@example.com>"},
		{"MAILVET_MAIL_USERNAME": "u"},
		{"MAILVET_EMAIL_CONFIRM_TTL": "30m"},
		{"MAILVET_PASSWORD_RESET_TTL": "25h"},
	} {
		if _, err := Load(RoleAPI, false, envOf(bad)); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

// MAILVET_DASHBOARD_SESSION_IDLE defaults to 1h and accepts 5m to 720h (docs/dashboard.md).
func TestDashboardSessionIdle(t *testing.T) {
	t.Parallel()
	c, err := Load(RoleAPI, false, envOf(nil))
	if err != nil || c.DashboardSessionIdle != time.Hour {
		t.Fatalf("default: %v %v", c.DashboardSessionIdle, err)
	}
	c, err = Load(RoleAPI, false, envOf(map[string]string{"MAILVET_DASHBOARD_SESSION_IDLE": "15m"}))
	if err != nil || c.DashboardSessionIdle != 15*time.Minute {
		t.Fatalf("15m: %v %v", c.DashboardSessionIdle, err)
	}
	for _, bad := range []string{"1m", "721h", "soon", "-1h"} {
		_, err := Load(RoleAPI, false, envOf(map[string]string{"MAILVET_DASHBOARD_SESSION_IDLE": bad}))
		if err == nil || !strings.Contains(err.Error(), "MAILVET_DASHBOARD_SESSION_IDLE:") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
