package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/mailvet/mailvet/internal/account"
	"github.com/mailvet/mailvet/internal/audit"
	"github.com/mailvet/mailvet/internal/webhook"
)

// errNoBillingCustomer: the account has no Stripe customer, so there is no portal to open.
var errNoBillingCustomer = errors.New("no billing customer on file")

// datastoreError marks a failed query of a handler as datastore_error (500).
func datastoreError(err error) error { return fmt.Errorf("%w: %w", account.ErrDatastore, err) }

type portalRequest struct {
	ReturnURL *string `json:"return_url"`
}

// maxReturnURLLen bounds return_url; browsers and Stripe handle far longer URLs, but a return
// page needs no more.
const maxReturnURLLen = 2048

// checkReturnURL accepts only URLs that are safe to send a signed-in customer back to, and that
// the billing provider takes (docs/api.md, "POST /v1/management/billing/portal"): https, a
// public DNS host name (no IP address in any spelling a browser reads as one, like
// https://127.1/; not localhost nor under .localhost; at least two labels), a port from 1 to
// 65535, no userinfo that could disguise the real host. A URL the provider refused would be a
// 500 billing_portal_unavailable for the client's mistake.
func checkReturnURL(raw string) error {
	if len(raw) > maxReturnURLLen {
		return fmt.Errorf("must be at most %d characters", maxReturnURLLen)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || !u.IsAbs():
		return errors.New("must be an absolute https URL")
	case u.Scheme != "https":
		return errors.New("must use https")
	case u.User != nil:
		return errors.New("must not contain user information")
	case u.Hostname() == "":
		return errors.New("must have a host name")
	case strings.ContainsAny(raw, " \t\r\n\\"):
		return errors.New("must not contain spaces or backslashes")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return errors.New("must use a port from 1 to 65535")
		}
	}
	name, err := webhook.HostName(u.Hostname())
	var ue *webhook.URLError
	switch {
	case errors.As(err, &ue) && ue.Rule == "ip":
		return errors.New("must use a host name, not an IP address")
	case err != nil:
		return errors.New("must use a valid host name")
	case name == "localhost" || strings.HasSuffix(name, ".localhost") || !strings.Contains(name, "."):
		return errors.New("must use a public host name")
	}
	return nil
}

func (s *Server) billingPortal(c echo.Context) error {
	var req portalRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if req.ReturnURL == nil {
		return InvalidRequest("Field return_url is required (an https URL to return to).")
	}
	if err := checkReturnURL(*req.ReturnURL); err != nil {
		return InvalidRequest("Field return_url %s.", err.Error())
	}
	ctx := c.Request().Context()
	a, err := s.accounts.Get(ctx, principalOf(c).AccountID)
	if err != nil {
		return err
	}
	if a.StripeCustomerID == nil {
		return errNoBillingCustomer
	}
	// billing.Stripe bounds the call itself (billing.CallTimeout, 5 s with its retry), so an
	// unreachable Stripe is a 503 within seconds.
	u, err := s.portal.PortalURL(ctx, *a.StripeCustomerID, *req.ReturnURL)
	if err != nil {
		return err
	}
	// Whoever holds the portal's address can change the card and the subscription out of our
	// sight: it never leaves without its event (docs/security.md, "Audit log").
	if err := audit.Record(ctx, s.pool, s.auditEvent(c, audit.BillingPortalOpened, "returns to "+pageOf(*req.ReturnURL))); err != nil {
		return datastoreError(err)
	}
	return c.JSON(http.StatusOK, map[string]string{"url": u})
}

// pageOf is what the audit log keeps of a return_url checked by checkReturnURL: its scheme, host
// and path. Its query and fragment can carry a token of the customer's application, and the audit
// log keeps its events for a year (docs/security.md, "Audit log").
func pageOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}).String()
}
