package account

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// FoldEmail is the form in which a dashboard user's email is unique and looked up
// (dashboard_users.email_folded, docs/dashboard.md, "Security model"), and the key of the sign-in
// throttle's per-account counter: one address, whichever way it was typed, folds to one string.
//
// Canonically equivalent forms are one address: "é" as one code point (NFC) or as "e" and a
// combining accent (NFD, what macOS input and some copy-paste give) are the same text by
// Unicode's definition and shown alike. Compatibility forms are not merged (NFC, not NFKC): NFKC
// would make the full-width "ａｎｎ" or the ligature "ﬁ" the same as "ann" and "fi", other
// characters that a mail server may deliver to another mailbox, so that one person's address
// would block, sign into or reset another's account.
//
// Letters are lowered by Go, not by Postgres's lower(), which folds only A to Z in a database
// created with the C locale. The string is composed before lowering, so that equivalent inputs
// lower alike, and again after, since a lowered letter can compose with a following mark.
func FoldEmail(e string) string {
	return norm.NFC.String(strings.ToLower(norm.NFC.String(e)))
}
