// Package chromiumtest starts Debian's headless Chromium for the dashboard's browser tests.
package chromiumtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Path finds Debian's chromium (MAILVET_CHROMIUM overrides). Without it a browser test skips on
// a developer's machine, but fails under CI (CI set), where `.ci/run` installs it: a missing
// browser must never turn the suite green by skipping it.
func Path(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("MAILVET_CHROMIUM"), "/usr/bin/chromium"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed; .ci/run installs it (apt-get install chromium)")
	}
	t.Skip("chromium is not installed (apt-get install chromium, or `make chromium`)")
	return ""
}

// Start starts headless Chromium from bin with a fresh profile, for the test's lifetime, and
// returns a context whose steps must end within timeout. Background networking is off (this is
// a closed network, and Chromium would keep trying), and every host name but loopback fails to
// resolve at once, so that a redirect to an outside host ends quickly and visibly. extra adds
// options (a window size, say).
func Start(t *testing.T, bin string, timeout time.Duration, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	opts := append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin), chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"),
	}, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancel := chromedp.NewContext(actx)
	// The first call starts the browser, for as long as bctx lives; the steps then run under a
	// deadline derived from it (chromedp.Run's rule).
	if err := chromedp.Do(bctx); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancelTimeout := context.WithTimeout(bctx, timeout)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	// On failure, the page as it was goes to the test's artifact directory (under its temp
	// directory, or kept with go test -artifacts). Cleanups run last first: this one while the
	// browser still lives.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		sctx, cancel := context.WithTimeout(bctx, 5*time.Second)
		defer cancel()
		if png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100)); err == nil {
			p := filepath.Join(t.ArtifactDir(), "failure.png")
			if os.WriteFile(p, png, 0o644) == nil {
				t.Logf("screenshot of the failure: %s", p)
			}
		}
	})
	return ctx
}

// Run runs one named step of a browser test: its actions, in order, in the browser.
type Run func(step string, actions ...chromedp.Action[chromedp.Void])

// Steps returns the Run of a test's browser, whose steps run in ctx (as Start returns it). A step
// that fails stops the test with the step's name, so that a failed journey says where it broke;
// every browser test runs its journey this way.
func Steps(t *testing.T, ctx context.Context) Run {
	return func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
}
