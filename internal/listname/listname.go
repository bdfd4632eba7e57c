// Package listname holds the rules for a bulk list's name, which the API enforces and the
// dashboard and the CLI follow when they name an upload after its file.
package listname

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/mailvet/mailvet/internal/safetext"
)

// MaxLen bounds a list's name, in characters.
const MaxLen = 200

// Check tells why name cannot name a list, or nil. A name is shown in the dashboard and in the
// CLI's tables on a terminal, so besides its length it may hold no
// control character (a newline or an escape sequence would reach another user's terminal) and no
// bidirectional control (a right-to-left override makes "exe.gpj" read as "jpg.exe").
func Check(name string) error {
	switch {
	case !utf8.ValidString(name):
		return errors.New("is not valid UTF-8 text")
	case utf8.RuneCountInString(name) > MaxLen:
		return fmt.Errorf("is longer than %d characters", MaxLen)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return errors.New("contains a control character (a line break, a tab, an escape or NUL)")
	case strings.IndexFunc(name, safetext.IsBidiControl) >= 0:
		return errors.New("contains a bidirectional control character")
	}
	return nil
}

// FromFile is the name an upload of the local file at path gets without one (the CLI's): the
// file's name without its directories, cleaned as FromBrowser cleans it.
func FromFile(path string) string { return clean(filepath.Base(path)) }

// FromBrowser is the name an upload from a browser form gets without one: the file name it sent
// without any directories (browsers of old sent the whole Windows path, and a backslash is a
// separator there), with what Check refuses left out and cut to MaxLen characters. It is ""
// when nothing is left.
func FromBrowser(filename string) string {
	if i := strings.LastIndexAny(filename, `/\`); i >= 0 {
		filename = filename[i+1:]
	}
	return clean(filename)
}

func clean(filename string) string {
	filename = strings.ToValidUTF8(filename, "")
	filename = safetext.Strip(filename)
	if utf8.RuneCountInString(filename) > MaxLen {
		filename = string([]rune(filename)[:MaxLen])
	}
	return strings.TrimSpace(filename)
}
