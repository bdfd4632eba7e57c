package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/testkit/dnstest"
	"github.com/mailvet/mailvet/internal/testkit/freeport"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/mailvet/mailvet/internal/testkit/chromiumtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/stripetest"
	"github.com/mailvet/mailvet/internal/testkit/tlstest"
)

// dashboardServer runs `api -dev -demo` as `make demo` does, with stripe-mock as Stripe, and
// returns its base URL, database and process.
func dashboardServer(t *testing.T) (string, string, *served) {
	t.Helper()
	db := pgtest.URL(t)
	s := &served{httpAddr: freeport.Addr(t), opsAddr: freeport.Addr(t), done: make(chan error, 1)}
	base := "http://" + s.httpAddr
	stripeURL := stripetest.URL(t) // before the Chdir: it finds stripe-mock from the working directory
	// Dev mode keeps the embedded NATS's files in .data of the working directory.
	t.Chdir(t.TempDir())
	env := map[string]string{
		"DATABASE_URL": db, "MAILVET_HTTP_ADDR": s.httpAddr, "MAILVET_METRICS_ADDR": s.opsAddr,
		"MAILVET_PUBLIC_URL": base, "MAILVET_WEBHOOK_ALLOW_PRIVATE": "true", "MAILVET_DNS_RESOLVER": dnstest.Loopback(t),
		"STRIPE_SECRET_KEY": stripetest.SecretKey, "MAILVET_STRIPE_API_BASE": stripeURL,
		"STRIPE_WEBHOOK_SECRET": stripeSigningSecret, "MAILVET_STRIPE_PRICE_BUILDER": "price_builder",
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	t.Cleanup(cancel)
	go func() { s.done <- run(ctx, []string{"-dev", "-demo"}, envFrom(env), &s.stdout, &s.stderr) }()
	waitHTTP(t, base+"/readyz", 200)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("api stderr:\n%s", s.stderr.String())
		}
	})
	return base, db, s
}

var confirmLinkRE = regexp.MustCompile(`https?://[^"\s]+/dashboard/confirm\?token=[A-Za-z0-9_-]+`)

// devConfirmLink waits for the confirmation link that dev mode's mail sink logs (docs/development.md,
// "Mail in dev mode"), the way a developer running `make demo` finds it.
func devConfirmLink(t *testing.T, s *served) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := confirmLinkRE.FindString(s.stderr.String()); m != "" {
			return m
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no confirmation link in the log:\n%s", s.stderr.String())
	return ""
}

const stripeSigningSecret = "whsec_dashboard_test"

// TestDashboardInBrowser walks a new customer from nothing to a verified address and through
// every dashboard flow, in headless Chromium against a real API process (docs/dashboard.md).
func TestDashboardInBrowser(t *testing.T) {
	bin := chromiumtest.Path(t)
	shots := os.Getenv("MAILVET_SCREENSHOT_DIR")
	if shots != "" {
		var err error
		if shots, err = filepath.Abs(shots); err != nil { // before dashboardServer changes directory
			t.Fatal(err)
		}
	}
	receiver, hits := failingReceiver(t)
	base, db, proc := dashboardServer(t)
	ctx := chromiumtest.Start(t, bin, 90*time.Second, chromedp.WindowSize(1280, 900))

	// Every request the browser makes to a host other than the API (Stripe's hosted pages).
	external := make(chan string, 8)
	err := chromedp.Listen(ctx, func(ev any) {
		var u string
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			u = e.Request.URL
		case network.EventRequestWillBeSent:
			u = e.Request.URL
		}
		if u != "" && !strings.HasPrefix(u, base) && strings.HasPrefix(u, "http") {
			select {
			case external <- u:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	run := chromiumtest.Steps(t, ctx)
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	value := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Value(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return s
	}
	count := func(js string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](js))
		if err != nil {
			t.Fatalf("evaluate %s: %v", js, err)
		}
		return n
	}
	// screenshot saves the page for the docs (docs/img) when MAILVET_SCREENSHOT_DIR is set.
	screenshot := func(name string) {
		t.Helper()
		if shots == "" {
			return
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const email, password = "founder@startup.example", "correct horse battery"

	// Sign up: the dashboard sends a visitor to sign-in, which links to sign-up.
	run("sign up",
		chromedp.Navigate(base+"/dashboard/"),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/dashboard/signup"]`)),
		chromedp.Click(chromedp.CSS(`a[href="/dashboard/signup"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#password_confirm`)),
		chromedp.SendKeys(chromedp.CSS(`#email`), email),
		chromedp.SendKeys(chromedp.CSS(`#password`), password),
		chromedp.SendKeys(chromedp.CSS(`#password_confirm`), password),
		chromedp.Click(chromedp.CSS(`#signup`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-state`)))
	// Confirm the email: dev mode mails to its sink, which logs the link.
	run("confirm the email", chromedp.Navigate(devConfirmLink(t, proc)), chromedp.Click(chromedp.CSS(`#confirm`)),
		chromedp.WaitVisible(chromedp.CSS(`#tier`)))
	if got := text("#tier"); got != "free" {
		t.Fatalf("new account tier = %q, want free", got)
	}

	// The provisioning key, shown once, works on the management API.
	run("create provisioning key",
		chromedp.Navigate(base+"/dashboard/keys"),
		chromedp.Click(chromedp.CSS(`#create-prov`)),
		chromedp.WaitVisible(chromedp.CSS(`#new-key`)))
	mgmt := value("#new-key")
	if !strings.HasPrefix(mgmt, "sk_mgmt_") {
		t.Fatalf("provisioning key = %q", mgmt)
	}
	if code := getStatus(t, base+"/v1/management/account", mgmt); code != 200 {
		t.Fatalf("management API with the new provisioning key: %d", code)
	}

	// A standard key, then the playground with it.
	run("create standard key",
		chromedp.SendKeys(chromedp.CSS(`#label`), "production"),
		chromedp.Click(chromedp.CSS(`#create-key`)),
		chromedp.WaitVisible(chromedp.CSS(`#new-key`)),
		chromedp.WaitVisible(chromedp.CSS(`#keys`)))
	live := value("#new-key")
	if !strings.HasPrefix(live, "sk_live_") {
		t.Fatalf("standard key = %q", live)
	}
	if masked := text("#keys tbody"); strings.Contains(masked, live) || !strings.Contains(masked, "production") {
		t.Fatalf("key list shows %q", masked)
	}
	run("verify in the playground",
		chromedp.Navigate(base+"/dashboard/playground"),
		chromedp.SendKeys(chromedp.CSS(`#email`), "ann@acme.example"),
		chromedp.Click(chromedp.CSS(`#verify`)),
		chromedp.WaitVisible(chromedp.CSS(`#result`)))
	if got := text(`tr[data-field="status"] td`); got != "deliverable" {
		t.Fatalf("playground status = %q", got)
	}

	// The usage shows on the overview.
	run("overview", chromedp.Navigate(base+"/dashboard/"), chromedp.WaitVisible(chromedp.CSS(`#calls-used`)))
	if got := text("#calls-used"); got != "1" {
		t.Fatalf("calls used = %q, want 1", got)
	}
	screenshot("dashboard.png")

	// A bulk list: upload a CSV, watch it to the end, download the rows with their results. The
	// file is over 2 MB (rows repeating Ann with long notes), past the JSON routes' body guard:
	// the form streams it to the list upload, which holds it to the list limits only.
	var file strings.Builder
	file.WriteString("name,email,notes\nAnn,ann@acme.example,\nZoe,zoe@acme.example,=1+2\nTemp,temp@mailinator.com,\nAnn again,ANN@acme.example,\n")
	for i := 0; file.Len() <= 2<<20+1<<10; i++ {
		fmt.Fprintf(&file, "Ann %d,ann@acme.example,%s\n", i, strings.Repeat("n", 80<<10))
	}
	csvPath := filepath.Join(t.TempDir(), "june.csv")
	if err := os.WriteFile(csvPath, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	run("upload a list", chromedp.Navigate(base+"/dashboard/lists"),
		chromedp.SetUploadFiles(chromedp.CSS(`#file`), []string{csvPath}),
		chromedp.SendKeys(chromedp.CSS(`#name`), "june"),
		chromedp.Click(chromedp.CSS(`#upload`)),
		chromedp.WaitVisible(chromedp.CSS(`#list-state`)))
	listURL, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.pathname`))
	if err != nil || !strings.HasPrefix(listURL, "/dashboard/lists/") {
		t.Fatalf("after the upload: %q %v", listURL, err)
	}
	for deadline := time.Now().Add(30 * time.Second); text("#list-state") != "completed"; {
		if time.Now().After(deadline) {
			t.Fatalf("list still %q after 30 s: %s", text("#list-state"), text("#list-counts"))
		}
		time.Sleep(500 * time.Millisecond)
		run("list progress", chromedp.Navigate(base+listURL), chromedp.WaitVisible(chromedp.CSS(`#list-state`)))
	}
	if got := text("#list-counts"); !strings.HasPrefix(got, "3 of 3 unique") {
		t.Fatalf("list counts: %q", got)
	}
	screenshot("dashboard-list.png")
	csv, err := chromedp.Run(ctx, chromedp.Evaluate[string](`fetch(document.getElementById('download-csv').href).then(r => r.text())`, chromedp.EvalAwaitPromise))
	if err != nil || !strings.Contains(csv, "ann@acme.example") || !strings.Contains(csv, "deliverable") || strings.Count(csv, "\n") != strings.Count(file.String(), "\n") {
		t.Fatalf("downloaded results (%v): %d lines, want one a row of the %d-line file:\n%.2000s", err, strings.Count(csv, "\n"), strings.Count(file.String(), "\n"), csv)
	}
	// The file is for a person: the formula cell comes back escaped (docs/lists.md, "Formula cells").
	if !strings.Contains(csv, "\nZoe,zoe@acme.example,'=1+2,") {
		t.Errorf("downloaded results: the formula cell is not escaped:\n%.500s", csv)
	}

	// An async job whose receiver answers 500: the delivery fails after its attempts and shows in
	// the log; on the free tier the page explains why it cannot be retried.
	body := `{"email":"ann@acme.example","webhook_url":"` + receiver + `"}`
	if code := postStatus(t, base+"/v1/email/verify", live, body); code != http.StatusAccepted {
		t.Fatalf("async verify: %d", code)
	}
	waitFailed := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			run("deliveries", chromedp.Navigate(base+"/dashboard/deliveries?state=failed"),
				chromedp.WaitVisible(chromedp.CSS(`#filter`)))
			if count(`document.querySelectorAll('article[data-state="failed"]').length`) > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("no failed delivery after 30 s")
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	waitFailed()
	if got := text(`article[data-state="failed"] tbody`); strings.Count(got, "500") < 3 {
		t.Fatalf("attempt log = %q, want three attempts answered 500 (receiver hit %d times)", got, hits.Load())
	}
	if retryButtons := count(`document.querySelectorAll('button.retry').length`); retryButtons != 0 || !strings.Contains(text("#retry-why"), "builder and scale") {
		t.Fatalf("free tier: %d retry buttons", count(`document.querySelectorAll('button.retry').length`))
	}

	// Upgrade through Stripe Checkout: the browser is sent to Stripe's page; Stripe's subscription
	// event then moves the tier.
	run("upgrade", chromedp.Navigate(base+"/dashboard/billing"), chromedp.Click(chromedp.CSS(`#upgrade-builder`)))
	if u := awaitExternal(t, external); !strings.HasPrefix(u, "https://checkout.stripe.com/") {
		t.Fatalf("checkout went to %q", u)
	}
	sendSubscriptionEvent(t, base, customerOf(t, db, email))
	run("billing after upgrade", chromedp.Navigate(base+"/dashboard/billing"), chromedp.WaitVisible(chromedp.CSS(`#billing-tier`)))
	if got := text("#billing-tier"); got != "builder" {
		t.Fatalf("tier after the subscription event = %q", got)
	}

	// On the paid tier the failed delivery can be retried.
	waitFailed()
	run("retry delivery", chromedp.Click(chromedp.CSS(`button.retry`)), chromedp.WaitVisible(chromedp.CSS(`#notice`)))
	run("replay listed", chromedp.Navigate(base+"/dashboard/deliveries"), chromedp.WaitVisible(chromedp.CSS(`#filter`)))
	if replays := count(`[...document.querySelectorAll('article.delivery')].filter(a => a.textContent.includes('retry of')).length`); replays != 1 {
		t.Fatalf("%d replays listed after retrying, want 1", replays)
	}

	// The spend cap.
	run("spend cap", chromedp.Navigate(base+"/dashboard/billing"),
		chromedp.SetValue(chromedp.CSS(`#cap_eur`), "25"), chromedp.Click(chromedp.CSS(`#save-cap`)),
		chromedp.WaitVisible(chromedp.CSS(`#notice`)))
	if got := text("#current-cap"); !strings.Contains(got, "€25.00") {
		t.Fatalf("cap shows %q", got)
	}

	// The billing portal: the browser is sent to Stripe's portal. stripe-mock's portal is on an
	// origin of its own, which the dashboard's form-action does not name (as a Stripe account's
	// custom domain would be): the browser would refuse the form's redirect there, so the page
	// links to it (docs/dashboard.md, "Headers").
	run("portal", chromedp.Click(chromedp.CSS(`#portal`)), chromedp.WaitVisible(chromedp.CSS(`#to-stripe`)),
		chromedp.Click(chromedp.CSS(`#to-stripe`)))
	if u := awaitExternal(t, external); !strings.HasPrefix(u, "https://") {
		t.Fatalf("portal went to %q", u)
	}

	// Change the password, sign out, and sign in with the new one.
	const newPassword = "an even better passphrase"
	run("change password", chromedp.Navigate(base+"/dashboard/settings"),
		chromedp.SendKeys(chromedp.CSS(`#current_password`), password),
		chromedp.SendKeys(chromedp.CSS(`#new_password`), newPassword),
		chromedp.SendKeys(chromedp.CSS(`#new_password_confirm`), newPassword),
		chromedp.Click(chromedp.CSS(`#change-password`)),
		chromedp.WaitVisible(chromedp.CSS(`#notice`)),
		chromedp.Click(chromedp.CSS(`.signout button`)),
		chromedp.WaitVisible(chromedp.CSS(`#signin`)),
		chromedp.SendKeys(chromedp.CSS(`#email`), email),
		chromedp.SendKeys(chromedp.CSS(`#password`), newPassword),
		chromedp.Click(chromedp.CSS(`#signin`)),
		chromedp.WaitVisible(chromedp.CSS(`#tier`)))
}

func awaitExternal(t *testing.T, external chan string) string {
	t.Helper()
	select {
	case u := <-external:
		return u
	case <-time.After(15 * time.Second):
		t.Fatal("the browser was not sent to Stripe")
		return ""
	}
}

func getStatus(t *testing.T, url, key string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func postStatus(t *testing.T, url, key, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// customerOf reads the Stripe customer that the upgrade recorded on the user's account.
func customerOf(t *testing.T, db, email string) string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var cus *string
	err = conn.QueryRow(context.Background(), `SELECT a.stripe_customer_id FROM accounts a
		JOIN dashboard_users u ON u.account_id = a.id WHERE u.email = $1`, email).Scan(&cus)
	if err != nil || cus == nil {
		t.Fatalf("no Stripe customer recorded by the upgrade: %v", err)
	}
	return *cus
}

// sendSubscriptionEvent posts what Stripe sends once Checkout completes: a signed
// customer.subscription.created for the customer, on the builder price.
func sendSubscriptionEvent(t *testing.T, base, customer string) {
	t.Helper()
	now := time.Now().Unix()
	payload, _ := json.Marshal(map[string]any{"id": "evt_dashboard_upgrade", "object": "event",
		"type": "customer.subscription.created", "created": now,
		"data": map[string]any{"object": map[string]any{"id": "sub_dashboard", "object": "subscription",
			"customer": customer, "status": "active", "current_period_start": now, "current_period_end": now + 30*86400,
			"items": map[string]any{"object": "list", "data": []any{map[string]any{"id": "si_1", "price": map[string]any{"id": "price_builder"}}}}}}})
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: stripeSigningSecret})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/stripe/webhook", strings.NewReader(string(payload)))
	req.Header.Set("Stripe-Signature", signed.Header)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stripe webhook: %d", resp.StatusCode)
	}
}

// The receiver's CA, one per process: crypto/x509 reads SSL_CERT_FILE once, so a second run of
// the test (-count=2) must trust the same CA as the first.
var (
	receiverOnce sync.Once
	receiverCA   tlstest.CA
)

// failingReceiver is a webhook receiver that answers every callback with 500, over HTTPS at
// hooks.test (callback URLs must be https with a host name: docs/api.md, "URL rules"). The API
// process trusts its CA through SSL_CERT_FILE, and dnstest.Loopback resolves the name to loopback.
// Not parallel: SSL_CERT_FILE is process-wide.
func failingReceiver(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	receiverOnce.Do(func() { receiverCA = tlstest.New(t, "hooks.test") })
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, receiverCA.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", caFile)
	hits := new(atomic.Int32)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "receiver down", http.StatusInternalServerError)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{receiverCA.Leaf}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return "https://hooks.test:" + port + "/mailvet", hits
}
