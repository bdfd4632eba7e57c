package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/mailvet/mailvet/internal/mailsim"
)

// check runs the full pipeline against the configured resolver and port and prints one result.
func TestCheck(t *testing.T) {
	t.Parallel()
	w, err := mailsim.Start(mailsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.AddServer(mailsim.ServerOptions{Name: "mx.check.test"}); err != nil {
		t.Fatal(err)
	}
	w.AddDomain("check.test", mailsim.Domain{MX: []mailsim.MX{{Pref: 10, Host: "mx.check.test"}}, Users: []string{"ann"}})
	env := map[string]string{
		"MAILVET_DNS_RESOLVER": w.DNSAddr(), "MAILVET_SMTP_PORT": strconv.Itoa(w.SMTPPort()),
		"MAILVET_SMTP_ALLOW_CIDRS": mailsim.Prefix.String(),
		"MAILVET_SMTP_HELO":        "probe.mailvet.test",
	}
	for addr, want := range map[string]string{"ann@check.test": "deliverable", "bob@check.test": "undeliverable"} {
		var out bytes.Buffer
		if err := run(context.Background(), []string{"check", addr}, func(k string) string { return env[k] }, &out, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		var r struct {
			Email, Status string
			MXHost        *string `json:"mx_host"`
		}
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		if r.Email != addr || r.Status != want || r.MXHost == nil || *r.MXHost != "mx.check.test" {
			t.Errorf("check %s printed %s", addr, out.String())
		}
	}
}
