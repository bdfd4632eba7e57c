package dashboard

import (
	"context"
	"errors"
	"net/http"
	"net/mail"
	"strings"
	"unicode"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/text/unicode/norm"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/plan"
)

// The messages of sign-in and sign-up never say whether an email has an account
// (docs/dashboard.md, "No account enumeration").
const (
	msgWrongCredentials = "The email or password is wrong."
	msgSignupRefused    = "No account could be created with this email and password. If you already have an account, sign in instead."
	msgSignupLimit      = "Too many accounts were created from your network today. Try again tomorrow, or sign in to an account you have."
)

// maxEmailLen is RFC 5321's limit on a forward path, which an account email never needs to pass.
const maxEmailLen = 254

// checkEmail accepts a plain address (no display name, no comments) of bounded length, and
// returns it in Unicode NFC, the form it is stored, shown and mailed to in (an "é" typed as "e"
// and a combining accent is kept as the one letter: docs/dashboard.md, "Security model").
func checkEmail(e string) (string, error) {
	e = norm.NFC.String(strings.TrimSpace(e))
	if e == "" || len(e) > maxEmailLen || strings.IndexFunc(e, unicode.IsControl) >= 0 {
		return "", problem("Enter an email address of at most 254 characters.")
	}
	a, err := mail.ParseAddress(e)
	if err != nil || a.Address != e || a.Name != "" || !strings.Contains(e[strings.LastIndex(e, "@")+1:], ".") {
		return "", problem("Enter an email address like ann@example.com.")
	}
	return e, nil
}

// foldEmail is the form in which a dashboard user's email is unique and looked up: in any case
// and any canonically equivalent Unicode form (account.FoldEmail, dashboard_users.email_folded).
func foldEmail(e string) string { return account.FoldEmail(e) }

type credentialsForm struct {
	Email string
	Next  string // the sign-in form's page to return to (safeReturn), kept through a failed attempt
	// Signup and Reset say whether the deployment offers sign-up and password reset by email,
	// so that the sign-in page links only to what exists.
	Signup, Reset bool
	// Confirm says a sign-up must confirm its email, and in how long (the sign-up form says so).
	Confirm  bool
	Lifetime string
}

func (h *Handler) credentials(email, next string) credentialsForm {
	return credentialsForm{Email: email, Next: next, Signup: h.signupMode() != signupOff, Reset: h.mailer != nil,
		Confirm: h.mustConfirm(), Lifetime: lifetime(h.confirmTTL())}
}

// signupClosed answers the sign-up page and form when MAILVET_DASHBOARD_SIGNUP=off.
func (h *Handler) signupClosed(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusNotFound, "message", &view{Title: "Sign-up is closed",
		Error: "This deployment does not take sign-ups. Ask its operator for an account."})
}

func (h *Handler) signupPage(w http.ResponseWriter, r *http.Request, csrf string) {
	if h.signupMode() == signupOff {
		h.signupClosed(w, r)
		return
	}
	h.render(w, r, http.StatusOK, "signup", &view{Title: "Create your account", CSRF: csrf, Data: h.credentials("", "")})
}

func (h *Handler) signinPage(w http.ResponseWriter, r *http.Request, csrf string) {
	h.render(w, r, http.StatusOK, "signin", &view{Title: "Sign in", CSRF: csrf, Notice: signinNotice(r),
		Data: h.credentials("", safeReturn(r.URL.Query().Get("next")))})
}

// signup creates a free account and its dashboard user, and signs the user in. An email that is
// already taken is handled as a sign-in with the password given (docs/dashboard.md): the right
// password signs in, a wrong one counts as a failed sign-in and gets a message that does not say
// which of the two was the problem.
func (h *Handler) signup(w http.ResponseWriter, r *http.Request, csrf string) {
	ctx := r.Context()
	if h.signupMode() == signupOff {
		h.signupClosed(w, r)
		return
	}
	form := h.credentials(r.PostForm.Get("email"), "")
	fail := func(status int, msg string) {
		h.render(w, r, status, "signup", &view{Title: "Create your account", CSRF: csrf, Error: msg, Data: form})
	}
	email, err := checkEmail(form.Email)
	if err != nil {
		fail(http.StatusUnprocessableEntity, err.Error())
		return
	}
	password := r.PostForm.Get("password")
	if err := checkPassword(password, email); err != nil {
		fail(http.StatusUnprocessableEntity, err.Error())
		return
	}
	if password != r.PostForm.Get("password_confirm") {
		fail(http.StatusUnprocessableEntity, "The two passwords differ.")
		return
	}
	at, blocked, err := h.claimAttempt(ctx, r, email)
	if err != nil {
		h.failure(w, r, nil, err)
		return
	} else if blocked {
		fail(http.StatusTooManyRequests, throttledText(at.wait))
		return
	}
	// The address's sign-up count is claimed before the account is made and given back when none
	// is (docs/dashboard.md, "Security model").
	if blocked, err := h.claimSignup(ctx, r); err != nil || blocked {
		if err == nil {
			err = h.refund(ctx, at) // not a failed password attempt either
		}
		if err != nil {
			h.failure(w, r, nil, err)
			return
		}
		fail(http.StatusTooManyRequests, msgSignupLimit)
		return
	}
	hash, err := h.hash(ctx, password)
	var userID string
	if err == nil {
		userID, err = h.createUser(ctx, r, email, hash)
	}
	if err != nil {
		// Best effort: a count not given back only lowers the address's limit for the day.
		_ = h.unclaimSignup(ctx, r)
	}
	if errors.Is(err, errEmailTaken) {
		userID, ok, err := h.passwordAttempt(ctx, email, password, at)
		if err != nil {
			h.failure(w, r, nil, err)
			return
		}
		if !ok {
			h.passwordRefused(r, email, audit.SignIn, at)
			fail(http.StatusUnprocessableEntity, msgSignupRefused)
			return
		}
		h.finishSignin(w, r, userID, at, "with the sign-up form of an existing account")
		return
	}
	if err == nil {
		err = h.refund(ctx, at) // a new account is not a failed attempt
	}
	if err != nil {
		h.failure(w, r, nil, err)
		return
	}
	h.finishSignin(w, r, userID, at, "after sign-up")
}

var errEmailTaken = errors.New("email taken")

// createUser creates the free account and its user in one transaction, through account.Store so
// that accounts are made the one way the rest of Mailvet makes them, with the sign-up's audit
// event (docs/security.md, "Audit log"). With confirmation on
// (MAILVET_DASHBOARD_SIGNUP=confirm) the account starts unconfirmed and its link is mailed.
//
// An unconfirmed account of the same email older than the link's lifetime is replaced: its
// link can no longer confirm it (only a resent one could), so it must not keep the address's
// owner out (docs/dashboard.md, "Email confirmation"). Such an account never had keys, usage or a
// Stripe customer; the one that still has a customer is kept, to be safe.
func (h *Handler) createUser(ctx context.Context, r *http.Request, email, hash string) (string, error) {
	userID := uuid.NewString()
	confirm := h.mustConfirm()
	var accountID string
	var link, stale string // the confirmation token, mailed once the account is committed; a replaced account
	err := h.audited(ctx, func(tx pgx.Tx) error {
		stale = ""
		err := tx.QueryRow(ctx, `DELETE FROM accounts a USING dashboard_users u
			WHERE u.account_id = a.id AND u.email_folded = $1 AND a.email_unconfirmed
				AND a.created_at < $2 AND a.stripe_customer_id IS NULL
			RETURNING a.id`, foldEmail(email), h.now().Add(-h.confirmTTL())).Scan(&stale)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		a, err := account.NewStore(tx).Create(ctx, account.NewAccount{Tier: plan.Free, Email: email})
		if err != nil {
			return err
		}
		accountID = a.ID
		if confirm {
			if _, err := tx.Exec(ctx, `UPDATE accounts SET email_unconfirmed = true WHERE id = $1`, a.ID); err != nil {
				return err
			}
		}
		if _, err = tx.Exec(ctx, `INSERT INTO dashboard_users (id, account_id, email, email_folded, password_hash) VALUES ($1, $2, $3, $4, $5)`,
			userID, a.ID, email, foldEmail(email), hash); err != nil {
			return err
		}
		if confirm {
			link, err = h.issueToken(ctx, tx, userID, purposeConfirm, h.confirmTTL())
		}
		return err
	}, func() audit.Event {
		return h.auditEvent(r, accountID, email, audit.SignUp, audit.Success, "free account created")
	})
	if err == nil && stale != "" {
		h.log.Info("dashboard: a sign-up replaced an unconfirmed account older than its link", "replaced_account", stale)
	}
	if err == nil && link != "" {
		h.sendConfirmation(email, link)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "dashboard_users_email" {
		return "", errEmailTaken
	}
	return userID, err
}

// dummyHash is verified against when an email has no user, so that an unknown email takes as
// long to refuse as a wrong password (no enumeration through timing).
var dummyHash = defaultHasher.hash("mailvet-dashboard-no-such-user")

// checkCredentials returns the user of email if password is theirs.
func (h *Handler) checkCredentials(ctx context.Context, email, password string) (string, bool, error) {
	var id, hash string
	err := h.pool.QueryRow(ctx, `SELECT id, password_hash FROM dashboard_users WHERE email_folded = $1`, foldEmail(email)).Scan(&id, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		id, hash = "", dummyHash // the same work as for a real account: timing tells nothing
	} else if err != nil {
		return "", false, err
	}
	var ok bool
	if err := h.withHashSlot(ctx, func() { ok = verifyPassword(password, hash) }); err != nil {
		return "", false, err
	}
	return id, ok && id != "", nil
}

func (h *Handler) signin(w http.ResponseWriter, r *http.Request, csrf string) {
	ctx := r.Context()
	form := h.credentials(r.PostForm.Get("email"), safeReturn(r.PostForm.Get("next")))
	fail := func(status int, msg string) {
		h.render(w, r, status, "signin", &view{Title: "Sign in", CSRF: csrf, Error: msg, Data: form})
	}
	email := strings.TrimSpace(form.Email)
	password := r.PostForm.Get("password")
	if email == "" || len(email) > maxEmailLen || password == "" || len(password) > maxPasswordBytes {
		fail(http.StatusUnprocessableEntity, msgWrongCredentials)
		return
	}
	at, blocked, err := h.claimAttempt(ctx, r, email)
	if err != nil {
		h.failure(w, r, nil, err)
		return
	} else if blocked {
		fail(http.StatusTooManyRequests, throttledText(at.wait))
		return
	}
	userID, ok, err := h.passwordAttempt(ctx, email, password, at)
	if err != nil {
		h.failure(w, r, nil, err)
		return
	}
	if !ok {
		h.passwordRefused(r, email, audit.SignIn, at)
		fail(http.StatusUnauthorized, msgWrongCredentials)
		return
	}
	h.finishSignin(w, r, userID, at, "")
}

// finishSignin signs userID in; how says how, for the audit event of the sign-in ("" for the
// sign-in form).
func (h *Handler) finishSignin(w http.ResponseWriter, r *http.Request, userID string, at attempt, how string) {
	ctx := r.Context()
	if err := h.clearFailures(ctx, at); err != nil {
		h.failure(w, r, nil, err)
		return
	}
	if err := h.startSession(ctx, w, r, userID, how); err != nil {
		h.failure(w, r, nil, err)
		return
	}
	http.Redirect(w, r, afterSignin(r), http.StatusSeeOther)
}

func (h *Handler) signout(w http.ResponseWriter, r *http.Request, s *session) {
	if err := h.endSession(r.Context(), w, r, s); err != nil {
		h.failure(w, r, nil, err)
		return
	}
	// After the session ended, and never in the way of it (docs/security.md, "When an audit
	// write fails").
	h.recordOrLog(r.Context(), h.sessionEvent(r, s, audit.SignOut, ""))
	http.Redirect(w, r, Prefix+"/signin", http.StatusSeeOther)
}

func (h *Handler) settingsPage(w http.ResponseWriter, r *http.Request, s *session) {
	h.render(w, r, http.StatusOK, "settings", &view{Title: "Settings", Nav: "settings", Session: s,
		Notice: notice(r)})
}

// changePassword needs the current password (a session left open on a shared machine must not
// be enough to take the account over). Every session of the user ends, this one included: the
// browser that changed the password gets a new session token, so a token copied before the
// change (the reason to change a password) is worth nothing after it; the password-reset links
// mailed before it stop working too (docs/dashboard.md, "Security model").
func (h *Handler) changePassword(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	fail := func(status int, msg string) {
		h.render(w, r, status, "settings", &view{Title: "Settings", Nav: "settings", Session: s, Error: msg})
	}
	current, next := r.PostForm.Get("current_password"), r.PostForm.Get("new_password")
	if len(current) > maxPasswordBytes {
		fail(http.StatusUnprocessableEntity, "The current password is wrong.")
		return
	}
	if err := checkPassword(next, s.Email); err != nil {
		fail(http.StatusUnprocessableEntity, err.Error())
		return
	}
	if next != r.PostForm.Get("new_password_confirm") {
		fail(http.StatusUnprocessableEntity, "The two new passwords differ.")
		return
	}
	at, blocked, err := h.claimAttempt(ctx, r, s.Email)
	if err != nil {
		h.failure(w, r, s, err)
		return
	} else if blocked {
		fail(http.StatusTooManyRequests, throttledText(at.wait))
		return
	}
	_, ok, err := h.passwordAttempt(ctx, s.Email, current, at)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	if !ok {
		h.passwordRefused(r, s.Email, audit.PasswordChange, at)
		fail(http.StatusUnprocessableEntity, "The current password is wrong.")
		return
	}
	nextHash, err := h.hash(ctx, next)
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	var token string
	err = h.audited(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE dashboard_users SET password_hash = $2, updated_at = now() WHERE id = $1`,
			s.UserID, nextHash); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM dashboard_sessions WHERE user_id = $1`, s.UserID); err != nil {
			return err
		}
		// A reset link mailed before the change would let whoever holds it set a password of
		// their own and end this new session: it goes with the old password.
		if _, err := tx.Exec(ctx, `DELETE FROM dashboard_email_tokens WHERE user_id = $1 AND purpose = $2`, s.UserID, purposeReset); err != nil {
			return err
		}
		token, err = h.insertSession(ctx, tx, s.UserID)
		return err
	}, func() audit.Event {
		return h.sessionEvent(r, s, audit.PasswordChange, "every other session ended")
	})
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	h.setSessionCookie(w, r, token)
	http.Redirect(w, r, Prefix+"/settings?done=password", http.StatusSeeOther)
}
