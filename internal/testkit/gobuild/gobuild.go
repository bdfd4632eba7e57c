// Package gobuild builds the project's binaries for tests that run them as real processes (the
// demo API of the client tests, the fleet of the cluster fault test).
package gobuild

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Build compiles the main packages pkgs (like "./cmd/api") of the module that contains the
// working directory into dir, with `go build -o dir/`. The binaries are those of a deployment:
// built without -race, whatever the test binary is.
func Build(dir string, pkgs ...string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = "/usr/local/go/bin/go" // docs/development.md, "What the machine needs"
	}
	cmd := exec.Command(goTool, append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, out)
	}
	return nil
}

// ModuleRoot is the directory of go.mod above the working directory (a package's directory
// under go test).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("gobuild: no go.mod above the working directory")
		}
		dir = parent
	}
}
