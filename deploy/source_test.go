package deploy

// Facts the deployment files must agree with, read from the code itself rather than copied into
// the tests: the environment variables the binaries read, their default listen ports, the metrics
// they register, the JetStream consumers they run, and the binaries that exist.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/mailvet/mailvet/internal/config"
	"github.com/mailvet/mailvet/internal/health"
)

// repoRoot is the repository root, relative to this package's directory (where go test runs).
const repoRoot = ".."

// roleOfBinary maps each binary to the configuration role it loads (cmd/*/main.go).
var roleOfBinary = map[string]config.Role{
	"api":             config.RoleAPI,
	"verifier-worker": config.RoleVerifier,
	"webhook-worker":  config.RoleWebhook,
}

// goRuntimeEnv are variables read by Go's standard library or runtime rather than by
// internal/config; docs/operations.md documents SSL_CERT_FILE and SSL_CERT_DIR.
var goRuntimeEnv = []string{"SSL_CERT_FILE", "SSL_CERT_DIR", "GOMAXPROCS", "GOMEMLIMIT", "GODEBUG", "TZ"}

var (
	envOnce  sync.Once
	envNames map[string]bool
)

// knownEnv returns every environment variable a Mailvet binary reads: config.Load is run for each
// role with a getenv that records the names it is asked for, so a variable added to or renamed in
// internal/config (or internal/plan, whose variables Load reads) is picked up without editing
// this test, and a misspelt name in a deployment file fails.
func knownEnv(t *testing.T) map[string]bool {
	t.Helper()
	envOnce.Do(func() {
		envNames = map[string]bool{}
		for _, role := range roleOfBinary {
			// The resolver is set so that Load does not read /etc/resolv.conf; the value is the
			// only thing that differs between runs, and names are all that is kept.
			_, _ = config.Load(role, false, func(name string) string {
				envNames[name] = true
				if name == "MAILVET_DNS_RESOLVER" {
					return "127.0.0.1:53"
				}
				return ""
			})
		}
		for _, n := range goRuntimeEnv {
			envNames[n] = true
		}
	})
	if len(envNames) < 20 {
		t.Fatalf("config.Load asked for only %d variables: %v", len(envNames), envNames)
	}
	return envNames
}

// defaultPorts returns the API port and the metrics port a binary listens on without
// configuration (internal/config defaults).
func defaultPorts(t *testing.T, binary string) (httpPort, metricsPort int) {
	t.Helper()
	role, ok := roleOfBinary[binary]
	if !ok {
		t.Fatalf("unknown binary %q", binary)
	}
	c, err := config.Load(role, false, func(name string) string {
		if name == "MAILVET_DNS_RESOLVER" {
			return "127.0.0.1:53"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	return portOf(t, c.HTTPAddr), portOf(t, c.MetricsAddr)
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	return n
}

// binaries lists the server binaries the image ships (roleOfBinary), each of which must exist
// under cmd/. Other commands there (a client CLI) are not part of the server image.
func binaries(t *testing.T) []string {
	t.Helper()
	var out []string
	for b := range roleOfBinary {
		if _, err := os.Stat(filepath.Join(repoRoot, "cmd", b, "main.go")); err != nil {
			t.Fatalf("binary %s: %v", b, err)
		}
		out = append(out, b)
	}
	slices.Sort(out)
	return out
}

// metric is one exported metric family as a PromQL expression sees it.
type metric struct {
	labels map[string]bool
}

// codeMetrics returns the metric names the code registers, with their label names: every
// prometheus.*Opts literal under internal/ and cmd/ (Namespace, Subsystem and Name joined as
// client_golang does), the labels of the *Vec constructor it is passed to, the _bucket, _sum and
// _count series of histograms and summaries, plus the Go runtime and process collectors of
// health.NewRegistry, gathered in-process.
func codeMetrics(t *testing.T) map[string]metric {
	t.Helper()
	out := map[string]metric{}
	fset := token.NewFileSet()
	for _, dir := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				ctor := selectorName(call.Fun, "prometheus")
				if !strings.HasPrefix(ctor, "New") || len(call.Args) == 0 {
					return true
				}
				lit, ok := call.Args[0].(*ast.CompositeLit)
				if !ok {
					return true
				}
				opts := selectorName(lit.Type, "prometheus")
				if !strings.HasSuffix(opts, "Opts") {
					return true
				}
				name := optsName(t, fset, lit)
				labels := map[string]bool{}
				if strings.HasSuffix(ctor, "Vec") && len(call.Args) > 1 {
					for _, l := range stringList(t, fset, call.Args[1]) {
						labels[l] = true
					}
				}
				switch opts {
				case "HistogramOpts":
					out[name+"_bucket"] = metric{labels: with(labels, "le")}
					out[name+"_sum"] = metric{labels: labels}
					out[name+"_count"] = metric{labels: labels}
				case "SummaryOpts":
					out[name] = metric{labels: with(labels, "quantile")}
					out[name+"_sum"] = metric{labels: labels}
					out[name+"_count"] = metric{labels: labels}
				default:
					out[name] = metric{labels: labels}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(out) < 5 {
		t.Fatalf("found only %d Mailvet metrics in the code: %v", len(out), out)
	}
	families, err := health.NewRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		name := f.GetName()
		switch f.GetType().String() {
		case "HISTOGRAM":
			out[name+"_bucket"] = metric{labels: with(labels, "le")}
			out[name+"_sum"] = metric{labels: labels}
			out[name+"_count"] = metric{labels: labels}
		case "SUMMARY":
			out[name] = metric{labels: with(labels, "quantile")}
			out[name+"_sum"] = metric{labels: labels}
			out[name+"_count"] = metric{labels: labels}
		default:
			out[name] = metric{labels: labels}
		}
	}
	return out
}

func with(labels map[string]bool, extra string) map[string]bool {
	out := map[string]bool{extra: true}
	for l := range labels {
		out[l] = true
	}
	return out
}

// selectorName returns Sel of pkg.Sel, or "" for any other expression.
func selectorName(e ast.Expr, pkg string) string {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	if id, ok := sel.X.(*ast.Ident); !ok || id.Name != pkg {
		return ""
	}
	return sel.Sel.Name
}

// optsName joins Namespace, Subsystem and Name of a prometheus.*Opts literal. A name that is not
// a string literal fails the test: this reader could not see it, so the files could not be
// checked against it.
func optsName(t *testing.T, fset *token.FileSet, lit *ast.CompositeLit) string {
	t.Helper()
	parts := map[string]string{}
	for _, el := range lit.Elts {
		kv, ok := el.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		key, ok := kv.Key.(*ast.Ident)
		if !ok || (key.Name != "Name" && key.Name != "Namespace" && key.Name != "Subsystem") {
			continue
		}
		parts[key.Name] = stringLit(t, fset, kv.Value)
	}
	var name []string
	for _, k := range []string{"Namespace", "Subsystem", "Name"} {
		if parts[k] != "" {
			name = append(name, parts[k])
		}
	}
	if parts["Name"] == "" {
		t.Fatalf("%s: a metric without a literal Name", fset.Position(lit.Pos()))
	}
	return strings.Join(name, "_")
}

func stringLit(t *testing.T, fset *token.FileSet, e ast.Expr) string {
	t.Helper()
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		t.Fatalf("%s: expected a string literal (deploy tests read metric names from the source)", fset.Position(e.Pos()))
	}
	s, err := strconv.Unquote(bl.Value)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func stringList(t *testing.T, fset *token.FileSet, e ast.Expr) []string {
	t.Helper()
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		t.Fatalf("%s: expected []string{…} label names", fset.Position(e.Pos()))
	}
	var out []string
	for _, el := range lit.Elts {
		out = append(out, stringLit(t, fset, el))
	}
	return out
}

// consumer is one durable JetStream consumer of a Mailvet worker.
type consumer struct{ stream, name string }

// queueConsumers returns the durable consumers internal/queue defines: the string constants
// Stream* and Consumer* of the package, and every call that passes a Stream* constant and then a
// Consumer* constant (the consumer specs of internal/queue/consumers.go). Every Consumer*
// constant must be found in such a call.
func queueConsumers(t *testing.T) []consumer {
	t.Helper()
	fset := token.NewFileSet()
	dir := filepath.Join(repoRoot, "internal", "queue")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	var files []*ast.File
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if bl, ok := vs.Values[i].(*ast.BasicLit); ok && bl.Kind == token.STRING {
							consts[n.Name], _ = strconv.Unquote(bl.Value)
						}
					}
				}
			}
		}
	}
	seen := map[consumer]bool{}
	named := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			s, ok1 := call.Args[0].(*ast.Ident)
			c, ok2 := call.Args[1].(*ast.Ident)
			if ok1 && ok2 && strings.HasPrefix(s.Name, "Stream") && strings.HasPrefix(c.Name, "Consumer") {
				seen[consumer{stream: consts[s.Name], name: consts[c.Name]}] = true
				named[c.Name] = true
			}
			return true
		})
	}
	for name := range consts {
		if strings.HasPrefix(name, "Consumer") && !named[name] {
			t.Fatalf("internal/queue: consumer %s (%q) is not built from a Stream* and a Consumer* constant; teach queueConsumers where it lives", name, consts[name])
		}
	}
	var out []consumer
	for c := range seen {
		if c.stream == "" || c.name == "" {
			t.Fatalf("internal/queue: unresolved consumer %+v", c)
		}
		out = append(out, c)
	}
	if len(out) < 3 {
		t.Fatalf("found only %d consumers in internal/queue: %v", len(out), out)
	}
	return out
}

// readFile reads a file relative to the repository root.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
