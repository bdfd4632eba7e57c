package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/auth"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// runJSON runs one command and decodes the one JSON object it must print.
func runJSON(t *testing.T, store *account.Store, args ...string) (map[string]any, error) {
	t.Helper()
	var out bytes.Buffer
	err := Run(context.Background(), store, args, &out)
	if strings.Count(strings.TrimSpace(out.String()), "\n") != 0 {
		t.Fatalf("%v printed more than one line: %q", args, out.String())
	}
	var m map[string]any
	if jerr := json.Unmarshal(out.Bytes(), &m); jerr != nil {
		t.Fatalf("%v: stdout %q is not one JSON object: %v", args, out.String(), jerr)
	}
	if err != nil && !errors.Is(err, ErrFailed) {
		t.Fatalf("error %v does not wrap ErrFailed", err)
	}
	if (err != nil) != (m["error"] != nil) {
		t.Fatalf("%v: err %v but object %v", args, err, m)
	}
	return m, err
}

func TestAdminCommands(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	store := account.NewStore(pool)
	ctx := context.Background()

	acct, err := runJSON(t, store, "create-account", "--tier", "builder", "--email", "ops@example.com", "--stripe-customer", "cus_A1")
	if err != nil || acct["tier"] != "builder" || acct["stripe_customer_id"] != "cus_A1" {
		t.Fatalf("create-account: %v %v", acct, err)
	}
	id := acct["account_id"].(string)

	key, err := runJSON(t, store, "create-provisioning-key", "--customer", "cus_A1")
	if err != nil || key["account_id"] != id {
		t.Fatalf("create-provisioning-key: %v %v", key, err)
	}
	p, err := auth.Lookup(ctx, pool, key["key"].(string))
	if err != nil || p.Kind != auth.KindProvisioning || p.AccountID != id {
		t.Fatalf("issued key does not authenticate: %+v %v", p, err)
	}

	// A second key is a conflict whose code stays datastore_error; the message says what to do.
	m, err := runJSON(t, store, "create-provisioning-key", "--account", id)
	if err == nil || m["error"] != "datastore_error" || errors.Is(err, ErrUsage) {
		t.Fatalf("second provisioning key: %v %v", m, err)
	}
	for _, want := range []string{"already has an active provisioning key", "api admin revoke-provisioning-key --account " + id, "existing key"} {
		if !strings.Contains(m["message"].(string), want) {
			t.Errorf("second provisioning key: message %q lacks %q", m["message"], want)
		}
	}

	type failure struct {
		args  []string
		code  string
		usage bool // a mistake on the command line (exit status 2)
	}
	for _, f := range []failure{
		{[]string{"create-provisioning-key", "--customer", "cus_nobody"}, "customer_not_found", false},
		{[]string{"create-provisioning-key"}, "invalid_request", true},
		{[]string{"create-provisioning-key", "--account", id, "--customer", "cus_A1"}, "invalid_request", true},
		{[]string{"create-provisioning-key", "--account", "not-a-uuid"}, "not_found", false},
		{[]string{"create-account", "--tier", "gold"}, "invalid_request", true},
		{[]string{"create-account", "--tier", "free", "--stripe-customer", "cus_A1"}, "invalid_request", false},
		{[]string{"create-account", "--tier", "free", "--stripe-customer", "acct_1"}, "invalid_request", true},
		{[]string{"create-account", "--tier", "free", "--bogus"}, "invalid_request", true},
		{[]string{"create-account", "--tier", "free", "extra"}, "invalid_request", true},
		{[]string{"set-tier", "--account", id, "--tier", "platinum"}, "invalid_request", true},
		{[]string{"set-tier", "--account", "7a0c6a4e-3b7e-4b0e-9f38-5d0b8f1a2c3d", "--tier", "scale"}, "not_found", false},
		{[]string{"set-spend-cap", "--account", id}, "invalid_request", true},
		{[]string{"set-spend-cap", "--account", id, "--eur", "-3"}, "invalid_request", true},
		// What ParseFloat accepts but is no amount, and amounts the numeric(12,2) column cannot
		// hold as given: refused before the database, never stored rounded.
		{[]string{"set-spend-cap", "--account", id, "--eur", "NaN"}, "invalid_request", true},
		{[]string{"set-spend-cap", "--account", id, "--eur", "nan"}, "invalid_request", true},
		{[]string{"set-spend-cap", "--account", id, "--eur", "Inf"}, "invalid_request", true},
		{[]string{"set-spend-cap", "--account", id, "--eur", "-0.5"}, "invalid_request", true},
		{[]string{"set-spend-cap", "--account", id, "--eur", "1e10"}, "invalid_request", true},
		{[]string{"set-spend-cap", "--account", id, "--eur", "1e2"}, "invalid_request", true},
		{[]string{"set-spend-cap", "--account", id, "--eur", "0x10"}, "invalid_request", true},
		{[]string{"set-spend-cap", "--account", id, "--eur", "+5"}, "invalid_request", true},
		{[]string{"set-spend-cap", "--account", id, "--eur", "12.345"}, "invalid_request", true},
		{[]string{"set-spend-cap", "--account", id, "--eur", "12."}, "invalid_request", true},
		{[]string{"set-spend-cap", "--account", id, "--eur", "1000000000.01"}, "invalid_request", true},
		{[]string{"set-spend-cap", "--account", id, "--eur", "5", "--none"}, "invalid_request", true},
		{[]string{"frobnicate"}, "invalid_request", true},
		{[]string{"help", "frobnicate"}, "invalid_request", true},
		{nil, "invalid_request", true},
	} {
		m, err := runJSON(t, store, f.args...)
		if err == nil || m["error"] != f.code || m["message"] == "" {
			t.Errorf("%v: %v, want error %s", f.args, m, f.code)
		}
		if errors.Is(err, ErrUsage) != f.usage {
			t.Errorf("%v: err %v, usage error %v", f.args, err, f.usage)
		}
	}

	if m, err := runJSON(t, store, "set-tier", "--account", id, "--tier", "scale"); err != nil || m["tier"] != "scale" {
		t.Fatalf("set-tier: %v %v", m, err)
	}
	// What set-spend-cap prints is the account's cap as stored, for every accepted form.
	for _, eur := range []string{"0", "0.5", "49.90", "1000000000", "1000000000.00", "250.5"} {
		m, err := runJSON(t, store, "set-spend-cap", "--account", id, "--eur", eur)
		a, _ := store.Get(ctx, id)
		if err != nil || a.HardCapEUR == nil || m["hard_cap_eur"] != *a.HardCapEUR || m["account_id"] != id {
			t.Fatalf("set-spend-cap --eur %s: printed %v (%v), stored %v", eur, m, err, a.HardCapEUR)
		}
	}
	a, _ := store.Get(ctx, id)
	if a.Tier != "scale" || a.HardCapEUR == nil || *a.HardCapEUR != 250.5 {
		t.Fatalf("account after set-*: %+v", a)
	}
	if m, err := runJSON(t, store, "set-spend-cap", "--account", id, "--none"); err != nil || m["hard_cap_eur"] != nil {
		t.Fatalf("set-spend-cap --none: %v %v", m, err)
	}
	if a, _ := store.Get(ctx, id); a.HardCapEUR != nil {
		t.Fatal("cap not removed")
	}

	if m, err := runJSON(t, store, "revoke-provisioning-key", "--account", id); err != nil || m["revoked"] != float64(1) {
		t.Fatalf("revoke: %v %v", m, err)
	}
	if _, err := auth.Lookup(ctx, pool, key["key"].(string)); !errors.Is(err, auth.ErrInvalidKey) {
		t.Fatalf("revoked provisioning key still authenticates: %v", err)
	}
	// After revocation a new one may be issued.
	if _, err := runJSON(t, store, "create-provisioning-key", "--account", id); err != nil {
		t.Fatal(err)
	}
}

// Concurrent bootstraps: the partial unique index lets exactly one provisioning key win.
func TestOneProvisioningKeyUnderConcurrency(t *testing.T) {
	t.Parallel()
	store := account.NewStore(pgtest.New(t))
	a, err := store.Create(context.Background(), account.NewAccount{Tier: "free"})
	pgtest.Must(t, err, "create")
	errs := make(chan error, 4)
	for range 4 {
		go func() { _, err := store.CreateProvisioningKey(context.Background(), a.ID); errs <- err }()
	}
	ok := 0
	for range 4 {
		err := <-errs
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, account.ErrProvisioningKeyExists):
			t.Errorf("unexpected error %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d provisioning keys created, want 1", ok)
	}
}

func TestDevBootstrapIsIdempotent(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	store := account.NewStore(pool)
	ctx := context.Background()
	first, err := DevBootstrap(ctx, store, plan.Defaults())
	if err != nil || !first.Created || first.ReissuedProvisioning {
		t.Fatalf("first run: %+v %v", first, err)
	}
	var seen []DevCredentials
	for range 3 { // more runs than the free plan's 2 standard keys
		c, err := DevBootstrap(ctx, store, plan.Defaults())
		if err != nil || c.Created || !c.ReissuedProvisioning || c.AccountID != first.AccountID {
			t.Fatalf("later run: %+v %v", c, err)
		}
		seen = append(seen, c)
	}
	last := seen[len(seen)-1]
	for _, k := range []string{last.ProvisioningKey, last.StandardKey} {
		if _, err := auth.Lookup(ctx, pool, k); err != nil {
			t.Errorf("latest key does not authenticate: %v", err)
		}
	}
	if _, err := auth.Lookup(ctx, pool, first.ProvisioningKey); !errors.Is(err, auth.ErrInvalidKey) {
		t.Error("the previous provisioning key must be revoked")
	}
	var out bytes.Buffer
	last.Plan = plan.Defaults()[plan.Free]
	last.Write(&out, "http://localhost:8080", "ann@acme.example")
	for _, want := range []string{last.ProvisioningKey, last.StandardKey, "curl -s http://localhost:8080/v1/email/verify",
		"/v1/management/account", "revoked and a fresh one issued", `{"email":"ann@acme.example"}`,
		"free tier: 10 emails verified a minute, 500 a month (a batch of n counts n)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, out.String())
		}
	}
	var accounts int
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM accounts WHERE email = $1`, DemoEmail).Scan(&accounts), "count")
	if accounts != 1 {
		t.Fatalf("%d demo accounts", accounts)
	}
}

// Help needs no database: every way of asking prints the commands with their flags.
func TestHelpListsCommandsAndFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"-help"}} {
		var out bytes.Buffer
		if err := Run(context.Background(), nil, args, &out); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		for _, want := range []string{"usage: api admin COMMAND", "create-account", "create-provisioning-key",
			"revoke-provisioning-key", "set-tier", "set-spend-cap", "confirm-email", "--tier free|builder|scale", "--email ADDRESS",
			"--stripe-customer cus_…", "--account ID", "--customer cus_…", "--eur N", "--none"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: help lacks %q:\n%s", args, want, out.String())
			}
		}
	}
	for _, args := range [][]string{{"set-spend-cap", "-h"}, {"help", "set-spend-cap"}} {
		var out bytes.Buffer
		if err := Run(context.Background(), nil, args, &out); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.HasPrefix(out.String(), "usage: api admin set-spend-cap") || !strings.Contains(out.String(), "--none") ||
			strings.Contains(out.String(), "create-account --tier") {
			t.Errorf("%v: want set-spend-cap's help only:\n%s", args, out.String())
		}
	}
}

// A mistake on the command line comes with the usage that fits it.
func TestUsageOfAMistake(t *testing.T) {
	t.Parallel()
	_, err := Parse([]string{"set-tier", "--bogus"})
	if !errors.Is(err, ErrUsage) || !strings.HasPrefix(UsageOf(err), "usage: api admin set-tier") {
		t.Errorf("bad flag: %v, usage %q", err, UsageOf(err))
	}
	_, err = Parse([]string{"frobnicate"})
	if !errors.Is(err, ErrUsage) || !strings.Contains(UsageOf(err), "set-spend-cap") {
		t.Errorf("unknown command: %v, usage %q", err, UsageOf(err))
	}
}

// A store that cannot be opened because the configuration is bad prints invalid_request (retrying
// cannot fix it) and is no usage error (the command line was right); any other failure to open
// is datastore_error. Help never opens the store.
func TestMainOpenFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		openErr error
		code    string
	}{
		{fmt.Errorf("%w: MAILVET_SMTP_PORT: bad", ErrConfig), "invalid_request"},
		{errors.New("connect to Postgres: refused"), "datastore_error"},
	} {
		open := func(context.Context) (*account.Store, func(), error) { return nil, nil, tc.openErr }
		var out, errOut bytes.Buffer
		err := Main(context.Background(), []string{"create-account", "--tier", "free"}, open, &out, &errOut)
		var m map[string]string
		if jerr := json.Unmarshal(out.Bytes(), &m); jerr != nil || m["error"] != tc.code || m["message"] != tc.openErr.Error() {
			t.Errorf("%v: stdout %q, want %s", tc.openErr, out.String(), tc.code)
		}
		if !errors.Is(err, ErrFailed) || errors.Is(err, ErrUsage) || errOut.Len() != 0 {
			t.Errorf("%v: err %v, stderr %q; want a failure (exit 1) without usage", tc.openErr, err, errOut.String())
		}
	}
	opened := false
	open := func(context.Context) (*account.Store, func(), error) { opened = true; return nil, nil, ErrConfig }
	for _, args := range [][]string{{"help"}, {"set-tier", "-h"}} {
		if err := Main(context.Background(), args, open, &bytes.Buffer{}, &bytes.Buffer{}); err != nil || opened {
			t.Errorf("%v: err %v, store opened %v", args, err, opened)
		}
	}
}
