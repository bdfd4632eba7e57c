// Package docs holds Mailvet's documentation. The Markdown files next to this one are written for
// people reading the repository; this package embeds the one the running service serves itself,
// the error reference, so that the docs link of every error body (MAILVET_PUBLIC_URL +
// /docs/errors#<code>) points at a page that exists in every build.
package docs

import _ "embed"

//go:embed errors.md
var errorsMarkdown string

// ErrorsMarkdown returns errors.md, the error reference: one section per error code, each under a
// level-two heading whose text is the code, so that the heading's anchor is the code itself.
func ErrorsMarkdown() string { return errorsMarkdown }
