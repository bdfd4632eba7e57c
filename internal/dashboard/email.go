package dashboard

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/mailer"
)

// Email confirmation and password reset (docs/dashboard.md, "Email confirmation" and "Password
// reset"): the dashboard mails a link with a random 32-byte token; the table keeps only its
// SHA-256 (dashboard_email_tokens), a link works once and for a limited time, and using one
// deletes every other link of the same user and purpose.

// The values of MAILVET_DASHBOARD_SIGNUP (config.SignupConfirm and its siblings; the dashboard
// takes them as strings, since it does not import the configuration package).
const (
	signupUnconfirmed = "unconfirmed"
	signupOff         = "off"
)

// Purposes of a mailed token (dashboard_email_tokens.purpose).
const (
	purposeConfirm = "confirm"
	purposeReset   = "reset"
)

// Bounds on the mail one user or one client address can make the dashboard send, so that the
// forms cannot be used to flood a mailbox: a resent confirmation link, and password-reset
// requests per email (silently: the answer must not say whether the email has an account) and
// per client address (openly: that says nothing about any account).
const (
	maxConfirmResends = 3
	maxResetsPerEmail = 3
	maxResetsPerAddr  = 20
	mailWindow        = time.Hour
	// mailTimeout bounds one message's delivery to the relay, after the page has been answered.
	mailTimeout = 45 * time.Second
)

func (h *Handler) signupMode() string {
	switch h.cfg.Signup {
	case signupUnconfirmed, signupOff:
		return h.cfg.Signup
	}
	return "confirm"
}

// mustConfirm says whether a new sign-up starts unconfirmed.
func (h *Handler) mustConfirm() bool { return h.signupMode() == "confirm" }

func (h *Handler) confirmTTL() time.Duration {
	if h.cfg.ConfirmTTL <= 0 {
		return 24 * time.Hour
	}
	return h.cfg.ConfirmTTL
}

func (h *Handler) resetTTL() time.Duration {
	if h.cfg.ResetTTL <= 0 {
		return time.Hour
	}
	return h.cfg.ResetTTL
}

// lifetime writes a link's lifetime as a person reads it: "24 hours", "1 hour", "30 minutes".
func lifetime(d time.Duration) string {
	unit, n := "minute", int(d/time.Minute)
	if d >= time.Hour && d%time.Hour == 0 {
		unit, n = "hour", int(d/time.Hour)
	}
	if n == 1 {
		return "1 " + unit
	}
	return strconv.Itoa(n) + " " + unit + "s"
}

// issueToken stores a new token of purpose for userID and returns the raw token for the link.
// Expired tokens are cleared a batch at a time on the way, as sessions are.
func (h *Handler) issueToken(ctx context.Context, db execer, userID, purpose string, ttl time.Duration) (string, error) {
	if _, err := db.Exec(ctx, `DELETE FROM dashboard_email_tokens WHERE token_hash IN (
		SELECT token_hash FROM dashboard_email_tokens WHERE expires_at < $1 LIMIT 100)`, h.now()); err != nil {
		return "", err
	}
	raw, sum := randomToken()
	_, err := db.Exec(ctx, `INSERT INTO dashboard_email_tokens (token_hash, user_id, purpose, expires_at) VALUES ($1, $2, $3, $4)`,
		sum, userID, purpose, h.now().Add(ttl))
	return raw, err
}

// tokenUser is the user a valid token of purpose belongs to.
type tokenUser struct {
	UserID, AccountID, Email string
}

var errBadToken = errors.New("no such link, or it expired or was used")

// validToken checks the raw token of a link without using it up.
func (h *Handler) validToken(ctx context.Context, raw, purpose string) (tokenUser, error) {
	var u tokenUser
	if raw == "" || len(raw) > 100 {
		return u, errBadToken
	}
	err := h.pool.QueryRow(ctx, `SELECT u.id, u.account_id, u.email FROM dashboard_email_tokens t
		JOIN dashboard_users u ON u.id = t.user_id
		WHERE t.token_hash = $1 AND t.purpose = $2 AND t.expires_at > $3`, tokenHash(raw), purpose, h.now()).
		Scan(&u.UserID, &u.AccountID, &u.Email)
	if errors.Is(err, pgx.ErrNoRows) {
		return u, errBadToken
	}
	return u, err
}

// useToken uses the raw token up in tx: it and every other token of its user and purpose are
// deleted. Two uses at once: the row lock lets one through, the other finds nothing.
func (h *Handler) useToken(ctx context.Context, tx pgx.Tx, raw, purpose string) (tokenUser, error) {
	var u tokenUser
	// The account's row first, as an account deletion locks it before it deletes the users and,
	// with them, their tokens (internal/privacy): the other way round, each would hold a row the
	// other waits for. No row: the token is unknown, and the DELETE below says so.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM accounts a
		JOIN dashboard_users u ON u.account_id = a.id
		JOIN dashboard_email_tokens t ON t.user_id = u.id
		WHERE t.token_hash = $1 FOR NO KEY UPDATE OF a`, tokenHash(raw)); err != nil {
		return u, err
	}
	err := tx.QueryRow(ctx, `DELETE FROM dashboard_email_tokens t USING dashboard_users u
		WHERE t.token_hash = $1 AND t.purpose = $2 AND t.expires_at > $3 AND u.id = t.user_id
		RETURNING u.id, u.account_id, u.email`, tokenHash(raw), purpose, h.now()).Scan(&u.UserID, &u.AccountID, &u.Email)
	if errors.Is(err, pgx.ErrNoRows) {
		return u, errBadToken
	}
	if err != nil {
		return u, err
	}
	_, err = tx.Exec(ctx, `DELETE FROM dashboard_email_tokens WHERE user_id = $1 AND purpose = $2`, u.UserID, purpose)
	return u, err
}

// link is the public URL of a dashboard page with a token.
func (h *Handler) link(page, raw string) string {
	return h.cfg.PublicURL + Prefix + page + "?" + url.Values{"token": {raw}}.Encode()
}

// sendInBackground hands m to the relay after the page has been answered: the answer takes the
// same time whether a mail is sent or not (no enumeration through timing, docs/dashboard.md), and
// a slow relay does not hold the form. A failure is logged, without the link.
func (h *Handler) sendInBackground(m mailer.Message, kind string) {
	if h.mailer == nil {
		h.log.Error("dashboard: no mail relay configured; a link was not sent", "mail", kind)
		return
	}
	h.mailing.Add(1)
	go func() {
		defer h.mailing.Done()
		ctx, cancel := context.WithTimeout(context.Background(), mailTimeout)
		defer cancel()
		if err := h.mailer.Send(ctx, m); err != nil {
			h.log.Error("dashboard: mail not sent", "mail", kind, "err", err)
		}
	}()
}

// WaitMail waits until every mail the dashboard handed to its relay was sent or failed (the
// API's shutdown, tests).
func (h *Handler) WaitMail() { h.mailing.Wait() }

// mailConfirmation issues a confirmation token of userID and mails its link.
func (h *Handler) mailConfirmation(ctx context.Context, userID, email string) error {
	raw, err := h.issueToken(ctx, h.pool, userID, purposeConfirm, h.confirmTTL())
	if err != nil {
		return err
	}
	h.sendConfirmation(email, raw)
	return nil
}

// sendConfirmation mails the confirmation link of the raw token to email.
func (h *Handler) sendConfirmation(email, raw string) {
	h.sendInBackground(mailer.Message{To: email, Subject: "Confirm your email for Mailvet", Body: "Hello,\n\n" +
		"a Mailvet account was created with this address. To confirm that the address is yours, open this link within " +
		lifetime(h.confirmTTL()) + ":\n\n" + h.link("/confirm", raw) + "\n\n" +
		"Until then the account cannot create API keys or verify addresses.\n\n" +
		"If you did not sign up, ignore this mail: the account stays unusable, and once the link has expired a new\n" +
		"sign-up with this address replaces it.\n"}, purposeConfirm)
}

// confirmData is the "confirm your email" page of a signed-in, unconfirmed account.
type confirmData struct {
	Email    string
	Lifetime string
}

func (h *Handler) confirmState(w http.ResponseWriter, r *http.Request, s *session, status int, msg string) {
	h.render(w, r, status, "confirm", &view{Title: "Confirm your email", Nav: "overview", Session: s, Error: msg,
		Notice: notice(r), Data: confirmData{Email: s.Email, Lifetime: lifetime(h.confirmTTL())}})
}

// confirmed wraps the pages an unconfirmed account may not use yet (keys, playground, lists,
// deliveries, billing): it gets the "confirm your email" page instead, with 403.
func (h *Handler) confirmed(next func(http.ResponseWriter, *http.Request, *session)) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		if s.Unconfirmed {
			if r.Method == http.MethodPost && r.URL.Path == UploadPath {
				discardBody(w, r) // the answer, not a connection reset, reaches the browser
			}
			h.confirmState(w, r, s, http.StatusForbidden, "Confirm your email first: open the link we mailed to "+s.Email+".")
			return
		}
		next(w, r, s)
	}
}

// resendConfirmation mails a new link to the signed-in, unconfirmed user, at most
// maxConfirmResends times in mailWindow.
func (h *Handler) resendConfirmation(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	if !s.Unconfirmed {
		http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
		return
	}
	var blocked bool
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		var err error
		blocked, err = count(ctx, tx, "mail:confirm:"+s.UserID, maxConfirmResends, mailWindow, h.now())
		return err
	})
	if err == nil && !blocked {
		err = h.mailConfirmation(ctx, s.UserID, s.Email)
	}
	if err != nil {
		h.failure(w, r, s, err)
		return
	}
	if blocked {
		h.confirmState(w, r, s, http.StatusTooManyRequests, "The link was sent "+strconv.Itoa(maxConfirmResends)+
			" times within the hour. Wait an hour before asking again, and look in the spam folder.")
		return
	}
	http.Redirect(w, r, Prefix+"/?done=sent", http.StatusSeeOther)
}

// tokenForm is the page of a mailed link: its token, carried by the form that uses it.
type tokenForm struct {
	Token string
	Email string
}

func (h *Handler) badLink(w http.ResponseWriter, r *http.Request, purpose string) {
	msg := "This confirmation link has expired or was already used. Sign in and send a new one from the overview."
	if purpose == purposeReset {
		msg = "This password reset link has expired or was already used. Ask for a new one on the sign-in page (Forgot your password?)."
	}
	h.render(w, r, http.StatusGone, "message", &view{Title: "Link expired", Error: msg})
}

// confirmPage asks for a click before it confirms: mail scanners open links, and a GET that
// confirmed would let one confirm an account its mailbox's owner never made.
func (h *Handler) confirmPage(w http.ResponseWriter, r *http.Request, csrf string) {
	h.linkPage(w, r, csrf, purposeConfirm, "confirm-email", "Confirm your email")
}

// linkPage is the page a mailed link of purpose opens: its form (page, with the token) while the
// link is valid, the expired-link page otherwise.
func (h *Handler) linkPage(w http.ResponseWriter, r *http.Request, csrf, purpose, page, title string) {
	raw := r.URL.Query().Get("token")
	u, err := h.validToken(r.Context(), raw, purpose)
	if errors.Is(err, errBadToken) {
		h.badLink(w, r, purpose)
		return
	}
	if err != nil {
		h.failure(w, r, nil, err)
		return
	}
	h.render(w, r, http.StatusOK, page, &view{Title: title, CSRF: csrf, Data: tokenForm{Token: raw, Email: u.Email}})
}

// confirm uses a confirmation link: the account is confirmed. A browser signed in as its user
// goes to the overview; any other goes to the sign-in page, since the link alone signs no one in.
func (h *Handler) confirm(w http.ResponseWriter, r *http.Request, _ string) {
	ctx := r.Context()
	var u tokenUser
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		var err error
		if u, err = h.useToken(ctx, tx, r.PostForm.Get("token"), purposeConfirm); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE accounts SET email_unconfirmed = false, updated_at = now() WHERE id = $1 AND email_unconfirmed`, u.AccountID)
		if err != nil || tag.RowsAffected() == 0 {
			return err // already confirmed (by an operator, say): nothing happened to record
		}
		// The confirmation is a change like any other: it happens with its event or not at all.
		return audit.Record(ctx, tx, h.auditEvent(r, u.AccountID, u.Email, audit.EmailConfirmed, audit.Success, "confirmed with the mailed link"))
	})
	if errors.Is(err, errBadToken) {
		h.badLink(w, r, purposeConfirm)
		return
	}
	if err != nil {
		h.failure(w, r, nil, err)
		return
	}
	if s, err := h.loadSession(ctx, r); err == nil && s.UserID == u.UserID {
		http.Redirect(w, r, Prefix+"/?done=confirmed", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, Prefix+"/signin?confirmed=1", http.StatusSeeOther)
}

// forgotForm is the "forgot your password" page; Sent shows the answer instead of the form.
type forgotForm struct {
	Email     string
	Sent      bool
	Available bool
	Lifetime  string
}

func (h *Handler) forgotPage(w http.ResponseWriter, r *http.Request, csrf string) {
	h.render(w, r, http.StatusOK, "forgot", &view{Title: "Forgot your password?", CSRF: csrf,
		Data: forgotForm{Available: h.mailer != nil, Lifetime: lifetime(h.resetTTL())}})
}

// forgot mails a password reset link to email if it has an account. The answer is the same
// whether it has one or not, and so is its timing: the look-up and the mail happen after it
// (docs/dashboard.md, "Password reset").
func (h *Handler) forgot(w http.ResponseWriter, r *http.Request, csrf string) {
	ctx := r.Context()
	form := forgotForm{Email: r.PostForm.Get("email"), Available: h.mailer != nil, Lifetime: lifetime(h.resetTTL())}
	fail := func(status int, msg string) {
		h.render(w, r, status, "forgot", &view{Title: "Forgot your password?", CSRF: csrf, Error: msg, Data: form})
	}
	if h.mailer == nil {
		fail(http.StatusNotFound, "Password reset by email is not available on this deployment; ask its operator.")
		return
	}
	email, err := checkEmail(form.Email)
	if err != nil {
		fail(http.StatusUnprocessableEntity, err.Error())
		return
	}
	var addrFull, emailFull bool
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		var err error
		if addrFull, err = count(ctx, tx, "reset:"+h.addressSubject(r), maxResetsPerAddr, mailWindow, h.now()); err != nil || addrFull {
			return err
		}
		emailFull, err = count(ctx, tx, "reset:"+accountSubject(email), maxResetsPerEmail, mailWindow, h.now())
		return err
	})
	if err != nil {
		h.failure(w, r, nil, err)
		return
	}
	if addrFull {
		fail(http.StatusTooManyRequests, "Too many password resets were asked for from your network within the hour. Try again later.")
		return
	}
	if !emailFull {
		h.mailing.Add(1)
		go func() {
			defer h.mailing.Done()
			ctx, cancel := context.WithTimeout(context.Background(), mailTimeout)
			defer cancel()
			if err := h.mailReset(ctx, email); err != nil {
				h.log.Error("dashboard: password reset link not issued", "err", err)
			}
		}()
	}
	form.Sent = true
	h.render(w, r, http.StatusOK, "forgot", &view{Title: "Check your email", CSRF: csrf, Data: form})
}

// mailReset issues a reset token for the user of email, if there is one, and mails its link.
func (h *Handler) mailReset(ctx context.Context, email string) error {
	var userID, stored string
	err := h.pool.QueryRow(ctx, `SELECT id, email FROM dashboard_users WHERE email_folded = $1`, foldEmail(email)).Scan(&userID, &stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // nothing to send, and nothing the answer said
	}
	if err != nil {
		return err
	}
	raw, err := h.issueToken(ctx, h.pool, userID, purposeReset, h.resetTTL())
	if err != nil {
		return err
	}
	h.sendInBackground(mailer.Message{To: stored, Subject: "Reset your Mailvet password", Body: "Hello,\n\n" +
		"someone asked to reset the password of the Mailvet account of this address. To choose a new password,\n" +
		"open this link within " + lifetime(h.resetTTL()) + ":\n\n" + h.link("/reset", raw) + "\n\n" +
		"It works once. Choosing a new password signs out every session of the account.\n\n" +
		"If you did not ask for it, ignore this mail: your password stays as it is.\n"}, purposeReset)
	return nil
}

func (h *Handler) resetPage(w http.ResponseWriter, r *http.Request, csrf string) {
	h.linkPage(w, r, csrf, purposeReset, "reset", "Choose a new password")
}

// reset sets a new password with a reset link: checked by the rules of every password form, then,
// in one transaction, the link is used up, every session of the user ends, the email counts as
// confirmed (the link came through it) and this browser gets a new session.
func (h *Handler) reset(w http.ResponseWriter, r *http.Request, csrf string) {
	ctx := r.Context()
	raw := r.PostForm.Get("token")
	u, err := h.validToken(ctx, raw, purposeReset)
	if errors.Is(err, errBadToken) {
		h.badLink(w, r, purposeReset)
		return
	}
	if err != nil {
		h.failure(w, r, nil, err)
		return
	}
	fail := func(msg string) {
		h.render(w, r, http.StatusUnprocessableEntity, "reset", &view{Title: "Choose a new password", CSRF: csrf, Error: msg,
			Data: tokenForm{Token: raw, Email: u.Email}})
	}
	next := r.PostForm.Get("new_password")
	if err := checkPassword(next, u.Email); err != nil {
		fail(err.Error())
		return
	}
	if next != r.PostForm.Get("new_password_confirm") {
		fail("The two new passwords differ.")
		return
	}
	hash, err := h.hash(ctx, next)
	if err != nil {
		h.failure(w, r, nil, err)
		return
	}
	var token string
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		used, err := h.useToken(ctx, tx, raw, purposeReset)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE dashboard_users SET password_hash = $2, updated_at = now() WHERE id = $1`, used.UserID, hash); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM dashboard_sessions WHERE user_id = $1`, used.UserID); err != nil {
			return err
		}
		// The reset and, when the link was the account's first, the confirmation it proves (the
		// link reached the address) happen with their events or not at all.
		if err := audit.Record(ctx, tx, h.auditEvent(r, used.AccountID, used.Email, audit.PasswordChange, audit.Success,
			"reset with a mailed link; every session ended")); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE accounts SET email_unconfirmed = false, updated_at = now() WHERE id = $1 AND email_unconfirmed`, used.AccountID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() > 0 {
			if err := audit.Record(ctx, tx, h.auditEvent(r, used.AccountID, used.Email, audit.EmailConfirmed, audit.Success,
				"confirmed with a password-reset link")); err != nil {
				return err
			}
		}
		if err := dropPresentedSession(ctx, tx, r); err != nil {
			return err
		}
		token, err = h.insertSession(ctx, tx, used.UserID)
		return err
	})
	if errors.Is(err, errBadToken) {
		h.badLink(w, r, purposeReset)
		return
	}
	if err != nil {
		h.failure(w, r, nil, err)
		return
	}
	// The owner is back in: the account's failed sign-ins are forgotten, as after a sign-in.
	if _, err := h.pool.Exec(ctx, `DELETE FROM dashboard_signin_failures WHERE subject = $1`, accountSubject(u.Email)); err != nil {
		h.log.Warn("dashboard: clear failed sign-ins after a reset", "err", err)
	}
	h.setSessionCookie(w, r, token)
	http.Redirect(w, r, Prefix+"/?done=reset", http.StatusSeeOther)
}
