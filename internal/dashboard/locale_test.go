package dashboard

import (
	"context"
	"database/sql"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's pgx driver, for goose
	"github.com/pressly/goose/v3"

	"github.com/mailvet/mailvet/internal/database"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/migrations"
)

// foldMigration is the migration that makes emails unique in Mailvet's own lower case.
const foldMigration = "00029_dashboard_email_folded.sql"

// On a database created with the C locale, whose lower() folds only A to Z, an email is still
// one user in any case (docs/dashboard.md, "Security model"): a sign-up of émile@x.test after
// ÉMILE@x.test is the sign-up of a taken email (a sign-in with its password, refused with
// another), and either spelling signs in.
func TestEmailInAnyCaseOnACLocaleDatabase(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, pgtest.LocaleURL(t, "C"))
	f := newFixture(t, nil, func(d *Deps) { d.Pool = pool })
	f.browser(t).signupUnconfirmed("ÉMILE@x.test")
	checkOneUserInAnyCase(t, f, pool, "ÉMILE@x.test", "émile@x.test")
}

// The users stored before the migration are lowered by it as Go lowers, whatever the locale: on
// a C-locale database a user stored as ÉMILE@x.test signs in as émile@x.test afterwards, and
// the address is no second account's.
func TestFoldMigrationOnACLocaleDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u, _, _ := beforeMigration(t, foldMigration)
	pool := pgtest.Pool(t, u)
	id := uuid.NewString()
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier, email) VALUES ($1, 'free', $2)`, id, "ÉMILE@x.test")
	pgtest.Exec(t, pool, `INSERT INTO dashboard_users (id, account_id, email, password_hash) VALUES ($1, $2, $3, $4)`,
		uuid.NewString(), id, "ÉMILE@x.test", hasher{time: 1, memoryKiB: 64, threads: 1}.hash(testPassword))
	if _, err := database.Migrate(ctx, u, nil); err != nil {
		t.Fatal(err)
	}
	var folded string
	pgtest.Must(t, pool.QueryRow(ctx, `SELECT email_folded FROM dashboard_users WHERE account_id = $1`, id).Scan(&folded), "folded")
	if folded != "émile@x.test" {
		t.Errorf("email_folded %q, want émile@x.test", folded)
	}
	f := newFixture(t, nil, func(d *Deps) { d.Pool = pool })
	checkOneUserInAnyCase(t, f, pool, "ÉMILE@x.test", "émile@x.test")
}

// checkOneUserInAnyCase checks that stored, the email of the one user of pool, is signed into
// as itself and as other (the same in another case), and that other cannot sign up as a second
// user: with another password the sign-up is refused, with the user's it signs in.
func checkOneUserInAnyCase(t *testing.T, f *fixture, pool *pgxpool.Pool, stored, other string) {
	t.Helper()
	b := f.browser(t)
	resp, body := b.post("/dashboard/signup", url.Values{"csrf": {b.csrf("/dashboard/signup")}, "email": {other},
		"password": {"another long password"}, "password_confirm": {"another long password"}})
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, htmlEscape(msgSignupRefused)) {
		t.Errorf("sign-up of %s with another password: %d\n%.400s", other, resp.StatusCode, body)
	}
	resp, body = b.post("/dashboard/signup", url.Values{"csrf": {b.csrf("/dashboard/signup")}, "email": {other},
		"password": {testPassword}, "password_confirm": {testPassword}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != Prefix+"/" {
		t.Errorf("sign-up of %s with the password of %s: %d %s\n%.400s", other, stored, resp.StatusCode, resp.Header.Get("Location"), body)
	}
	var users int
	pgtest.Must(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM dashboard_users`).Scan(&users), "count users")
	if users != 1 {
		t.Errorf("%d dashboard users, want the one of %s", users, stored)
	}
	for _, email := range []string{stored, other, strings.ToUpper(other)} {
		b := f.browser(t)
		resp, body := b.post("/dashboard/signin", url.Values{"csrf": {b.csrf("/dashboard/signin")}, "email": {email}, "password": {testPassword}})
		if resp.StatusCode != http.StatusSeeOther {
			t.Errorf("sign-in as %s: %d\n%.400s", email, resp.StatusCode, body)
		}
	}
}

// htmlEscape is s as html/template writes it in a page.
func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)
}

func mustVersion(t *testing.T, s string) int64 {
	t.Helper()
	var v int64
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("migration version %q", s)
		}
		v = v*10 + int64(c-'0')
	}
	return v
}

// The migration lowers stored emails with translate() and two lists of characters; they must
// lower exactly as foldEmail does between its Unicode normalisations (migrations/00035): each
// character to what Go's unicode.ToLower makes of it, and every character it changes listed
// (Unicode 15.0, the tables the lists were made from; a later Go's new letters can only be in
// emails stored after the migration, lowered by foldEmail).
func TestFoldMigrationLowersAsGo(t *testing.T) {
	t.Parallel()
	raw, err := migrations.FS.ReadFile(foldMigration)
	if err != nil {
		t.Fatal(err)
	}
	_, args, ok := strings.Cut(string(raw), "translate(email,")
	args, _, ok2 := strings.Cut(args, ") $fold$")
	if !ok || !ok2 {
		t.Fatal("no translate(email, …) in the migration")
	}
	lists := strings.Split(args, ",")
	if len(lists) != 2 {
		t.Fatalf("translate() has %d lists, want 2", len(lists))
	}
	literal := regexp.MustCompile(`'([^']*)'`)
	join := func(s string) []rune {
		var b strings.Builder
		for _, m := range literal.FindAllStringSubmatch(s, -1) {
			b.WriteString(m[1])
		}
		return []rune(b.String())
	}
	from, to := join(lists[0]), join(lists[1])
	if len(from) != len(to) {
		t.Fatalf("%d characters to lower, %d lowered", len(from), len(to))
	}
	listed := map[rune]bool{}
	for i, r := range from {
		if listed[r] {
			t.Errorf("%q listed twice", r)
		}
		listed[r] = true
		if got := []rune(strings.ToLower(string(r))); len(got) != 1 || got[0] != to[i] {
			t.Errorf("%q (U+%04X) is lowered to %q, Go lowers it to %q", r, r, to[i], string(got))
		}
	}
	if unicode.Version != "15.0.0" {
		return
	}
	for _, cr := range unicode.CaseRanges {
		for r := rune(cr.Lo); r <= rune(cr.Hi); r++ {
			if unicode.ToLower(r) != r && !listed[r] {
				t.Errorf("%q (U+%04X) is not lowered by the migration", r, r)
			}
		}
	}
}

// A replica of the release before the fold (during a rolling upgrade) inserts users without
// email_folded and may change an email without it: the database fills it in as Mailvet folds, so
// its sign-ups work and stay unique in any case.
func TestOldWriterGetsTheFold(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, pgtest.LocaleURL(t, "C"))
	id := uuid.NewString()
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier, email) VALUES ($1, 'free', $2)`, id, "ÉMILE@x.test")
	user := uuid.NewString()
	pgtest.Exec(t, pool, `INSERT INTO dashboard_users (id, account_id, email, password_hash) VALUES ($1, $2, $3, 'h')`,
		user, id, "ÉMILE@x.test")
	folded := func() string {
		var f string
		pgtest.Must(t, pool.QueryRow(context.Background(), `SELECT email_folded FROM dashboard_users WHERE id = $1`, user).Scan(&f), "folded")
		return f
	}
	if f := folded(); f != foldEmail("ÉMILE@x.test") {
		t.Errorf("email_folded %q after an insert without it, want %q", f, foldEmail("ÉMILE@x.test"))
	}
	other := uuid.NewString()
	pgtest.Exec(t, pool, `INSERT INTO accounts (id, tier, email) VALUES ($1, 'free', $2)`, other, "émile@X.TEST")
	_, err := pool.Exec(context.Background(), `INSERT INTO dashboard_users (id, account_id, email, password_hash) VALUES ($1, $2, $3, 'h')`,
		uuid.NewString(), other, "émile@X.TEST")
	if err == nil || !strings.Contains(err.Error(), "dashboard_users_email") {
		t.Errorf("a second user in another case by an old writer: %v, want the unique index dashboard_users_email to refuse it", err)
	}
	pgtest.Exec(t, pool, `UPDATE dashboard_users SET email = $2 WHERE id = $1`, user, "ZOË@x.test")
	if f := folded(); f != foldEmail("ZOË@x.test") {
		t.Errorf("email_folded %q after an email change without it, want %q", f, foldEmail("ZOË@x.test"))
	}
}

// beforeMigration is a new C-locale database migrated up to the migration before the one whose
// file name is migration, and the goose provider that moves it: a test stores rows as an older
// release would, then migrates up (and down) through it.
func beforeMigration(t *testing.T, migration string) (url string, p *goose.Provider, before int64) {
	t.Helper()
	url = pgtest.LocaleURL(t, "C")
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	version, _, _ := strings.Cut(migration, "_")
	p, err = goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	before = mustVersion(t, version) - 1
	if _, err := p.DownTo(context.Background(), before); err != nil {
		t.Fatalf("down to %d: %v", before, err)
	}
	return url, p, before
}
