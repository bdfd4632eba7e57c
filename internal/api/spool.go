package api

import "github.com/mailvet/mailvet/internal/verification"

// The upload slots, the spooling of an upload to a temporary file and their bounds are the
// verification service's (internal/verification, lists.go), which the API's upload route and
// the dashboard's upload form share, so that the slots count the uploads of both.
const (
	maxUploads           = verification.MaxUploads
	maxUploadsPerAccount = verification.MaxUploadsPerAccount
)
