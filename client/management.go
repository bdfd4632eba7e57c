package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
)

// The management API takes a provisioning key (sk_mgmt_…; docs/api.md, "Management API").

// Account reads the caller's account: tier, billing state, limits, this month's usage.
func (c *Client) Account(ctx context.Context) (Account, error) {
	var a Account
	err := c.call(ctx, request{http.MethodGet, "/v1/management/account", nil}, http.StatusOK, &a)
	return a, err
}

// ListKeys lists the account's active standard keys.
func (c *Client) ListKeys(ctx context.Context) (KeyList, error) {
	var l KeyList
	err := c.call(ctx, request{http.MethodGet, "/v1/management/keys", nil}, http.StatusOK, &l)
	return l, err
}

// CreateKey creates a standard key labelled label (1 to 100 characters). The full key is in the
// answer only: store it now. At the plan's maximum it fails with key_limit_reached.
func (c *Client) CreateKey(ctx context.Context, label string) (CreatedKey, error) {
	var k CreatedKey
	err := c.call(ctx, request{http.MethodPost, "/v1/management/keys", map[string]string{"label": label}}, http.StatusCreated, &k)
	return k, err
}

// CreateKeyWithMode is CreateKey for a key of mode ModeLive or ModeSandbox: a sandbox key
// (sk_test_…) is answered from the magic addresses of docs/sandbox.md and never billed. Live and
// sandbox keys count together toward the plan's maximum.
func (c *Client) CreateKeyWithMode(ctx context.Context, label, mode string) (CreatedKey, error) {
	var k CreatedKey
	body := map[string]string{"label": label, "mode": mode}
	err := c.call(ctx, request{http.MethodPost, "/v1/management/keys", body}, http.StatusCreated, &k)
	return k, err
}

// RevokeKey revokes the standard key with this id; it stops working on the next request. When an
// attempt's answer was lost and the retry is answered key_not_found, the lost attempt revoked it,
// and RevokeKey returns nil.
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	return c.call(ctx, request{http.MethodDelete, "/v1/management/keys/" + pathEscape(id), nil}, http.StatusNoContent, nil)
}

// Usage is the account's billable verifications per UTC day for the last 30 days.
func (c *Client) Usage(ctx context.Context) (DailyUsage, error) {
	var u DailyUsage
	err := c.call(ctx, request{http.MethodGet, "/v1/management/usage", nil}, http.StatusOK, &u)
	return u, err
}

// UsageSummary is the current month's usage, included calls, overage and estimated cost.
func (c *Client) UsageSummary(ctx context.Context) (UsageSummary, error) {
	var s UsageSummary
	err := c.call(ctx, request{http.MethodGet, "/v1/management/usage/summary", nil}, http.StatusOK, &s)
	return s, err
}

// BillingPortal opens a Stripe billing portal session and returns its URL; returnURL (https, a
// public host name) is where the portal sends the user back.
func (c *Client) BillingPortal(ctx context.Context, returnURL string) (string, error) {
	var p struct {
		URL string `json:"url"`
	}
	err := c.call(ctx, request{http.MethodPost, "/v1/management/billing/portal", map[string]string{"return_url": returnURL}}, http.StatusOK, &p)
	return p.URL, err
}

// Deliveries lists webhook deliveries, newest first, one page at a time.
func (c *Client) Deliveries(ctx context.Context, q DeliveryQuery) (DeliveryPage, error) {
	v := url.Values{}
	if q.Status != "" {
		v.Set("status", q.Status)
	}
	var p DeliveryPage
	err := c.call(ctx, request{http.MethodGet, pagePath("/v1/management/deliveries", v, q.Limit, q.Cursor), nil}, http.StatusOK, &p)
	return p, err
}

// RetryDelivery redelivers a failed delivery (paid tiers): the same body and X-Service-Signature. Asking
// again while that replay is under way returns the same replay.
func (c *Client) RetryDelivery(ctx context.Context, id string) (Replay, error) {
	var r Replay
	err := c.call(ctx, request{http.MethodPost, "/v1/management/deliveries/" + pathEscape(id) + "/retry", nil}, http.StatusAccepted, &r)
	return r, err
}

// AuditEvents lists the account's audit log of security events (sign-ins, key and password
// changes; docs/security.md, "Audit log"), newest first, one page at a time.
func (c *Client) AuditEvents(ctx context.Context, q AuditQuery) (AuditPage, error) {
	var p AuditPage
	err := c.call(ctx, request{http.MethodGet, pagePath("/v1/management/audit", nil, q.Limit, q.Cursor), nil}, http.StatusOK, &p)
	return p, err
}

// DeleteAccount deletes the caller's account and everything stored for it
// (DELETE /v1/management/account; docs/personal-data.md, "Deleting an account"). accountID must
// be the account's id, as Account returns it: the API refuses any other with invalid_request.
// Every key of the account stops working at once, so a retry of a deletion that committed (its
// answer lost, with retrying on) is returned as invalid_api_key: the client cannot tell it from
// a key that was wrong from the start, so it does not report it as done. An account paying for a subscription is an *Error with Code
// subscription_active.
func (c *Client) DeleteAccount(ctx context.Context, accountID string) error {
	return c.call(ctx, request{http.MethodDelete, "/v1/management/account", map[string]string{"confirm": accountID}}, http.StatusNoContent, nil)
}

// ExportAccount opens the download of the account's data as one JSON document
// (GET /v1/management/account/export; docs/personal-data.md, "Export"). The caller reads and
// closes it. A download the server could not finish ends with an error from Read, never a clean
// io.EOF, so a cut export is never taken for a whole one.
func (c *Client) ExportAccount(ctx context.Context) (io.ReadCloser, error) {
	a, err := c.send(ctx, request{http.MethodGet, "/v1/management/account/export", nil}, http.StatusOK, true)
	if err != nil {
		return nil, err
	}
	return &download{a: a}, nil
}
