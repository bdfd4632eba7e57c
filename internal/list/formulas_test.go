package list

import (
	"bytes"
	"encoding/csv"
	"testing"
)

// Every cell that starts with one of the OWASP formula characters gets an apostrophe; others,
// and the record passed in, stay as they are.
func TestEscapeFormulaCells(t *testing.T) {
	in := []string{"=1+2", "+33", "-2", "@SUM(A1)", "\tx", "\rx", "a=b", "", " =x", "'=x", "ann@acme.test"}
	want := []string{"'=1+2", "'+33", "'-2", "'@SUM(A1)", "'\tx", "'\rx", "a=b", "", " =x", "'=x", "ann@acme.test"}
	got := EscapeFormulaCells(in)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("cell %d: %q, want %q", i, got[i], want[i])
		}
	}
	if in[0] != "=1+2" {
		t.Error("the input record was changed")
	}
	plain := []string{"a", "b"}
	if got := EscapeFormulaCells(plain); &got[0] != &plain[0] {
		t.Error("a record without formula cells was copied")
	}
	for _, c := range []struct {
		f    Formulas
		want string
	}{{EscapeFormulas, "'=x,y\n"}, {RawFormulas, "=x,y\n"}} {
		var buf bytes.Buffer
		cw := csv.NewWriter(&buf)
		w := newRecordWriter(cw, c.f)
		if err := w.Write([]string{"=x", "y"}); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		if buf.String() != c.want {
			t.Errorf("%v: %q, want %q", c.f, buf.String(), c.want)
		}
	}
}
