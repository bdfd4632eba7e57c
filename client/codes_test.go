package client_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Every code of docs/errors.md has its Code constant, so that a caller switches on names the
// compiler checks rather than on strings it may mistype; the summary table of that page is the
// list.
func TestEveryDocumentedCodeHasAConstant(t *testing.T) {
	raw, err := os.ReadFile("../docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| \\[`([a-z_]+)`\\]\\(#").FindAllStringSubmatch(string(raw), -1) {
		documented = append(documented, m[1])
	}
	if len(documented) < 20 {
		t.Fatalf("read %d codes from docs/errors.md's summary: its table changed shape", len(documented))
	}
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Values) != len(vs.Names) {
			return true
		}
		for i, name := range vs.Names {
			if lit, ok := vs.Values[i].(*ast.BasicLit); ok && strings.HasPrefix(name.Name, "Code") && lit.Kind == token.STRING {
				v, _ := strconv.Unquote(lit.Value)
				declared = append(declared, v)
			}
		}
		return true
	})
	for _, code := range documented {
		if !slices.Contains(declared, code) {
			t.Errorf("docs/errors.md's %s has no Code constant in client/errors.go", code)
		}
	}
}
