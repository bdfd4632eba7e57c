package dashboard

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
)

// nfcMigration is the migration that folds emails in Unicode NFC as well as lower case.
const nfcMigration = "00035_dashboard_email_nfc.sql"

// émile@x.test with é as one code point (NFC) and as e and a combining acute accent (NFD, what
// macOS input or a copy-paste can give): one address (docs/dashboard.md, "Security model").
const (
	emileNFC = "\u00e9mile@x.test"
	emileNFD = "e\u0301mile@x.test"
)

// An email is one user in every canonically equivalent form, on a C-locale database too: a
// sign-up typed decomposed is stored composed (the account's email, which Stripe's customer also
// gets), the composed form is the sign-up of a taken email, both forms sign in in any case, and
// a password reset asked for with either is mailed to the user.
func TestEmailInAnyUnicodeForm(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, pgtest.LocaleURL(t, "C"))
	f := newFixture(t, nil, func(d *Deps) { d.Pool = pool })
	f.browser(t).signupUnconfirmed(emileNFD)
	var user, account string
	pgtest.Must(t, pool.QueryRow(context.Background(), `SELECT u.email, a.email FROM dashboard_users u
		JOIN accounts a ON a.id = u.account_id`).Scan(&user, &account), "stored emails")
	if user != emileNFC || account != emileNFC {
		t.Errorf("stored emails %+q and %+q, want %+q (NFC)", user, account, emileNFC)
	}
	checkOneUserInAnyCase(t, f, pool, emileNFD, emileNFC)
	for _, email := range []string{strings.ToUpper(emileNFD), "E\u0301MILE@X.TEST"} {
		b := f.browser(t)
		resp, body := b.post("/dashboard/signin", url.Values{"csrf": {b.csrf("/dashboard/signin")}, "email": {email}, "password": {testPassword}})
		if resp.StatusCode != http.StatusSeeOther {
			t.Errorf("sign-in as %+q: %d\n%.400s", email, resp.StatusCode, body)
		}
	}
	f.browser(t).mail(user) // the confirmation
	for _, email := range []string{emileNFD, emileNFC} {
		b := f.browser(t)
		b.post("/dashboard/forgot", url.Values{"csrf": {b.csrf("/dashboard/forgot")}, "email": {email}})
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		m, err := f.sink.Next(ctx, user)
		cancel()
		if err != nil || m.Subject != "Reset your Mailvet password" {
			t.Errorf("reset asked for with %+q: %v, mail %q", email, err, m.Subject)
		}
	}
}

// The sign-in throttle counts an account's failures under one subject whichever form the email
// is typed in, the account's deletion takes its email typed in another form, and removes that
// counter with the account (docs/personal-data.md).
func TestThrottleAndDeletionTakeEveryUnicodeForm(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	b := f.browser(t)
	b.signup(emileNFC)
	for _, email := range []string{emileNFC, emileNFD} {
		a := f.browser(t)
		resp, _ := a.post("/dashboard/signin", url.Values{"csrf": {a.csrf("/dashboard/signin")}, "email": {email}, "password": {"not the password"}})
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a wrong password for %+q: %d", email, resp.StatusCode)
		}
	}
	counters := func() map[string]int {
		rows, err := f.pool.Query(context.Background(), `SELECT subject, failures FROM dashboard_signin_failures WHERE subject LIKE 'account:%'`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		got := map[string]int{}
		for rows.Next() {
			var s string
			var n int
			pgtest.Must(t, rows.Scan(&s, &n), "scan")
			got[s] = n
		}
		return got
	}
	if got := counters(); len(got) != 1 || got[accountSubject(emileNFC)] != 2 {
		t.Errorf("account counters %v, want the 2 failures under one subject", got)
	}
	resp, body := b.post("/dashboard/settings/data/delete", url.Values{"csrf": {b.csrf("/dashboard/settings/data")},
		"confirm": {emileNFD}, "password": {testPassword}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "were deleted") {
		t.Fatalf("deletion confirmed with the decomposed email: %d\n%.400s", resp.StatusCode, body)
	}
	if got := counters(); len(got) != 0 {
		t.Errorf("account counters %v after the deletion, want none", got)
	}
}

// A replica of the release before the Unicode fold (during a rolling upgrade) writes emails
// without email_folded: the database folds them as Mailvet does, composed, so that the composed
// and the decomposed form stay one user.
func TestOldWriterGetsTheNFCFold(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, pgtest.LocaleURL(t, "C"))
	insert := func(email string) (string, error) {
		id, user := uuid.NewString(), uuid.NewString()
		pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier, email) VALUES ($1, 'free', $2)`, id, email)
		_, err := pool.Exec(context.Background(), `INSERT INTO dashboard_users (id, account_id, email, password_hash) VALUES ($1, $2, $3, 'h')`,
			user, id, email)
		return user, err
	}
	user, err := insert("E\u0301MILE@x.test")
	if err != nil {
		t.Fatal(err)
	}
	folded := func() string {
		var f string
		pgtest.Must(t, pool.QueryRow(context.Background(), `SELECT email_folded FROM dashboard_users WHERE id = $1`, user).Scan(&f), "folded")
		return f
	}
	if f := folded(); f != emileNFC {
		t.Errorf("email_folded %+q after an insert without it, want %+q", f, emileNFC)
	}
	if _, err := insert(emileNFC); err == nil || !strings.Contains(err.Error(), "dashboard_users_email") {
		t.Errorf("the composed form by an old writer: %v, want the unique index dashboard_users_email to refuse it", err)
	}
	pgtest.Exec(t, pool, `UPDATE dashboard_users SET email = $2 WHERE id = $1`, user, "ZOE\u0308@x.test")
	if f := folded(); f != "zo\u00eb@x.test" || f != foldEmail("ZOE\u0308@x.test") {
		t.Errorf("email_folded %+q after an email change without it, want %+q", f, "zo\u00eb@x.test")
	}
}

// On a database in SQL_ASCII, where Postgres cannot normalise, the migrations still apply and
// the forms are still one user: Mailvet folds every email it writes and looks up.
func TestEmailInAnyUnicodeFormOnASQLASCIIDatabase(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, pgtest.EncodingURL(t, "SQL_ASCII", "C"))
	f := newFixture(t, nil, func(d *Deps) { d.Pool = pool })
	f.browser(t).signupUnconfirmed(emileNFD)
	checkOneUserInAnyCase(t, f, pool, emileNFD, emileNFC)
}

// The users stored before the migration are folded by it as Mailvet folds. Two whose emails are
// one address once composed are never merged and do not stop the migration: the older keeps the
// address, the later one's fold gets " duplicate " and its id, and the migration's warning,
// logged, names both by id. Rolled back, every user has its lowered email again.
func TestNFCMigrationKeepsTheOlderOfTwoUsers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u, p, before := beforeMigration(t, nfcMigration)
	pool := pgtest.Pool(t, u)
	add := func(email, password string, age time.Duration) string {
		id, user := uuid.NewString(), uuid.NewString()
		pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier, email) VALUES ($1, 'free', $2)`, id, email)
		pgtest.Exec(t, pool, `INSERT INTO dashboard_users (id, account_id, email, password_hash, created_at) VALUES ($1, $2, $3, $4, $5)`,
			user, id, email, hasher{time: 1, memoryKiB: 64, threads: 1}.hash(password), time.Now().Add(-age))
		return user
	}
	older := add("E\u0301mile@x.test", testPassword, 2*time.Hour)
	later := add("\u00c9mile@x.test", "the later user's password", time.Hour)
	alone := add("Zoe\u0308@x.test", testPassword, time.Hour)
	want := map[string]string{older: emileNFC, later: emileNFC + " duplicate " + later, alone: "zo\u00eb@x.test"}

	var logged bytes.Buffer
	if _, err := database.Migrate(ctx, u, slog.New(slog.NewTextHandler(&logged, nil))); err != nil {
		t.Fatal(err)
	}
	checkFolds(t, pool, want)
	if s := logged.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, later) || !strings.Contains(s, older) || strings.Contains(s, "mile@") {
		t.Errorf("the migration's log does not name the later user %s and the older %s by id only:\n%s", later, older, s)
	}
	f := newFixture(t, nil, func(d *Deps) { d.Pool = pool })
	for _, email := range []string{emileNFC, emileNFD, "zo\u00eb@x.test", "zoe\u0308@x.test"} {
		b := f.browser(t)
		resp, _ := b.post("/dashboard/signin", url.Values{"csrf": {b.csrf("/dashboard/signin")}, "email": {email}, "password": {testPassword}})
		if resp.StatusCode != http.StatusSeeOther {
			t.Errorf("sign-in as %+q: %d", email, resp.StatusCode)
		}
	}

	if _, err := p.DownTo(ctx, before); err != nil {
		t.Fatalf("roll back to %d: %v", before, err)
	}
	checkFolds(t, pool, map[string]string{older: "e\u0301mile@x.test", later: emileNFC, alone: "zoe\u0308@x.test"})
	if _, err := database.Migrate(ctx, u, nil); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	checkFolds(t, pool, want)
}

// checkFolds checks the email_folded of each user of want.
func checkFolds(t *testing.T, pool *pgxpool.Pool, want map[string]string) {
	t.Helper()
	for id, w := range want {
		var f string
		pgtest.Must(t, pool.QueryRow(context.Background(), `SELECT email_folded FROM dashboard_users WHERE id = $1`, id).Scan(&f), "folded")
		if f != w {
			t.Errorf("user %s: email_folded %+q, want %+q", id, f, w)
		}
	}
}

// A password may not be the account's email in another Unicode form either: the email of a user
// stored decomposed (signed up before emails were composed) is compared as the password is, so
// a password change to its local part composed is refused.
func TestPasswordIsNotTheEmailInAnotherForm(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ password, email string }{
		{"\u00e9milebonjour", "e\u0301milebonjour@x.test"},
		{"e\u0301milebonjour", "\u00e9milebonjour@x.test"},
		{"\u00c9MILEBONJOUR@X.TEST", "e\u0301milebonjour@x.test"},
	} {
		if err := checkPassword(c.password, c.email); err == nil || !strings.Contains(err.Error(), "your email address") {
			t.Errorf("password %+q for the email %+q: %v, want it refused as the email", c.password, c.email, err)
		}
	}
}
