package deploy

import (
	"bytes"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/mailvet/mailvet/internal/app"
)

const k8sDir = "deploy/kubernetes"

// scaledObject mirrors KEDA's keda.sh/v1alpha1 ScaledObject (apis/keda/v1alpha1 of
// github.com/kedacore/keda/v2: ScaledObjectSpec, AdvancedConfig, ScaleTriggers, Fallback) for
// the fields these manifests use. KEDA's own module drags in most of Kubernetes' client
// libraries, so the schema is copied rather than imported; a field KEDA does not have, or one
// these structs leave out, fails the strict decoding.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion,omitempty"`
			Kind       string `json:"kind,omitempty"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		PollingInterval *int32 `json:"pollingInterval,omitempty"`
		CooldownPeriod  *int32 `json:"cooldownPeriod,omitempty"`
		MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
		Advanced        *struct {
			HorizontalPodAutoscalerConfig *struct {
				Name     string                                         `json:"name,omitempty"`
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
			RestoreToOriginalReplicaCount bool `json:"restoreToOriginalReplicaCount,omitempty"`
		} `json:"advanced,omitempty"`
		Fallback *struct {
			FailureThreshold int32 `json:"failureThreshold"`
			Replicas         int32 `json:"replicas"`
		} `json:"fallback,omitempty"`
		Triggers []struct {
			Type              string            `json:"type"`
			Name              string            `json:"name,omitempty"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind,omitempty"`
			} `json:"authenticationRef,omitempty"`
		} `json:"triggers"`
	} `json:"spec"`
}

// kustomization mirrors kustomize.config.k8s.io/v1beta1 Kustomization for the fields used.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images"`
}

// natsJetStreamMetadata are the keys of KEDA's nats-jetstream trigger (the scaler's
// parseNATSJetStreamMetadata, pkg/scalers/nats_jetstream_scaler.go), the required ones true.
var natsJetStreamMetadata = map[string]bool{
	"natsServerMonitoringEndpoint": true, "account": true, "stream": true, "consumer": true,
	"lagThreshold": true, "activationLagThreshold": false, "useHttps": false,
}

// newObject returns the Go type of a manifest's apiVersion and kind.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "v1 Namespace":
		return &corev1.Namespace{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Secret":
		return &corev1.Secret{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "batch/v1 Job":
		return &batchv1.Job{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, nil
	case "keda.sh/v1alpha1 ScaledObject":
		return &scaledObject{}, nil
	}
	return nil, fmt.Errorf("no Go type for apiVersion %q kind %q", apiVersion, kind)
}

// manifests is everything in deploy/kubernetes, decoded.
type manifests struct {
	kust         kustomization
	files        []string
	namespaces   []*corev1.Namespace
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	services     []*corev1.Service
	deployments  map[string]*appsv1.Deployment
	statefulSets map[string]*appsv1.StatefulSet
	jobs         []*batchv1.Job
	pdbs         []*policyv1.PodDisruptionBudget
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	scaled       []*scaledObject
}

// splitYAML splits a multi-document YAML file at its `---` lines.
func splitYAML(b []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if strings.TrimSpace(stripComments(cur.String())) != "" {
			docs = append(docs, slices.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if strings.TrimRight(line, "\r\n") == "---" {
			flush()
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return docs
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// loadManifests decodes every manifest strictly into its Kubernetes API type (or the KEDA
// mirror above): an unknown field, a misspelt one or a value of the wrong type fails.
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
		deployments: map[string]*appsv1.Deployment{}, statefulSets: map[string]*appsv1.StatefulSet{}}
	if err := yaml.UnmarshalStrict(readFile(t, k8sDir+"/kustomization.yaml"), &m.kust); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	paths, err := filepath.Glob(filepath.Join(repoRoot, k8sDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		name := filepath.Base(p)
		if name == "kustomization.yaml" {
			continue
		}
		if !strings.HasSuffix(name, ".yaml") {
			t.Errorf("%s: every file in %s is a .yaml manifest", name, k8sDir)
			continue
		}
		m.files = append(m.files, name)
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitYAML(raw) {
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s document %d: %v", name, i+1, err)
			}
			obj, err := newObject(tm.APIVersion, tm.Kind)
			if err != nil {
				t.Fatalf("%s document %d: %v", name, i+1, err)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s document %d (%s): %v", name, i+1, tm.Kind, err)
			}
			switch o := obj.(type) {
			case *corev1.Namespace:
				m.namespaces = append(m.namespaces, o)
			case *corev1.ConfigMap:
				m.configMaps[o.Name] = o
			case *corev1.Secret:
				m.secrets[o.Name] = o
			case *corev1.Service:
				m.services = append(m.services, o)
			case *appsv1.Deployment:
				m.deployments[o.Name] = o
			case *appsv1.StatefulSet:
				m.statefulSets[o.Name] = o
			case *batchv1.Job:
				m.jobs = append(m.jobs, o)
			case *policyv1.PodDisruptionBudget:
				m.pdbs = append(m.pdbs, o)
			case *autoscalingv2.HorizontalPodAutoscaler:
				m.hpas = append(m.hpas, o)
			case *scaledObject:
				m.scaled = append(m.scaled, o)
			}
			if meta, ok := obj.(metav1.Object); ok && meta.GetNamespace() != "" {
				t.Errorf("%s %s: leave the namespace to kustomization.yaml", tm.Kind, meta.GetName())
			}
		}
	}
	return m
}

// podTemplates are the pod templates of the Deployments, StatefulSets and Jobs, by workload name.
func (m *manifests) podTemplates() map[string]corev1.PodTemplateSpec {
	out := map[string]corev1.PodTemplateSpec{}
	for n, d := range m.deployments {
		out["Deployment/"+n] = d.Spec.Template
	}
	for n, s := range m.statefulSets {
		out["StatefulSet/"+n] = s.Spec.Template
	}
	for _, j := range m.jobs {
		out["Job/"+j.Name] = j.Spec.Template
	}
	return out
}

// mailvetBinary returns the binary a Mailvet container runs (its command, /usr/local/bin/NAME),
// or "" for a container of another image.
func mailvetBinary(t *testing.T, c corev1.Container) string {
	t.Helper()
	if c.Image != "mailvet" {
		return ""
	}
	if len(c.Command) != 1 || !strings.HasPrefix(c.Command[0], "/usr/local/bin/") {
		t.Errorf("container %s: command must be the one binary, /usr/local/bin/NAME: %v", c.Name, c.Command)
		return ""
	}
	b := strings.TrimPrefix(c.Command[0], "/usr/local/bin/")
	if _, ok := roleOfBinary[b]; !ok {
		t.Errorf("container %s: %s is not a Mailvet binary", c.Name, c.Command[0])
	}
	return b
}

// effectiveEnv returns the environment a container gets: its env entries and every key of the
// ConfigMaps and Secrets of its envFrom (which must exist).
func (m *manifests) effectiveEnv(t *testing.T, where string, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			cm, ok := m.configMaps[ef.ConfigMapRef.Name]
			if !ok {
				t.Errorf("%s: envFrom ConfigMap %s does not exist", where, ef.ConfigMapRef.Name)
				continue
			}
			maps.Copy(env, cm.Data)
		case ef.SecretRef != nil:
			s, ok := m.secrets[ef.SecretRef.Name]
			if !ok {
				t.Errorf("%s: envFrom Secret %s does not exist", where, ef.SecretRef.Name)
				continue
			}
			maps.Copy(env, s.StringData)
			for k, v := range s.Data {
				env[k] = string(v)
			}
		}
	}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)

	t.Run("kustomization", func(t *testing.T) {
		if m.kust.APIVersion != "kustomize.config.k8s.io/v1beta1" || m.kust.Kind != "Kustomization" {
			t.Errorf("kustomization: %s %s", m.kust.APIVersion, m.kust.Kind)
		}
		if got, want := slices.Sorted(slices.Values(m.kust.Resources)), slices.Sorted(slices.Values(m.files)); !slices.Equal(got, want) {
			t.Errorf("kustomization resources %v, files %v", got, want)
		}
		if len(m.namespaces) != 1 || m.namespaces[0].Name != m.kust.Namespace {
			t.Errorf("one Namespace named %q expected", m.kust.Namespace)
		}
		if len(m.kust.Images) != 1 || m.kust.Images[0].Name != "mailvet" {
			t.Errorf("kustomization images: %+v", m.kust.Images)
		}
	})

	t.Run("workloads", func(t *testing.T) {
		known := knownEnv(t)
		seen := map[string]bool{}
		for where, tpl := range m.podTemplates() {
			spec := tpl.Spec
			if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
				t.Errorf("%s: runAsNonRoot must be set", where)
			}
			for _, c := range spec.Containers {
				w := where + "/" + c.Name
				req := c.Resources.Requests
				if req.Cpu().IsZero() || req.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
					t.Errorf("%s: CPU and memory requests and a memory limit are required", w)
				}
				if c.SecurityContext == nil || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
					t.Errorf("%s: allowPrivilegeEscalation: false is required", w)
				}
				b := mailvetBinary(t, c)
				if b == "" {
					continue
				}
				env := m.effectiveEnv(t, w, c)
				for name := range env {
					if !known[name] {
						t.Errorf("%s: %s is not a variable Mailvet reads", w, name)
					}
				}
				if got := env["MAILVET_STREAM_REPLICAS"]; got != strconv.Itoa(natsReplicas(t, m)) {
					t.Errorf("%s: MAILVET_STREAM_REPLICAS=%q, the NATS cluster has %d nodes", w, got, natsReplicas(t, m))
				}
				if _, ok := env["DATABASE_URL"]; !ok {
					t.Errorf("%s: DATABASE_URL is not set", w)
				}
				if strings.HasPrefix(where, "Job/") {
					if b != "api" || !slices.Equal(c.Args, []string{"migrate"}) {
						t.Errorf("%s: the migration Job must run `api migrate`, runs %s %v", w, b, c.Args)
					}
					seen["migrate"] = true
					continue
				}
				seen[b] = true
				checkMailvetContainer(t, w, b, c, env)
			}
		}
		for _, want := range []string{"api", "verifier-worker", "webhook-worker", "migrate"} {
			if !seen[want] {
				t.Errorf("no workload runs %s", want)
			}
		}
		for _, j := range m.jobs {
			if j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit < 1 || j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
				t.Errorf("Job %s: retries come from backoffLimit ≥ 1 with restartPolicy Never", j.Name)
			}
		}
	})

	t.Run("drain", func(t *testing.T) {
		// Each tier drains on SIGTERM (docs/operations.md, "Start-up and shutdown"); the grace
		// period must cover the pause before it and the longest drain, or the kubelet kills the
		// pod mid-drain: the API's in-flight requests (app.ShutdownGrace, which covers a single
		// verification), the verifier's bulk-list chunk (verified within 3 min, read and written
		// within 30 s each), the webhook worker's attempt (10 s) and its bookkeeping.
		drain := map[string]time.Duration{"api": app.ShutdownGrace, "verifier-worker": 4 * time.Minute, "webhook-worker": 10 * time.Second}
		for where, tpl := range m.podTemplates() {
			if strings.HasPrefix(where, "Job/") {
				continue
			}
			for _, c := range tpl.Spec.Containers {
				b := mailvetBinary(t, c)
				least, ok := drain[b]
				if !ok {
					continue
				}
				var pause time.Duration
				if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
					pause = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
				}
				if b == "api" && pause < 3*time.Second {
					// Endpoint removal reaches the proxies a few seconds after the pod is marked
					// terminating; without the pause, requests routed then are refused.
					t.Errorf("%s/%s: a preStop sleep of at least 3 s is required, have %v", where, c.Name, pause)
				}
				grace := 30 * time.Second // Kubernetes' default
				if s := tpl.Spec.TerminationGracePeriodSeconds; s != nil {
					grace = time.Duration(*s) * time.Second
				}
				if grace < pause+least {
					t.Errorf("%s/%s: terminationGracePeriodSeconds %v, want at least %v (preStop %v + drain %v)", where, c.Name, grace, pause+least, pause, least)
				}
			}
		}
	})

	t.Run("services", func(t *testing.T) {
		for _, s := range m.services {
			matched := 0
			for where, tpl := range m.podTemplates() {
				if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(tpl.Labels)) {
					continue
				}
				matched++
				for _, p := range s.Spec.Ports {
					if !hasPort(tpl.Spec, p.TargetPort) {
						t.Errorf("Service %s port %s: target %s is no container port of %s", s.Name, p.Name, p.TargetPort.String(), where)
					}
				}
			}
			if matched != 1 {
				t.Errorf("Service %s selects %d workloads, want 1", s.Name, matched)
			}
		}
	})

	t.Run("disruption budgets", func(t *testing.T) {
		covered := map[string]bool{}
		for _, p := range m.pdbs {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err != nil || sel.Empty() {
				t.Errorf("PodDisruptionBudget %s: selector %v", p.Name, err)
				continue
			}
			matched := 0
			for where, tpl := range m.podTemplates() {
				if strings.HasPrefix(where, "Job/") {
					continue
				}
				if sel.Matches(labels.Set(tpl.Labels)) {
					matched++
					covered[where] = true
				}
			}
			if matched != 1 {
				t.Errorf("PodDisruptionBudget %s matches %d workloads, want 1", p.Name, matched)
			}
			if (p.Spec.MinAvailable == nil) == (p.Spec.MaxUnavailable == nil) {
				t.Errorf("PodDisruptionBudget %s: set one of minAvailable and maxUnavailable", p.Name)
			}
		}
		for where := range m.podTemplates() {
			if !strings.HasPrefix(where, "Job/") && !covered[where] {
				t.Errorf("%s has no PodDisruptionBudget", where)
			}
		}
	})

	t.Run("selectors", func(t *testing.T) {
		for n, d := range m.deployments {
			sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
			if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("Deployment %s: the selector does not select its own pods (%v)", n, err)
			}
		}
		for n, s := range m.statefulSets {
			sel, err := metav1.LabelSelectorAsSelector(s.Spec.Selector)
			if err != nil || !sel.Matches(labels.Set(s.Spec.Template.Labels)) {
				t.Errorf("StatefulSet %s: the selector does not select its own pods (%v)", n, err)
			}
		}
	})

	t.Run("autoscaling", func(t *testing.T) { checkAutoscaling(t, m) })
	t.Run("nats", func(t *testing.T) { checkNATSStatefulSet(t, m) })
}

// checkMailvetContainer checks a long-running Mailvet container: probes on the ops listener,
// ports, and the prober's identity.
func checkMailvetContainer(t *testing.T, w, binary string, c corev1.Container, env map[string]string) {
	t.Helper()
	httpPort, metricsPort := defaultPorts(t, binary)
	if addr, ok := env["MAILVET_METRICS_ADDR"]; ok {
		metricsPort = portOf(t, addr)
	}
	if addr, ok := env["MAILVET_HTTP_ADDR"]; ok {
		httpPort = portOf(t, addr)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["metrics"] != int32(metricsPort) {
		t.Errorf("%s: container port metrics is %d, the binary's ops listener %d", w, ports["metrics"], metricsPort)
	}
	if binary == "api" && ports["http"] != int32(httpPort) {
		t.Errorf("%s: container port http is %d, the API listens on %d", w, ports["http"], httpPort)
	}
	probe := func(kind string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: %s probe missing", w, kind)
			return
		}
		port := p.HTTPGet.Port
		if port.Type == intstr.String {
			port = intstr.FromInt32(ports[port.StrVal])
		}
		if p.HTTPGet.Path != path || port.IntValue() != metricsPort {
			t.Errorf("%s: %s probe is %s on %s, want %s on the ops listener (%d)", w, kind, p.HTTPGet.Path, p.HTTPGet.Port.String(), path, metricsPort)
		}
	}
	probe("liveness", c.LivenessProbe, "/healthz")
	probe("readiness", c.ReadinessProbe, "/readyz")
	if c.StartupProbe != nil {
		probe("startup", c.StartupProbe, "/healthz")
	}
	if ro := c.SecurityContext.ReadOnlyRootFilesystem; binary == "api" && ro != nil && *ro &&
		!slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/tmp" && !m.ReadOnly }) {
		// List uploads are received into a temporary file before they are stored (docs/lists.md).
		t.Errorf("%s: a read-only root file system needs a writable volume at /tmp for list uploads", w)
	}
	if binary == "verifier-worker" {
		helo := env["MAILVET_SMTP_HELO"]
		if !strings.Contains(helo, ".") {
			t.Errorf("%s: MAILVET_SMTP_HELO must be set to a host name (the default is the pod's name), got %q", w, helo)
		}
		if !strings.Contains(env["MAILVET_SMTP_MAIL_FROM"], "@") {
			t.Errorf("%s: MAILVET_SMTP_MAIL_FROM must be set to an address", w)
		}
	}
}

func hasPort(spec corev1.PodSpec, target intstr.IntOrString) bool {
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			if (target.Type == intstr.String && p.Name == target.StrVal) || (target.Type == intstr.Int && p.ContainerPort == target.IntVal) {
				return true
			}
		}
	}
	return false
}

// natsStatefulSet returns the NATS StatefulSet and its server container.
func natsStatefulSet(t *testing.T, m *manifests) (*appsv1.StatefulSet, corev1.Container) {
	t.Helper()
	s, ok := m.statefulSets["nats"]
	if !ok {
		t.Fatal("no StatefulSet nats")
	}
	for _, c := range s.Spec.Template.Spec.Containers {
		if c.Name == "nats" {
			return s, c
		}
	}
	t.Fatal("StatefulSet nats has no container nats")
	return nil, corev1.Container{}
}

func natsReplicas(t *testing.T, m *manifests) int {
	t.Helper()
	s, _ := natsStatefulSet(t, m)
	if s.Spec.Replicas == nil {
		t.Fatal("StatefulSet nats: replicas must be set")
	}
	return int(*s.Spec.Replicas)
}

func containerPort(t *testing.T, c corev1.Container, name string) int {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return int(p.ContainerPort)
		}
	}
	t.Fatalf("container %s has no port %s", c.Name, name)
	return 0
}

// checkNATSStatefulSet checks the cluster: three nodes, a configuration nats-server itself
// accepts, routes to every pod, and Mailvet's NATS_URL naming every pod.
func checkNATSStatefulSet(t *testing.T, m *manifests) {
	s, c := natsStatefulSet(t, m)
	n := natsReplicas(t, m)
	if n != 3 {
		t.Errorf("the NATS cluster has %d nodes, want 3", n)
	}
	if s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Error("NATS pods must start in parallel to form the cluster")
	}
	headless := s.Spec.ServiceName
	var svc *corev1.Service
	for _, x := range m.services {
		if x.Name == headless {
			svc = x
		}
	}
	if svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Fatalf("StatefulSet nats: serviceName %q must be a headless Service publishing not-ready pods", headless)
	}
	cm, ok := m.configMaps["nats-config"]
	if !ok {
		t.Fatal("no ConfigMap nats-config")
	}
	mounted := false
	for _, v := range s.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
			mounted = true
		}
	}
	if !mounted || !slices.Contains(c.Args, "/etc/nats/nats.conf") {
		t.Error("StatefulSet nats must mount nats-config and run with --config /etc/nats/nats.conf")
	}
	conf := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(conf, []byte(cm.Data["nats.conf"]), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server rejects nats.conf: %v", err)
	}
	if !opts.JetStream || opts.Cluster.Name == "" {
		t.Error("nats.conf: JetStream and a named cluster are required")
	}
	if opts.Cluster.Port != containerPort(t, c, "cluster") || opts.Port != containerPort(t, c, "client") || opts.HTTPPort != containerPort(t, c, "monitor") {
		t.Errorf("nats.conf ports (client %d, cluster %d, http %d) differ from the container's", opts.Port, opts.Cluster.Port, opts.HTTPPort)
	}
	var routes []string
	for _, r := range opts.Routes {
		routes = append(routes, r.Host)
	}
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("%s-%d.%s:%d", s.Name, i, headless, opts.Cluster.Port))
	}
	if !slices.Equal(slices.Sorted(slices.Values(routes)), want) {
		t.Errorf("nats.conf routes %v, want every pod: %v", routes, want)
	}
	if !slices.Contains(c.Args, "$(POD_NAME)") {
		t.Error("each NATS node must be named after its pod (--name $(POD_NAME)): KEDA finds consumer leaders by server name")
	}
	// Mailvet's NATS_URL names every node, on the client port.
	natsURL := m.configMaps["mailvet-config"].Data["NATS_URL"]
	var hosts []string
	for _, u := range strings.Split(natsURL, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil || p.Scheme != "nats" {
			t.Fatalf("NATS_URL %q: %v", natsURL, err)
		}
		hosts = append(hosts, p.Host)
	}
	var wantHosts []string
	for i := range n {
		wantHosts = append(wantHosts, fmt.Sprintf("%s-%d.%s:%d", s.Name, i, headless, opts.Port))
	}
	if !slices.Equal(slices.Sorted(slices.Values(hosts)), wantHosts) {
		t.Errorf("NATS_URL names %v, want %v", hosts, wantHosts)
	}
	for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || !strings.HasPrefix(p.HTTPGet.Path, "/healthz") || p.HTTPGet.Port.StrVal != "monitor" {
			t.Errorf("NATS probes use /healthz on the monitor port: %+v", p)
		}
	}
}

// checkAutoscaling checks the HorizontalPodAutoscalers and KEDA ScaledObjects: each targets an
// existing Deployment that sets no replica count and is scaled by one of them only, and every
// durable consumer of internal/queue is watched by a nats-jetstream trigger on the Deployment
// that runs it.
func checkAutoscaling(t *testing.T, m *manifests) {
	scaledBy := map[string]string{}
	target := func(kind, name, apiVersion, targetKind, targetName string) {
		if targetKind != "Deployment" || apiVersion != "apps/v1" {
			t.Errorf("%s %s: target %s %s", kind, name, apiVersion, targetKind)
		}
		d, ok := m.deployments[targetName]
		if !ok {
			t.Errorf("%s %s: no Deployment %s", kind, name, targetName)
			return
		}
		if prev, dup := scaledBy[targetName]; dup {
			t.Errorf("Deployment %s is scaled by both %s and %s %s", targetName, prev, kind, name)
		}
		scaledBy[targetName] = kind + " " + name
		if d.Spec.Replicas != nil {
			t.Errorf("Deployment %s sets replicas although %s %s owns the count", targetName, kind, name)
		}
	}
	for _, h := range m.hpas {
		target("HorizontalPodAutoscaler", h.Name, h.Spec.ScaleTargetRef.APIVersion, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 {
			t.Errorf("HorizontalPodAutoscaler %s: minReplicas ≥ 2, so the PodDisruptionBudget lets a node drain", h.Name)
		}
	}

	// The Deployment whose binary runs each consumer (cmd/verifier-worker runs batch items, jobs
	// and lists; cmd/webhook-worker runs deliveries). A consumer added to internal/queue fails
	// here until it is given a trigger and an entry.
	runsConsumer := map[string]string{
		"verifiers":      "verifier-worker",
		"job-runners":    "verifier-worker",
		"list-runners":   "verifier-worker",
		"webhook-worker": "webhook-worker",
	}
	s, c := natsStatefulSet(t, m)
	wantEndpoint := fmt.Sprintf("%s.%s.svc.cluster.local:%d", s.Spec.ServiceName, m.kust.Namespace, containerPort(t, c, "monitor"))
	watched := map[consumer]string{}
	for _, so := range m.scaled {
		ref := so.Spec.ScaleTargetRef
		target("ScaledObject", so.Name, ref.APIVersion, ref.Kind, ref.Name)
		d := m.deployments[ref.Name]
		binary := ""
		if d != nil {
			binary = mailvetBinary(t, d.Spec.Template.Spec.Containers[0])
		}
		if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 2 || so.Spec.MaxReplicaCount == nil || *so.Spec.MaxReplicaCount <= *so.Spec.MinReplicaCount {
			t.Errorf("ScaledObject %s: minReplicaCount ≥ 2 (synchronous work leaves no backlog; the PodDisruptionBudget needs two) and a larger maxReplicaCount", so.Name)
		}
		if len(so.Spec.Triggers) == 0 {
			t.Errorf("ScaledObject %s has no triggers", so.Name)
		}
		for _, tr := range so.Spec.Triggers {
			if tr.Type != "nats-jetstream" {
				t.Errorf("ScaledObject %s: trigger type %q", so.Name, tr.Type)
				continue
			}
			for k := range tr.Metadata {
				if _, ok := natsJetStreamMetadata[k]; !ok {
					t.Errorf("ScaledObject %s: %q is no metadata key of the nats-jetstream scaler", so.Name, k)
				}
			}
			for k, required := range natsJetStreamMetadata {
				if required && tr.Metadata[k] == "" {
					t.Errorf("ScaledObject %s: nats-jetstream needs %s", so.Name, k)
				}
			}
			for _, k := range []string{"lagThreshold", "activationLagThreshold"} {
				if v, ok := tr.Metadata[k]; ok {
					if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 || (k == "lagThreshold" && n == 0) {
						t.Errorf("ScaledObject %s: %s %q", so.Name, k, v)
					}
				}
			}
			if tr.Metadata["natsServerMonitoringEndpoint"] != wantEndpoint {
				t.Errorf("ScaledObject %s: natsServerMonitoringEndpoint %q, want %q (the headless Service, reachable from KEDA's namespace)", so.Name, tr.Metadata["natsServerMonitoringEndpoint"], wantEndpoint)
			}
			if tr.Metadata["account"] != "$G" {
				t.Errorf("ScaledObject %s: account %q; Mailvet uses NATS's global account $G", so.Name, tr.Metadata["account"])
			}
			cons := consumer{stream: tr.Metadata["stream"], name: tr.Metadata["consumer"]}
			if prev, dup := watched[cons]; dup {
				t.Errorf("consumer %v is watched twice (%s, %s)", cons, prev, so.Name)
			}
			watched[cons] = so.Name
			if want := runsConsumer[cons.name]; want != binary {
				t.Errorf("ScaledObject %s watches %v, which %q runs, but scales %q", so.Name, cons, want, binary)
			}
		}
	}
	for _, cons := range queueConsumers(t) {
		if _, ok := runsConsumer[cons.name]; !ok {
			t.Errorf("internal/queue has a new consumer %v: add a nats-jetstream trigger on the Deployment that runs it, and an entry to runsConsumer", cons)
			continue
		}
		if _, ok := watched[cons]; !ok {
			t.Errorf("consumer %v is watched by no ScaledObject", cons)
		}
		delete(watched, cons)
	}
	for cons, so := range watched {
		t.Errorf("ScaledObject %s watches %v, which internal/queue does not define", so, cons)
	}
	for _, want := range []string{"mailvet-verifier-worker", "mailvet-webhook-worker"} {
		if !strings.HasPrefix(scaledBy[want], "ScaledObject") {
			t.Errorf("Deployment %s must be scaled by a KEDA ScaledObject", want)
		}
	}
}
