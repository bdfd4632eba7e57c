package config

import (
	"strings"
	"testing"
)

func TestLoadTrustedProxies(t *testing.T) {
	t.Parallel()
	c, err := Load(RoleAPI, false, envOf(map[string]string{"MAILVET_DNS_RESOLVER": "127.0.0.1:53",
		"MAILVET_TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.1/32,fd00::/8"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.TrustedProxies) != 3 || c.TrustedProxies[1].String() != "192.168.1.1/32" {
		t.Errorf("trusted proxies %v", c.TrustedProxies)
	}
	if d, _ := Load(RoleAPI, false, envOf(map[string]string{"MAILVET_DNS_RESOLVER": "127.0.0.1:53"})); len(d.TrustedProxies) != 0 {
		t.Errorf("default %v, want none", d.TrustedProxies)
	}
	_, err = Load(RoleAPI, false, envOf(map[string]string{"MAILVET_DNS_RESOLVER": "127.0.0.1:53", "MAILVET_TRUSTED_PROXIES": "nginx"}))
	if err == nil || !strings.Contains(err.Error(), "MAILVET_TRUSTED_PROXIES") {
		t.Errorf("a name instead of a CIDR: %v", err)
	}
}
