package list

import "encoding/csv"

// Formulas says what a CSV download does with cells a spreadsheet would read as a formula
// (docs/lists.md, "Formula cells").
type Formulas bool

const (
	// EscapeFormulas prefixes such cells with an apostrophe: the default, for files a person
	// opens in a spreadsheet.
	EscapeFormulas Formulas = true
	// RawFormulas writes every cell as stored, for programs that read the file
	// (escape_formulas=false).
	RawFormulas Formulas = false
)

// recordWriter is what Export writes CSV records to: a csv.Writer, or one that escapes
// formula cells first.
type recordWriter interface {
	Write(record []string) error
	Flush()
	Error() error
}

// newRecordWriter is w's CSV writer under policy f.
func newRecordWriter(w *csv.Writer, f Formulas) recordWriter {
	if f == EscapeFormulas {
		return formulaEscaper{w}
	}
	return w
}

// formulaEscaper neutralises formula cells in every record it writes, headers included: an
// uploaded file is the customer's own, but its cells (and its column names) come from whoever
// filled in the form the addresses were collected with.
type formulaEscaper struct{ *csv.Writer }

func (f formulaEscaper) Write(record []string) error {
	return f.Writer.Write(EscapeFormulaCells(record))
}

// EscapeFormulaCells returns record with an apostrophe before every cell that starts with =, +,
// -, @, a tab or a carriage return, the characters that make a spreadsheet read a cell as a
// formula (the OWASP "CSV injection" advice); a spreadsheet shows the apostrophe-prefixed cell
// as text. record itself is not changed; it is returned as is when no cell needs escaping.
func EscapeFormulaCells(record []string) []string {
	var out []string
	for i, cell := range record {
		if !isFormula(cell) {
			continue
		}
		if out == nil {
			out = append([]string(nil), record...)
		}
		out[i] = "'" + cell
	}
	if out == nil {
		return record
	}
	return out
}

func isFormula(cell string) bool {
	if cell == "" {
		return false
	}
	switch cell[0] {
	case '=', '+', '-', '@', '\t', '\r':
		return true
	}
	return false
}
