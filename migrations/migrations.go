// Package migrations embeds the SQL schema migrations, applied in order by `api migrate`
// (goose, one transaction per file).
package migrations

import "embed"

// FS holds every *.sql migration of this folder.
//
//go:embed *.sql
var FS embed.FS
