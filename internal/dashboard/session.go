package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/database"
)

// Cookie names (docs/dashboard.md, "Security model").
const (
	// SessionCookie holds the raw session token; the database keeps only its SHA-256.
	SessionCookie = "mailvet_session"
	// csrfCookie holds the CSRF token of the sign-in and sign-up forms, before there is a
	// session to keep it in (double-submit: the form must echo the cookie).
	csrfCookie = "mailvet_csrf"
	csrfField  = "csrf"
)

// session is a signed-in dashboard user.
type session struct {
	tokenHash []byte
	UserID    string
	AccountID string
	Email     string
	// Unconfirmed: the account's email is not confirmed yet; only the overview (which asks for
	// the confirmation), settings and sign-out are open to it.
	Unconfirmed bool
	CSRF        string // the session's CSRF token, put in every form
	ExpiresAt   time.Time
}

func randomToken() (raw string, sum []byte) {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it panics if the system source does)
	raw = base64.RawURLEncoding.EncodeToString(b)
	s := sha256.Sum256([]byte(raw))
	return raw, s[:]
}

func tokenHash(raw string) []byte {
	s := sha256.Sum256([]byte(raw))
	return s[:]
}

// secure says whether cookies for r must be Secure: the request came over TLS or the public URL
// is https (TLS ending at a proxy in front).
func (h *Handler) secure(r *http.Request) bool { return r.TLS != nil || h.secureCookies }

func (h *Handler) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: Prefix, MaxAge: maxAge,
		HttpOnly: true, Secure: h.secure(r), SameSite: http.SameSiteLaxMode})
}

// sessionTTL is how long a session lasts (MAILVET_DASHBOARD_SESSION_TTL).
func (h *Handler) sessionTTL() time.Duration {
	if h.cfg.SessionTTL <= 0 {
		return 12 * time.Hour
	}
	return h.cfg.SessionTTL
}

// sessionIdle is how long a session lasts without a request (MAILVET_DASHBOARD_SESSION_IDLE).
func (h *Handler) sessionIdle() time.Duration {
	if h.cfg.SessionIdle <= 0 {
		return time.Hour
	}
	return h.cfg.SessionIdle
}

// idleTouch is how far a request must push a session's idle deadline on before it is written:
// a page and its assets, or a list's page refreshing itself, do not each write the row.
const idleTouch = time.Minute

// endedCookie is the session cookie's value after a sign-out. A deleted cookie is gone for every
// tab of the browser, and a request from another tab would then look like a stranger's: with
// this value it is known as a session that ended (signinAgain).
const endedCookie = "ended"

// startSession signs userID in: a new random token in the cookie, its hash and a fresh CSRF
// secret in the table, and the sign-in's audit event in the same transaction, so that no session
// starts unrecorded (docs/security.md, "When an audit write fails"); how is the event's detail.
// Expired sessions are cleared a batch at a time on the way, so the table stays bounded without a
// separate job.
func (h *Handler) startSession(ctx context.Context, w http.ResponseWriter, r *http.Request, userID, how string) error {
	if _, err := h.pool.Exec(ctx, `
		DELETE FROM dashboard_sessions WHERE token_hash IN (
			SELECT token_hash FROM dashboard_sessions WHERE expires_at < now() OR idle_until < now() LIMIT 100)`); err != nil {
		h.log.Warn("dashboard: clear expired sessions", "err", err)
	}
	var raw, accountID, email string
	err := h.audited(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT account_id, email FROM dashboard_users WHERE id = $1`, userID).
			Scan(&accountID, &email); err != nil {
			return err
		}
		if err := dropPresentedSession(ctx, tx, r); err != nil {
			return err
		}
		var err error
		raw, err = h.insertSession(ctx, tx, userID)
		return err
	}, func() audit.Event { return h.auditEvent(r, accountID, email, audit.SignIn, audit.Success, how) })
	if err != nil {
		return err
	}
	h.setSessionCookie(w, r, raw)
	return nil
}

// dropPresentedSession ends the session whose cookie r carries, if any, as a new one replaces it
// in the browser (a sign-in posted from a tab opened before another tab signed in, a reset link
// opened while signed in): the cookie is overwritten, and a session no browser holds any more
// must not stay usable to whoever copied its token.
func dropPresentedSession(ctx context.Context, db execer, r *http.Request) error {
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" || c.Value == endedCookie || len(c.Value) > 100 {
		return nil
	}
	_, err = db.Exec(ctx, `DELETE FROM dashboard_sessions WHERE token_hash = $1`, tokenHash(c.Value))
	return err
}

// execer is what insertSession writes with: the pool, or a transaction it must be part of.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// insertSession stores a new session of userID and returns its raw token, for the cookie.
func (h *Handler) insertSession(ctx context.Context, db execer, userID string) (string, error) {
	raw, sum := randomToken()
	csrf := make([]byte, 32)
	_, _ = rand.Read(csrf)
	now := h.now()
	expires := now.Add(h.sessionTTL())
	_, err := db.Exec(ctx, `INSERT INTO dashboard_sessions (token_hash, user_id, csrf_secret, expires_at, idle_until)
		VALUES ($1, $2, $3, $4, $5)`, sum, userID, csrf, expires, h.idleUntil(now, expires))
	return raw, err
}

// idleUntil is when a session used at now and ending at expires ends unless used again.
func (h *Handler) idleUntil(now, expires time.Time) time.Time {
	if t := now.Add(h.sessionIdle()); t.Before(expires) {
		return t
	}
	return expires
}

func (h *Handler) setSessionCookie(w http.ResponseWriter, r *http.Request, raw string) {
	h.setCookie(w, r, SessionCookie, raw, int(h.sessionTTL()/time.Second))
}

// errNoSession: no cookie, an unknown token, or an expired session.
var errNoSession = errors.New("no valid session")

// loadSession returns the session of r's cookie.
func (h *Handler) loadSession(ctx context.Context, r *http.Request) (*session, error) {
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" || len(c.Value) > 100 {
		return nil, errNoSession
	}
	s := &session{tokenHash: tokenHash(c.Value)}
	var csrf []byte
	var idle *time.Time // NULL: started by a replica that did not know idle_until (migrations/00032)
	err = h.pool.QueryRow(ctx, `
		SELECT s.user_id, u.account_id, u.email, a.email_unconfirmed, s.csrf_secret, s.expires_at, s.idle_until
		FROM dashboard_sessions s JOIN dashboard_users u ON u.id = s.user_id JOIN accounts a ON a.id = u.account_id
		WHERE s.token_hash = $1`, s.tokenHash).Scan(&s.UserID, &s.AccountID, &s.Email, &s.Unconfirmed, &csrf, &s.ExpiresAt, &idle)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNoSession
	}
	if err != nil {
		return nil, err
	}
	now := h.now()
	if !now.Before(s.ExpiresAt) || (idle != nil && !now.Before(*idle)) {
		if _, err := h.pool.Exec(ctx, `DELETE FROM dashboard_sessions WHERE token_hash = $1`, s.tokenHash); err != nil {
			h.log.Warn("dashboard: delete expired session", "err", err)
		}
		return nil, errNoSession
	}
	// In use: the idle deadline moves on (docs/dashboard.md, "Sessions"). Best effort: a write
	// that fails only leaves the session the deadline it had.
	if next := h.idleUntil(now, s.ExpiresAt); idle == nil || next.Sub(*idle) >= idleTouch {
		if _, err := h.pool.Exec(ctx, `UPDATE dashboard_sessions SET idle_until = $2 WHERE token_hash = $1`, s.tokenHash, next); err != nil {
			h.log.Warn("dashboard: push a session's idle deadline on", "err", err)
		}
	}
	s.CSRF = base64.RawURLEncoding.EncodeToString(csrf)
	return s, nil
}

func (h *Handler) endSession(ctx context.Context, w http.ResponseWriter, r *http.Request, s *session) error {
	h.setCookie(w, r, SessionCookie, endedCookie, int(h.sessionTTL().Seconds()))
	_, err := h.pool.Exec(ctx, `DELETE FROM dashboard_sessions WHERE token_hash = $1`, s.tokenHash)
	return err
}

// sameToken compares CSRF tokens in constant time.
func sameToken(a, b string) bool {
	return a != "" && b != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// signedIn wraps a handler that needs a session. Without one, the browser goes to the sign-in
// page. A POST must carry the session's CSRF token, whatever the route.
func (h *Handler) signedIn(next func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return h.withSession(true, next)
}

// signedInUpload is signedIn for the list upload, whose body is left unread: the handler reads
// the form's fields, checks the CSRF token among them and streams the file (uploadList).
func (h *Handler) signedInUpload(next func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return h.withSession(false, next)
}

func (h *Handler) withSession(readForm bool, next func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := h.loadSession(r.Context(), r)
		if errors.Is(err, errNoSession) {
			h.signinAgain(w, r, !readForm)
			return
		}
		if err != nil {
			h.failure(w, r, nil, err)
			return
		}
		if r.Method == http.MethodPost && readForm {
			if r, err = parseForm(r); err != nil {
				h.badForm(w, r, s, err)
				return
			}
			if !sameToken(r.PostForm.Get(csrfField), s.CSRF) {
				h.csrfFailure(w, r, s)
				return
			}
		}
		next(w, r, s)
	}
}

// signinAgain sends a browser without a valid session to the sign-in page, with the page it
// was on to come back to (returnPath). One whose cookie the dashboard issued (a session that
// expired, or was signed out in this tab or another) is told that its session ended; an upload
// from such a tab (bodyUnread) is read to its end first, as far as discardBody allows: answering
// while the browser is still sending a large file closes the connection under it, and the
// browser shows a connection reset instead of the sign-in page. Without such a cookie the body is
// left unread, as nothing of ours ever asked for it.
func (h *Handler) signinAgain(w http.ResponseWriter, r *http.Request, bodyUnread bool) {
	ended := issuedCookie(r)
	if ended && bodyUnread {
		// Only the cookie's shape admits a request here, so at most len(endedDrains) bodies
		// are read at once on a replica; past that the answer goes at once.
		select {
		case endedDrains <- struct{}{}:
			discardBody(w, r)
			<-endedDrains
		default:
		}
	}
	h.setCookie(w, r, SessionCookie, "", -1)
	http.Redirect(w, r, signinURL(ended, returnPath(r)), http.StatusSeeOther)
}

// issuedCookie says whether r carries a session cookie of the shape the dashboard issues
// (randomToken). Its row is gone once the session ended, so the shape is all that can be
// checked; a forged one gains nothing more than the body bounds any upload gets.
func issuedCookie(r *http.Request) bool {
	c, err := r.Cookie(SessionCookie)
	if err == nil && c.Value == endedCookie {
		return true
	}
	if err != nil || len(c.Value) != 43 {
		return false
	}
	_, err = base64.RawURLEncoding.DecodeString(c.Value)
	return err == nil
}

// drainTimeout bounds how long discardBody reads a refused upload.
const drainTimeout = 20 * time.Second

// endedDrains bounds the uploads of ended sessions a replica reads at once (signinAgain). A
// signed-in account's own refused uploads do not count against it.
var endedDrains = make(chan struct{}, 8)

// discardBody reads and discards what is left of r's body, so that the answer to a refused
// upload reaches the browser instead of a connection reset. ServeHTTP bounds the body at the
// list byte limit (plus the form's slack); the reading also stops after drainTimeout, also
// interrupting a read that waits, and the connection is then closed with the answer.
func discardBody(w http.ResponseWriter, r *http.Request) {
	end := time.Now().Add(drainTimeout)
	stop := time.AfterFunc(drainTimeout, func() {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	})
	defer stop.Stop()
	buf := make([]byte, 32<<10)
	for time.Now().Before(end) {
		if _, err := r.Body.Read(buf); err != nil {
			return
		}
	}
}

// signinURL is the sign-in page that says the session ended (ended) and returns to next.
func signinURL(ended bool, next string) string {
	q := url.Values{}
	if ended {
		q.Set("ended", "1")
	}
	if next != "" && next != Prefix+"/" {
		q.Set("next", next)
	}
	if len(q) == 0 {
		return Prefix + "/signin"
	}
	return Prefix + "/signin?" + q.Encode()
}

// returnPath is the dashboard page r was made from: a GET's own path and query, a form's page
// (its Referer, which Referrer-Policy same-origin sends only within the site). Only a local page
// path is kept (safeReturn), so the sign-in's redirect can never leave the dashboard.
func returnPath(r *http.Request) string {
	if r.Method == http.MethodGet {
		return safeReturn(r.URL.RequestURI())
	}
	ref, err := url.Parse(r.Referer())
	if err != nil || ref.Path == "" {
		return ""
	}
	return safeReturn(ref.RequestURI())
}

// notReturnable are the dashboard paths that are not pages to come back to.
var notReturnable = []string{Prefix + "/signin", Prefix + "/signup", Prefix + "/signout", Prefix + "/static/",
	Prefix + "/forgot", Prefix + "/confirm", Prefix + "/reset"}

// safeReturn returns p if it is a path of a dashboard page, and "" otherwise: no scheme, host or
// fragment, nothing that a browser could read as another origin ("//host", a backslash), no dot
// segment or doubled slash that would step out of /dashboard, and not the sign-in pages.
func safeReturn(p string) string {
	if len(p) > 1000 || !strings.HasPrefix(p, Prefix+"/") || strings.ContainsAny(p, "\\#") ||
		strings.IndexFunc(p, func(c rune) bool { return c < 0x20 || c == 0x7f }) >= 0 {
		return ""
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return ""
	}
	clean := path.Clean(u.Path)
	if (u.Path != clean && u.Path != clean+"/") || !strings.HasPrefix(clean+"/", Prefix+"/") {
		return ""
	}
	for _, n := range notReturnable {
		if strings.HasPrefix(u.Path, n) {
			return ""
		}
	}
	return p
}

// signinNotice is what the sign-in page says above its form: why it is shown, if it is because
// a session ended (signinURL).
func signinNotice(r *http.Request) string {
	if r.URL.Query().Get("ended") == "1" {
		return "Your session ended; sign in again."
	}
	if r.URL.Query().Get("confirmed") == "1" {
		return "Your email is confirmed. Sign in to create your API keys."
	}
	return ""
}

// afterSignin is where a successful sign-in goes: the page the form was opened from (its
// "next" field, checked again here, as anyone can post it), else the overview.
func afterSignin(r *http.Request) string {
	if p := safeReturn(r.PostForm.Get("next")); p != "" {
		return p
	}
	return Prefix + "/"
}

// anonymous wraps the sign-in and sign-up pages. A signed-in browser goes to the overview; forms
// carry the double-submit CSRF token of the csrf cookie, set here when missing.
func (h *Handler) anonymous(next func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	pub := h.public(next)
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			if _, err := h.loadSession(r.Context(), r); err == nil {
				http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
				return
			}
		}
		pub(w, r)
	}
}

// public wraps the pages of the mailed links, which work signed in or not: their forms carry the
// double-submit CSRF token, as anonymous's do.
func (h *Handler) public(next func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token := ""
		if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 43 {
			token = c.Value
		}
		if r.Method == http.MethodPost {
			var err error
			if r, err = parseForm(r); err != nil {
				h.badForm(w, r, nil, err)
				return
			}
			if !sameToken(r.PostForm.Get(csrfField), token) {
				h.csrfFailure(w, r, nil)
				return
			}
		}
		if token == "" {
			token, _ = randomToken()
			h.setCookie(w, r, csrfCookie, token, 0)
		}
		next(w, r, token)
	}
}

func (h *Handler) csrfFailure(w http.ResponseWriter, r *http.Request, s *session) {
	h.render(w, r, http.StatusForbidden, "message", &view{Title: "Form expired", Session: s,
		Error: "This form has expired or did not come from the dashboard. Go back, reload the page and try again."})
}

// badForm answers a form that could not be read: one over maxFormBody is a 413, anything else
// (a malformed body) a 400 (docs/dashboard.md, "Forms").
func (h *Handler) badForm(w http.ResponseWriter, r *http.Request, s *session, err error) {
	var mbe *http.MaxBytesError
	if errors.Is(err, errFormTooLarge) || errors.As(err, &mbe) {
		h.render(w, r, http.StatusRequestEntityTooLarge, "message", &view{Title: "Form too large", Session: s,
			Error: "The form could not be read: it is over 2 MB, far more than any form of the dashboard sends."})
		return
	}
	h.render(w, r, http.StatusBadRequest, "message", &view{Title: "Bad request", Session: s,
		Error: "The form could not be read; it may be too large."})
}

// retryAfterSeconds is the Retry-After of a page refused because a dependency (Postgres, Stripe)
// is unreachable: the API's value for the same outages (docs/errors.md, service_unavailable).
const retryAfterSeconds = "2"

// failure answers an unexpected error: the log keeps the cause, the page says only that it failed.
// A Postgres that cannot be reached or did not answer in time (every statement has a 1 s
// deadline, database.QueryTimeout) is a temporary outage, not a fault of ours: the page says so
// with a 503 and Retry-After, as the API does (docs/reliability.md, "Outages fail fast").
func (h *Handler) failure(w http.ResponseWriter, r *http.Request, s *session, err error) {
	if errors.Is(err, errHashBusy) {
		h.log.Warn("dashboard password form refused: hash slots busy", "path", r.URL.Path)
		w.Header().Set("Retry-After", "5")
		h.render(w, r, http.StatusServiceUnavailable, "message", &view{Title: "Busy", Session: s,
			Error: "Too many sign-ins are being checked right now. Try again in a few seconds."})
		return
	}
	if database.Unreachable(err) {
		h.log.Warn("dashboard request refused: datastore unreachable", "method", r.Method, "path", r.URL.Path, "err", err)
		w.Header().Set("Retry-After", retryAfterSeconds)
		h.render(w, r, http.StatusServiceUnavailable, "message", &view{Title: "Temporarily unavailable", Session: s,
			Error: "The dashboard cannot reach its database right now. Try again in a few seconds."})
		return
	}
	h.log.Error("dashboard request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	h.render(w, r, http.StatusInternalServerError, "message", &view{Title: "Something went wrong", Session: s,
		Error: "Something went wrong on our side. Try again in a moment."})
}

// parseForm reads a URL-encoded POST form (the body is already bounded by ServeHTTP) into
// r.PostForm and r.Form, keeping what is sent of a field far too long (readURLEncoded), and
// answers the request carrying the name of such a field for render (longField). Only the list
// upload is multipart, and it reads its own body (readUploadForm).
func parseForm(r *http.Request) (*http.Request, error) {
	ct := r.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "multipart/form-data") {
		return r, errors.New("a multipart form where none is expected")
	}
	if mt, _, _ := strings.Cut(ct, ";"); strings.TrimSpace(strings.ToLower(mt)) != "application/x-www-form-urlencoded" {
		return r, r.ParseForm() // no body to read as a form: the query only
	}
	if r.ContentLength > maxFormBody {
		// Refused unread, as the API refuses a body it announces over its limit.
		return r, errFormTooLarge
	}
	form, long, err := readURLEncoded(r.Body)
	if err != nil {
		return r, err
	}
	r.PostForm = form
	r.Form = url.Values{}
	for k, vs := range form {
		r.Form[k] = append(r.Form[k], vs...)
	}
	for k, vs := range r.URL.Query() {
		r.Form[k] = append(r.Form[k], vs...)
	}
	for _, name := range slices.Sorted(maps.Keys(long)) {
		// The first field in name order: one message, and the same one for the same form.
		return r.WithContext(context.WithValue(r.Context(), longFieldKey{}, longField{name, long[name]})), nil
	}
	return r, nil
}

// longFieldKey is the request context's key of the field parseForm found far too long.
type longFieldKey struct{}

type longField struct {
	name string
	n    int
}
