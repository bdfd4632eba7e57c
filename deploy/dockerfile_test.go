package deploy

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, …
	args string
	line int
}

// stage is one build stage: its FROM and the instructions after it.
type stage struct {
	base, name string
	body       []instruction
}

// parseDockerfile reads deploy/Dockerfile into stages. There is no Docker engine to build it
// here, so the checks are on its text; comments and blank lines are dropped, `\` continues a line.
func parseDockerfile(t *testing.T) []stage {
	t.Helper()
	var ins []instruction
	var cur strings.Builder
	start := 0
	for i, raw := range strings.Split(string(readFile(t, "deploy/Dockerfile")), "\n") {
		line := strings.TrimSpace(raw)
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`) + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		ins = append(ins, instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start})
		cur.Reset()
	}
	var stages []stage
	for _, in := range ins {
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			s := stage{base: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("Dockerfile line %d: %s before FROM", in.line, in.cmd)
			}
			continue
		}
		stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
	}
	return stages
}

// dockerfileEntrypoint is the final stage's ENTRYPOINT, in exec form.
func dockerfileEntrypoint(t *testing.T) []string {
	t.Helper()
	stages := parseDockerfile(t)
	for _, in := range stages[len(stages)-1].body {
		if in.cmd == "ENTRYPOINT" {
			var ep []string
			if err := json.Unmarshal([]byte(in.args), &ep); err != nil {
				t.Fatalf("ENTRYPOINT must be in exec form (a JSON array): %v", err)
			}
			return ep
		}
	}
	t.Fatal("the final stage has no ENTRYPOINT")
	return nil
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	stages := parseDockerfile(t)
	if len(stages) < 2 {
		t.Fatalf("%d stages; the image is built in one stage and shipped from another", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]
	if build.name == "" || !strings.HasPrefix(build.base, "golang:") {
		t.Errorf("the first stage builds with a named golang image, got %s AS %q", build.base, build.name)
	}
	if !strings.HasPrefix(final.base, "gcr.io/distroless/static") && final.base != "scratch" {
		t.Errorf("the final stage is %s; a static binary needs no more than distroless/static", final.base)
	}

	// The build: static, every binary under cmd/.
	var goBuild string
	for _, in := range build.body {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			goBuild = in.args
		}
	}
	if !strings.Contains(goBuild, "CGO_ENABLED=0") || !strings.Contains(goBuild, "-trimpath") {
		t.Errorf("go build must run with CGO_ENABLED=0 and -trimpath: %q", goBuild)
	}
	bins := binaries(t)
	for _, b := range bins {
		if !strings.Contains(goBuild, "./cmd/"+b) && !strings.Contains(goBuild, "./cmd/...") {
			t.Errorf("go build does not build cmd/%s", b)
		}
	}

	// The runtime stage: the binaries, a numeric non-root user, the ports.
	var copied, user string
	var exposed []int
	for _, in := range final.body {
		switch in.cmd {
		case "COPY":
			if strings.Contains(in.args, "--from="+build.name) {
				copied += in.args + " "
			}
		case "USER":
			user = in.args
		case "EXPOSE":
			for _, p := range strings.Fields(in.args) {
				n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				if err != nil {
					t.Errorf("EXPOSE %s", p)
				}
				exposed = append(exposed, n)
			}
		case "RUN":
			t.Errorf("Dockerfile line %d: the runtime stage has no shell to RUN with", in.line)
		}
	}
	for _, b := range bins {
		if !strings.Contains(copied, "/"+b) {
			t.Errorf("the image does not contain %s", b)
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %q: a numeric non-root user, so that Kubernetes' runAsNonRoot can verify it", user)
	}
	want := []int{}
	for _, b := range bins {
		httpPort, metricsPort := defaultPorts(t, b)
		if b == "api" {
			want = append(want, httpPort)
		}
		want = append(want, metricsPort)
	}
	for _, p := range want {
		if !slices.Contains(exposed, p) {
			t.Errorf("port %d is not exposed (EXPOSE %v)", p, exposed)
		}
	}
	if ep := dockerfileEntrypoint(t); !slices.Equal(ep, []string{"/usr/local/bin/api"}) {
		t.Errorf("ENTRYPOINT %v", ep)
	}

	// The Kubernetes pods run as the image's user.
	m := loadManifests(t)
	for where, tpl := range m.podTemplates() {
		sc := tpl.Spec.SecurityContext
		if tpl.Spec.Containers[0].Image == "mailvet" && (sc == nil || sc.RunAsUser == nil || fmt.Sprint(*sc.RunAsUser) != uid) {
			t.Errorf("%s: runAsUser must be the image's user %s", where, uid)
		}
	}
}

// TestDockerignore checks that the build context leaves out what the build does not need (and
// what must never reach an image) but keeps everything go build and go:embed read.
func TestDockerignore(t *testing.T) {
	t.Parallel()
	var patterns []string
	for _, l := range strings.Split(string(readFile(t, ".dockerignore")), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			if strings.HasPrefix(l, "!") {
				t.Errorf(".dockerignore: exceptions (%s) are not expected", l)
			}
			patterns = append(patterns, l)
		}
	}
	// ignored reports whether path is excluded: a pattern matches the path or one of its parent
	// directories (Docker's rule), with ** matching any number of directories.
	ignored := func(path string) bool {
		parts := strings.Split(path, "/")
		for i := 1; i <= len(parts); i++ {
			prefix := strings.Join(parts[:i], "/")
			for _, p := range patterns {
				if ok, _ := filepath.Match(p, prefix); ok {
					return true
				}
				if rest, ok := strings.CutPrefix(p, "**/"); ok {
					if m, _ := filepath.Match(rest, parts[i-1]); m {
						return true
					}
				}
			}
		}
		return false
	}
	for _, p := range []string{".git/HEAD", "bin/api", ".tools/bin/staticcheck", ".data/nats", "node_modules/x",
		"data/node_modules/x", "clients/typescript/node_modules/x", "deploy/.env", "internal/api/api.test"} {
		if !ignored(p) {
			t.Errorf("%s reaches the build context", p)
		}
	}
	for _, p := range []string{"go.mod", "go.sum", "cmd/api/main.go", "internal/api/openapi.json", "migrations/00001_initial.sql",
		"docs/errors.md", "docs/docs.go", "internal/verify/disposable/domains.txt", "deploy/Dockerfile"} {
		if ignored(p) {
			t.Errorf("%s is excluded, but the build needs it", p)
		}
	}
}
