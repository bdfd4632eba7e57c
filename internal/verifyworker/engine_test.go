package verifyworker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/verify"
	"github.com/mailvet/mailvet/internal/verifyworker"
)

// A disposable-domains file with a line that is not a domain stops the start-up with an error
// naming its variable; good files reach the engine, which then treats their domains as listed.
func TestEngineConfigChecksTheDomainsFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := write("bad.txt", "# ok\nfine.example\nnot a domain\n")
	extra := write("extra.txt", "throwaway.example\n")
	allow := write("allow.txt", "mailinator.com\n")
	load := func(env map[string]string) config.Config {
		t.Helper()
		env["MAILVET_DNS_RESOLVER"] = "127.0.0.1:53"
		cfg, err := config.Load(config.RoleVerifier, false, func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	for _, name := range []string{"MAILVET_DISPOSABLE_EXTRA_FILE", "MAILVET_DISPOSABLE_ALLOW_FILE"} {
		_, err := verifyworker.EngineConfig(load(map[string]string{name: bad}))
		if err == nil || !strings.HasPrefix(err.Error(), name+":") || !strings.Contains(err.Error(), "line 3") {
			t.Errorf("%s with a bad line: error %v, want one naming the variable and the line", name, err)
		}
	}

	vc, err := verifyworker.EngineConfig(load(map[string]string{"MAILVET_DISPOSABLE_EXTRA_FILE": extra, "MAILVET_DISPOSABLE_ALLOW_FILE": allow}))
	if err != nil {
		t.Fatal(err)
	}
	v, err := verify.New(vc)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for addr, disposable := range map[string]bool{"ann@throwaway.example": true, "ann@mailinator.com": false} {
		if r, _ := v.Local(addr); r.Disposable != disposable {
			t.Errorf("%s: disposable %v, want %v", addr, r.Disposable, disposable)
		}
	}
}
