// Package listname holds the rules for a bulk list's name, which the API enforces and the
// dashboard and the CLI follow when they name an upload after its file.
package listname

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxLen bounds a list's name, in characters.
const MaxLen = 200

// Check tells why name cannot name a list, or nil. A name is shown in the dashboard, in the
// CLI's tables on a terminal and in the results' file names, so besides its length it may hold no
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
	case strings.IndexFunc(name, isBidiControl) >= 0:
		return errors.New("contains a bidirectional control character")
	}
	return nil
}

// FromFile is the name an upload without one gets from its file: the file name without its
// directories, with what Check refuses left out and cut to MaxLen characters. It is ""
// when nothing is left.
func FromFile(filename string) string {
	if i := strings.LastIndexAny(filename, `/\`); i >= 0 {
		filename = filename[i+1:] // browsers of old sent the whole Windows path
	}
	filename = strings.ToValidUTF8(filename, "")
	filename = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || isBidiControl(r) {
			return -1
		}
		return r
	}, filename)
	if utf8.RuneCountInString(filename) > MaxLen {
		filename = string([]rune(filename)[:MaxLen])
	}
	return strings.TrimSpace(filename)
}

func isBidiControl(r rune) bool { return unicode.Is(unicode.Bidi_Control, r) }
