package docs

import (
	"bufio"
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// module is the import path of the repository's module.
const module = "github.com/mailvet/mailvet"

// repoRoot is the module's root: the parent of this package's directory, which go test runs in.
const repoRoot = ".."

// packages returns every package of the module (`go list ./...`, test-only packages included),
// by its path relative to the module ("internal/verify"), with the module packages it depends on,
// directly or not, test files excluded.
func packages(t *testing.T) map[string][]string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	cmd := exec.Command(goTool, "list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", "./...")
	cmd.Dir = repoRoot
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	pkgs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		var deps []string
		for _, d := range fields[1:] {
			if rel, ok := strings.CutPrefix(d, module+"/"); ok {
				deps = append(deps, rel)
			}
		}
		pkgs[relative(fields[0])] = deps
	}
	return pkgs
}

func relative(importPath string) string {
	return strings.TrimPrefix(strings.TrimPrefix(importPath, module), "/")
}

// under reports whether pkg is prefix or one of its subpackages.
func under(pkg, prefix string) bool {
	return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
}

// importRule is one rule of architecture.md, "Dependencies": the packages under from must not
// depend, directly or through another package, on any package under one of banned. A banned ""
// is every package of the module.
type importRule struct {
	from   string
	banned []string
	why    string
}

// engine is the verification engine: the pipeline and its layers.
var engine = []string{"internal/verify"}

var importRules = []importRule{
	{"internal/verdict", []string{""}, "the result type is the vocabulary every other package shares"},
	{"internal/config", append([]string{"internal/app", "internal/api"}, engine...), "the configuration is read before anything is built"},
	{"internal/verify", []string{"internal/config", "internal/app"}, "the engine takes its own verify.Config"},
	{"internal/usage", engine, "metering names results (internal/verdict), never the engine"},
	{"internal/queue", engine, "the queues carry results (internal/verdict), never the engine"},
	{"internal/list", engine, "lists store results (internal/verdict), never the engine"},
	{"internal/job", engine, "jobs store results, never the engine"},
	{"internal/app", engine, "the process wiring every binary shares does not verify"},
	{"internal/webhook", append([]string{"internal/config"}, engine...), "the delivery worker takes its own webhook.Config and never verifies"},
	{"cmd/webhook-worker", engine, "the webhook binary delivers callbacks and never verifies"},
	{"internal/billing", []string{"internal/config"}, "billing takes its own billing.Config"},
	{"internal/dashboard", []string{"internal/config"}, "the dashboard takes its own dashboard.Config"},
	{"internal/dashboard", []string{"internal/api"}, "the dashboard calls the services the API calls, never the API"},
	{"internal/sandbox", []string{"internal/usage", "internal/queue", "internal/job", "internal/list", "internal/webhook", "internal/config", "internal/verify"}, "the sandbox answers from its table and takes the syntax check from its caller: no I/O, no engine"},
	{"internal/verification", append([]string{"internal/api", "internal/dashboard", "internal/config"}, engine...), "the verification service is called by the API and the dashboard, runs the engine's local layers through an interface, and takes its own Config"},
	{"internal/problem", append([]string{"internal/api", "internal/dashboard", "internal/config"}, engine...), "the one error mapping is shared by the API and the dashboard, and maps the domain's errors, not the engine's"},
}

// outsideRule is a rule of architecture.md, "Dependencies", about packages outside the module:
// the packages under from must not import any of banned themselves (a dependency may: the
// broker's client speaks HTTP), nor depend on any of deps at all.
type outsideRule struct {
	from   string
	banned []string
	deps   []string
	why    string
}

var outsideRules = []outsideRule{
	{"internal/verification", []string{"net/http"}, []string{"github.com/labstack/echo"}, "the verification service has no HTTP in it: the API's handlers adapt it"},
}

// TestOutsideImportRules checks outsideRules against `go list` (test files excluded).
func TestOutsideImportRules(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	for _, r := range outsideRules {
		t.Run(r.from, func(t *testing.T) {
			cmd := exec.Command(goTool, "list", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .Deps \" \"}}", "./"+r.from+"/...")
			cmd.Dir = repoRoot
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) == 0 || lines[0] == "" {
				t.Fatalf("the rule names %s, which has no package", r.from)
			}
			for _, line := range lines {
				pkg, rest, _ := strings.Cut(line, "|")
				imports, deps, _ := strings.Cut(rest, "|")
				for _, i := range strings.Fields(imports) {
					for _, b := range r.banned {
						if under(i, b) {
							t.Errorf("%s imports %s: %s", relative(pkg), i, r.why)
						}
					}
				}
				for _, d := range strings.Fields(deps) {
					for _, b := range r.deps {
						if under(d, b) {
							t.Errorf("%s depends on %s: %s", relative(pkg), d, r.why)
						}
					}
				}
			}
		})
	}
}

// TestImportRules keeps the dependencies pointing one way (architecture.md, "Dependencies"): a
// package that needs the verify result imports internal/verdict, not the engine, and a component
// takes its own small Config instead of the process configuration.
func TestImportRules(t *testing.T) {
	t.Parallel()
	pkgs := packages(t)
	for _, r := range importRules {
		t.Run(r.from, func(t *testing.T) {
			// A rule about a package that is gone (renamed, say) would hold vacuously.
			if _, ok := pkgs[r.from]; !ok {
				t.Fatalf("the rule names %s, which is not a package of the module", r.from)
			}
			for _, pkg := range slices.Sorted(maps.Keys(pkgs)) {
				if !under(pkg, r.from) {
					continue
				}
				for _, d := range pkgs[pkg] {
					for _, b := range r.banned {
						if (b == "" || under(d, b)) && !under(d, r.from) {
							t.Errorf("%s depends on %s: %s", pkg, d, r.why)
						}
					}
				}
			}
		})
	}
}

// mapNames matches the names a line of the package map starts with.
var mapNames = regexp.MustCompile(`^[\w./-]+(, [\w./-]+)*`)

// packageMap returns the first word of each line of architecture.md's package map (the code
// block under "Package layout"), without a trailing slash; a line that lists several packages
// of one directory ("internal/verify/syntax, disposable, mx") gives each of them.
func packageMap(t *testing.T) []string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repoRoot, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(text), "\n## Package layout\n")
	if !ok {
		t.Fatal(`architecture.md has no "## Package layout" section`)
	}
	_, block, ok := strings.Cut(rest, "```\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal(`architecture.md's "Package layout" has no code block`)
	}
	var entries []string
	sc := bufio.NewScanner(strings.NewReader(block))
	for sc.Scan() {
		names := strings.Split(mapNames.FindString(sc.Text()), ", ")
		dir := strings.TrimSuffix(names[0], "/")
		if dir == "" {
			continue
		}
		entries = append(entries, dir)
		for _, n := range names[1:] {
			entries = append(entries, path.Join(path.Dir(dir), n))
		}
	}
	return entries
}

// TestPackageMapCoversEveryPackage compares architecture.md's package map with `go list ./...`:
// every package is on the map, and every entry of the map is a package or a directory that
// exists.
func TestPackageMapCoversEveryPackage(t *testing.T) {
	t.Parallel()
	pkgs := packages(t)
	entries := packageMap(t)
	for _, pkg := range slices.Sorted(maps.Keys(pkgs)) {
		if pkg != "" && !slices.Contains(entries, pkg) {
			t.Errorf("package %s is missing from architecture.md's package map", pkg)
		}
	}
	for _, e := range entries {
		if _, ok := pkgs[e]; ok {
			continue
		}
		if st, err := os.Stat(filepath.Join(repoRoot, e)); err != nil || !st.IsDir() {
			t.Errorf("architecture.md's package map names %s, which is neither a package nor a directory", e)
		}
	}
}
