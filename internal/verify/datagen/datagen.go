// Package datagen holds what the `make data` generators share: reading the pinned npm packages
// that data/package-lock.json installs under data/node_modules.
package datagen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// PackageVersion is the installed version of npm package pkg under data.
func PackageVersion(data, pkg string) (string, error) {
	var p struct {
		Version string `json:"version"`
	}
	if err := ReadJSON(filepath.Join(data, "node_modules", pkg, "package.json"), &p); err != nil {
		return "", err
	}
	if p.Version == "" {
		return "", fmt.Errorf("%s: package.json has no version", pkg)
	}
	return p.Version, nil
}

// ReadJSON decodes the JSON file at path into v; a missing file says how to install it.
func ReadJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w (run `make data`, which installs the packages first)", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
