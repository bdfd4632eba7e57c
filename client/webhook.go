package client

import (
	"net/http"
	"time"

	"github.com/mailvet/mailvet/webhook"
)

// WebhookOptions tune VerifyWebhook; the zero value is the default.
type WebhookOptions struct {
	// Tolerance is how far webhook-timestamp may be from the receiver's clock, either way
	// (0: 5 minutes).
	Tolerance time.Duration
	// RequireStandard refuses a callback without the Standard Webhooks headers instead of
	// checking X-Service-Signature alone, which has no timestamp: set it to have old requests,
	// replayed, refused.
	RequireStandard bool
	// Now is the receiver's clock (nil: time.Now).
	Now func() time.Time
}

// VerifyWebhook checks a callback request Mailvet sent to a webhook_url (docs/api.md,
// "Signature"): header is the request's header, rawBody its body exactly as received (read it
// as bytes, bounded, before parsing any JSON) and secret the job's or list's webhook_secret. It
// returns nil only for a genuine callback. It checks the Standard Webhooks headers
// (webhook-id, webhook-timestamp within the tolerance, webhook-signature) when present, else
// X-Service-Signature; the errors are those of github.com/mailvet/mailvet/webhook
// (webhook.ErrNoSecret for an empty secret, ErrMissing, ErrMalformed, ErrMismatch, ErrTimestamp),
// for errors.Is.
func VerifyWebhook(header http.Header, rawBody []byte, secret string, o WebhookOptions) error {
	return webhook.VerifyRequest(header, rawBody, secret, webhook.VerifyOptions{Tolerance: o.Tolerance, Now: o.Now, RequireStandard: o.RequireStandard})
}
