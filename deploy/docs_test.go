package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// anchors returns the GitHub anchors of a Markdown file's headings.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, l := range strings.Split(string(readFile(t, path)), "\n") {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(l, "#")))
		out[strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-")] = true
	}
	return out
}

// TestDeploymentGuide checks docs/deployment.md against the files it describes: every relative
// link and anchor resolves, every file of deploy/ is mentioned, and every alert of alerts.yaml
// is in its table.
func TestDeploymentGuide(t *testing.T) {
	t.Parallel()
	const guide = "docs/deployment.md"
	text := string(readFile(t, guide))
	for _, m := range regexp.MustCompile(`\]\(([^)\s]+)\)`).FindAllStringSubmatch(text, -1) {
		target := m[1]
		if strings.Contains(target, "://") {
			continue
		}
		file, anchor, _ := strings.Cut(target, "#")
		path := guide
		if file != "" {
			path = filepath.ToSlash(filepath.Join("docs", file))
			if _, err := os.Stat(filepath.Join(repoRoot, path)); err != nil {
				t.Errorf("link %s: %v", target, err)
				continue
			}
		}
		if anchor != "" && !anchors(t, path)[anchor] {
			t.Errorf("link %s: %s has no heading with that anchor", target, path)
		}
	}
	err := filepath.WalkDir(filepath.Join(repoRoot, "deploy"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".go") {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		rel = filepath.ToSlash(rel)
		if !strings.Contains(text, rel) && !strings.Contains(text, "`"+filepath.Base(rel)+"`") {
			t.Errorf("%s does not mention %s", guide, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var rf rulesFile
	if err := yaml.UnmarshalStrict(readFile(t, "deploy/grafana/alerts.yaml"), &rf); err != nil {
		t.Fatal(err)
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if !strings.Contains(text, "| `"+r.Alert+"` | "+r.Labels["severity"]+" |") {
				t.Errorf("%s: the alerts table lacks %s (%s)", guide, r.Alert, r.Labels["severity"])
			}
		}
	}
}
