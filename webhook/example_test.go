package webhook_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/mailvet/mailvet/webhook"
)

// A receiver verifies the signature over the raw body before it parses anything.
func ExampleVerify() {
	const secret = "whsec_12345678" // the webhook_secret the job was created with
	callback := func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		if err := webhook.Verify(body, r.Header.Get(webhook.Header), secret); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent) // answer fast; do the work afterwards
	}

	body := `{"job_id":"0b8f5a3c-7f3e-4f53-9a53-0c1a4f0f2f11","email":"ann@acme.example","status":"deliverable"}`
	for _, sig := range []string{webhook.Sign([]byte(body), secret), "", "sha256=0000", webhook.Sign([]byte(body), "wrong secret")} {
		req := httptest.NewRequest(http.MethodPost, "/callback", strings.NewReader(body))
		if sig != "" {
			req.Header.Set(webhook.Header, sig)
		}
		rec := httptest.NewRecorder()
		callback(rec, req)
		fmt.Println(strings.TrimSpace(fmt.Sprint(rec.Code, " ", rec.Body.String())))
	}
	// Output:
	// 204
	// 401 webhook: signature header is missing
	// 401 webhook: signature header is malformed
	// 401 webhook: signature does not match the body
}
