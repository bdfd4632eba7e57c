package deploy

import (
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"sigs.k8s.io/yaml"

	"github.com/mailvet/mailvet/internal/app"
)

// composeFile mirrors the parts of the Compose specification docker-compose.yml uses, in the
// long forms it is written in (environment as a map, depends_on with conditions). It is decoded
// strictly: a misspelt key fails instead of being ignored by a reader that does not know it.
type composeFile struct {
	Name       string                    `json:"name"`
	MailvetEnv map[string]string         `json:"x-mailvet-env"`
	Services   map[string]composeService `json:"services"`
	Volumes    map[string]*struct{}      `json:"volumes"`
}

type composeService struct {
	Image       string                       `json:"image"`
	Build       *composeBuild                `json:"build,omitempty"`
	Entrypoint  []string                     `json:"entrypoint,omitempty"`
	Command     []string                     `json:"command,omitempty"`
	Environment map[string]string            `json:"environment,omitempty"`
	Volumes     []string                     `json:"volumes,omitempty"`
	Ports       []string                     `json:"ports,omitempty"`
	Expose      []string                     `json:"expose,omitempty"`
	DependsOn   map[string]composeDependency `json:"depends_on,omitempty"`
	Healthcheck *composeHealthcheck          `json:"healthcheck,omitempty"`
	Restart     string                       `json:"restart"`
	// StopGracePeriod is how long a stopping container may drain before Docker kills it.
	StopGracePeriod string `json:"stop_grace_period,omitempty"`
}

type composeBuild struct {
	Context    string `json:"context"`
	Dockerfile string `json:"dockerfile"`
}

type composeDependency struct {
	Condition string `json:"condition"`
}

type composeHealthcheck struct {
	Test        []string `json:"test"`
	Interval    string   `json:"interval"`
	Timeout     string   `json:"timeout"`
	Retries     int      `json:"retries"`
	StartPeriod string   `json:"start_period,omitempty"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	if err := yaml.UnmarshalStrict(readFile(t, "deploy/docker-compose.yml"), &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

// mailvetServices returns the services that run the Mailvet image, with the binary each runs:
// the image's entry point (bin/api, see the Dockerfile) unless the service overrides it.
func mailvetServices(t *testing.T, c composeFile) map[string]string {
	t.Helper()
	entry := dockerfileEntrypoint(t)
	out := map[string]string{}
	for name, s := range c.Services {
		if s.Build == nil {
			continue
		}
		ep := entry
		if len(s.Entrypoint) > 0 {
			ep = s.Entrypoint
		}
		if len(ep) != 1 || !strings.HasPrefix(ep[0], "/usr/local/bin/") {
			t.Errorf("service %s: entry point %v is not one Mailvet binary", name, ep)
			continue
		}
		out[name] = strings.TrimPrefix(ep[0], "/usr/local/bin/")
	}
	return out
}

func TestCompose(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	known := knownEnv(t)
	services := mailvetServices(t, c)
	natsNodes := natsComposeNodes(c)

	t.Run("every service", func(t *testing.T) {
		for name, s := range c.Services {
			if s.Restart == "" {
				t.Errorf("service %s: a restart policy is required", name)
			}
			for _, v := range s.Volumes {
				src := strings.Split(v, ":")[0]
				if strings.HasPrefix(src, ".") {
					readFile(t, filepath.Join("deploy", src)) // a bind-mounted file must exist
				} else if _, ok := c.Volumes[src]; !ok {
					t.Errorf("service %s: volume %s is not declared", name, src)
				}
			}
			for dep := range s.DependsOn {
				if _, ok := c.Services[dep]; !ok {
					t.Errorf("service %s depends on unknown service %s", name, dep)
				}
			}
		}
		for _, name := range append([]string{"postgres"}, natsNodes...) {
			h := c.Services[name].Healthcheck
			if h == nil || len(h.Test) < 2 || (h.Test[0] != "CMD" && h.Test[0] != "CMD-SHELL") || h.Retries < 1 {
				t.Errorf("service %s: a healthcheck is required", name)
			}
		}
		// Exactly one published port, on the proxy; every tier can then be scaled.
		var published []string
		for name, s := range c.Services {
			for _, p := range s.Ports {
				published = append(published, name+" "+p)
			}
		}
		if len(published) != 1 || !strings.HasPrefix(published[0], "proxy ") {
			t.Errorf("published ports %v: only the proxy publishes one", published)
		}
	})

	t.Run("mailvet services", func(t *testing.T) {
		want := map[string]string{"migrate": "api", "api": "api", "verifier-worker": "verifier-worker", "webhook-worker": "webhook-worker"}
		if len(services) != len(want) {
			t.Errorf("Mailvet services %v, want %v", services, want)
		}
		images := map[string]bool{}
		for name, binary := range services {
			s := c.Services[name]
			if want[name] != binary {
				t.Errorf("service %s runs %s, want %s", name, binary, want[name])
			}
			images[s.Image] = true
			if s.Build.Context != ".." || s.Build.Dockerfile != "deploy/Dockerfile" {
				t.Errorf("service %s: build %+v; the context is the repository root", name, *s.Build)
			}
			for k := range s.Environment {
				if !known[k] {
					t.Errorf("service %s: %s is not a variable Mailvet reads", name, k)
				}
			}
			if got := s.Environment["MAILVET_STREAM_REPLICAS"]; got != fmt.Sprint(len(natsNodes)) {
				t.Errorf("service %s: MAILVET_STREAM_REPLICAS=%q with %d NATS nodes", name, got, len(natsNodes))
			}
			checkNATSURL(t, name, s.Environment["NATS_URL"], natsNodes)
			if !strings.Contains(s.Environment["DATABASE_URL"], "@postgres:5432/") {
				t.Errorf("service %s: DATABASE_URL must point at the postgres service", name)
			}
			if name == "migrate" {
				if !slices.Equal(s.Command, []string{"migrate"}) {
					t.Errorf("migrate runs %v", s.Command)
				}
				if s.DependsOn["postgres"].Condition != "service_healthy" {
					t.Error("migrate must wait for a healthy Postgres")
				}
				if !strings.HasPrefix(s.Restart, "on-failure") {
					t.Errorf("migrate must be retried on failure, restart is %q", s.Restart)
				}
				continue
			}
			if s.Restart != "on-failure" && s.Restart != "unless-stopped" && s.Restart != "always" {
				t.Errorf("service %s: restart %q does not restart a failed process", name, s.Restart)
			}
			if s.DependsOn["migrate"].Condition != "service_completed_successfully" {
				t.Errorf("service %s must start after migrate completed successfully", name)
			}
			for _, n := range natsNodes {
				if s.DependsOn[n].Condition != "service_healthy" {
					t.Errorf("service %s must wait for a healthy %s", name, n)
				}
			}
			_, metricsPort := defaultPorts(t, binary)
			if addr, ok := s.Environment["MAILVET_METRICS_ADDR"]; ok {
				metricsPort = portOf(t, addr)
			}
			if !slices.Contains(s.Expose, fmt.Sprint(metricsPort)) {
				t.Errorf("service %s: the ops listener :%d is not exposed (%v)", name, metricsPort, s.Expose)
			}
		}
		if len(images) != 1 {
			t.Errorf("the Mailvet services use %d images, want one: %v", len(images), images)
		}
	})

	t.Run("prober identity", func(t *testing.T) {
		env := c.Services["verifier-worker"].Environment
		for _, k := range []string{"MAILVET_SMTP_HELO", "MAILVET_SMTP_MAIL_FROM"} {
			v := env[k]
			// Either a literal (a host name; an address) or a variable Compose refuses to start
			// without (${NAME:?message}); never the container's host name by default.
			if !strings.HasPrefix(v, "${"+k+":?") && !strings.Contains(v, ".") {
				t.Errorf("verifier-worker: %s=%q must be set explicitly", k, v)
			}
		}
	})

	t.Run("variables", func(t *testing.T) {
		// Every ${VAR} the file uses is in compose.env.example, so the operator sees all of them.
		example := string(readFile(t, "deploy/compose.env.example"))
		raw := string(readFile(t, "deploy/docker-compose.yml"))
		for _, m := range regexp.MustCompile(`\$\{([A-Z_][A-Z0-9_]*)`).FindAllStringSubmatch(raw, -1) {
			if !regexp.MustCompile(`(?m)^` + m[1] + `=`).MatchString(example) {
				t.Errorf("${%s} is not in compose.env.example", m[1])
			}
		}
	})

	t.Run("nats cluster", func(t *testing.T) {
		if len(natsNodes) != 3 {
			t.Fatalf("NATS services %v, want 3", natsNodes)
		}
		opts, err := server.ProcessConfigFile(filepath.Join(repoRoot, "deploy", "nats-cluster.conf"))
		if err != nil {
			t.Fatalf("nats-server rejects nats-cluster.conf: %v", err)
		}
		if !opts.JetStream || opts.Cluster.Name == "" || opts.StoreDir == "" {
			t.Error("nats-cluster.conf: JetStream with a store and a named cluster are required")
		}
		var routes []string
		for _, r := range opts.Routes {
			routes = append(routes, r.Host)
		}
		for _, n := range natsNodes {
			s := c.Services[n]
			if !slices.Equal(s.Command, []string{"--config", "/etc/nats/nats.conf", "--name", n}) {
				t.Errorf("%s: command %v; each node is named after its service", n, s.Command)
			}
			if !slices.Contains(s.Volumes, "./nats-cluster.conf:/etc/nats/nats.conf:ro") {
				t.Errorf("%s does not mount nats-cluster.conf", n)
			}
			if want := fmt.Sprintf("%s:%d", n, opts.Cluster.Port); !slices.Contains(routes, want) {
				t.Errorf("the routes %v do not reach %s", routes, want)
			}
			if !strings.Contains(strings.Join(s.Healthcheck.Test, " "), fmt.Sprintf(":%d/healthz", opts.HTTPPort)) {
				t.Errorf("%s: the healthcheck must ask /healthz on the monitoring port %d", n, opts.HTTPPort)
			}
		}
		if len(routes) != len(natsNodes) {
			t.Errorf("routes %v for nodes %v", routes, natsNodes)
		}
	})

	t.Run("drain", func(t *testing.T) {
		// A stopping process drains before it exits; Docker's default 10 s would kill it first:
		// the API's requests in flight have app.ShutdownGrace, the verifier's longest is a
		// bulk-list chunk (verified within 3 min, read and written within 30 s each), the webhook
		// worker's an attempt (10 s) and its bookkeeping.
		for name, least := range map[string]time.Duration{"api": app.ShutdownGrace, "verifier-worker": 4 * time.Minute, "webhook-worker": 30 * time.Second} {
			d, err := time.ParseDuration(c.Services[name].StopGracePeriod)
			if err != nil || d < least {
				t.Errorf("%s: stop_grace_period %q, want at least %v", name, c.Services[name].StopGracePeriod, least)
			}
		}
	})

	t.Run("proxy", func(t *testing.T) {
		p := c.Services["proxy"]
		if p.DependsOn["api"].Condition == "" || p.Healthcheck == nil {
			t.Error("the proxy depends on the API and has a healthcheck")
		}
		conf := string(readFile(t, "deploy/nginx.conf"))
		httpPort, _ := defaultPorts(t, "api")
		if addr, ok := c.Services["api"].Environment["MAILVET_HTTP_ADDR"]; ok {
			httpPort = portOf(t, addr)
		}
		for _, want := range []string{
			"resolver 127.0.0.11",                            // Docker's DNS, re-resolved: scaled replicas join
			fmt.Sprintf("set $api http://api:%d;", httpPort), // a variable, so nginx resolves at run time
			"proxy_pass $api;",
			"proxy_buffering off;", // NDJSON stream lines pass at once
			// List uploads stream past the 3m JSON guard, up to the list limit (100 MB).
			"location = /v1/email/lists {\n      client_max_body_size 101m;\n      proxy_request_buffering off;",
			"location = /dashboard/lists {\n      client_max_body_size 101m;\n      proxy_request_buffering off;",
		} {
			if !strings.Contains(conf, want) {
				t.Errorf("nginx.conf lacks %q", want)
			}
		}
		published := strings.Split(p.Ports[0], ":")
		if published[len(published)-1] != "8080" || !strings.Contains(conf, "listen 8080;") {
			t.Errorf("the proxy publishes %v but nginx listens elsewhere", p.Ports)
		}
	})
}

// natsComposeNodes are the services running the NATS image, sorted.
func natsComposeNodes(c composeFile) []string {
	var out []string
	for name, s := range c.Services {
		if strings.HasPrefix(s.Image, "nats:") {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// checkNATSURL checks that NATS_URL lists every node of the cluster on the client port.
func checkNATSURL(t *testing.T, service, natsURL string, nodes []string) {
	t.Helper()
	var hosts []string
	for _, u := range strings.Split(natsURL, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil || p.Scheme != "nats" {
			t.Errorf("service %s: NATS_URL %q", service, natsURL)
			return
		}
		hosts = append(hosts, p.Hostname())
		if p.Port() != "4222" {
			t.Errorf("service %s: NATS_URL %q is not on the client port", service, natsURL)
		}
	}
	slices.Sort(hosts)
	if !slices.Equal(hosts, nodes) {
		t.Errorf("service %s: NATS_URL names %v, the cluster is %v", service, hosts, nodes)
	}
}
