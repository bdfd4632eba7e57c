package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// natsExporterMetrics are the series of prometheus-nats-exporter's JetStream collector
// (`-jsz=all`, the exporter container of deploy/kubernetes/nats.yaml) that the dashboard and the
// rules use, with their labels as that collector declares them (collector/jsz.go of
// nats-io/prometheus-nats-exporter). `up` is Prometheus' own.
var natsExporterMetrics = func() map[string]metric {
	server := []string{"server_id", "server_name", "cluster", "domain", "meta_leader", "is_meta_leader"}
	stream := append(append([]string{}, server...), "account", "account_id", "stream_name", "stream_leader", "is_stream_leader", "stream_raft_group")
	cons := append(append([]string{}, stream...), "consumer_name", "consumer_leader", "is_consumer_leader", "consumer_desc")
	set := func(names []string) metric {
		m := metric{labels: map[string]bool{"job": true, "instance": true}}
		for _, n := range names {
			m.labels[n] = true
		}
		return m
	}
	return map[string]metric{
		"up":                                  set(nil),
		"jetstream_server_jetstream_disabled": set(server),
		"jetstream_stream_total_messages":     set(stream),
		"jetstream_consumer_num_pending":      set(cons),
		"jetstream_consumer_num_ack_pending":  set(cons),
		"jetstream_consumer_num_redelivered":  set(cons),
	}
}()

// allMetrics is what an expression may use: the code's metrics (with the job and instance labels
// Prometheus adds to every scraped series) and the NATS exporter's.
func allMetrics(t *testing.T) map[string]metric {
	t.Helper()
	out := map[string]metric{}
	for name, m := range codeMetrics(t) {
		out[name] = metric{labels: with(with(m.labels, "job"), "instance")}
	}
	for name, m := range natsExporterMetrics {
		if _, dup := out[name]; dup {
			t.Fatalf("metric %s is both Mailvet's and the NATS exporter's", name)
		}
		out[name] = m
	}
	return out
}

// promqlFuncs are the PromQL functions and aggregation operators the files may use.
var promqlFuncs = map[string]bool{
	"sum": true, "max": true, "min": true, "avg": true, "count": true, "topk": true, "bottomk": true,
	"rate": true, "irate": true, "increase": true, "delta": true, "deriv": true,
	"histogram_quantile": true, "absent": true, "absent_over_time": true, "max_over_time": true,
	"min_over_time": true, "avg_over_time": true, "clamp_min": true, "clamp_max": true, "vector": true,
}

// promqlKeywords are identifiers that are neither metrics nor functions.
var promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true}

// promqlGrouping introduce a list of label names in parentheses.
var promqlGrouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

var promqlIdent = regexp.MustCompile(`^[A-Za-z_:][A-Za-z0-9_:]*$`)

var promqlToken = regexp.MustCompile(`\s+|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|\[[^\]]*\]|[A-Za-z_:][A-Za-z0-9_:]*|[0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?|=~|!~|!=|==|>=|<=|[-+*/%^(){},=<>]`)

// checkPromQL checks one expression against the known metrics: every metric name exists, every
// label in a matcher belongs to its metric, every label of by/without/on/ignoring belongs to one
// of the expression's metrics, every function is known, and parentheses and braces balance. It is
// a checker for the subset of PromQL these files use, not a full parser: anything it does not
// recognise fails.
func checkPromQL(expr string, metrics map[string]metric) error {
	_, err := readPromQL(expr, metrics)
	return err
}

// promqlInfo is what readPromQL found in an expression: the metrics it reads and the labels it
// groups by.
type promqlInfo struct {
	metrics, grouping []string
}

// readPromQL is checkPromQL, also returning what the expression uses.
func readPromQL(expr string, metrics map[string]metric) (promqlInfo, error) {
	var toks []string
	rest := expr
	for rest != "" {
		loc := promqlToken.FindStringIndex(rest)
		if loc == nil || loc[0] != 0 {
			return promqlInfo{}, fmt.Errorf("cannot read %q", rest)
		}
		if tok := strings.TrimSpace(rest[:loc[1]]); tok != "" {
			toks = append(toks, tok)
		}
		rest = rest[loc[1]:]
	}
	isIdent := promqlIdent.MatchString
	var used []string
	var groupLabels []string
	depth, braces := 0, 0
	for i := 0; i < len(toks); i++ {
		tok := toks[i]
		next := ""
		if i+1 < len(toks) {
			next = toks[i+1]
		}
		switch {
		case tok == "(":
			depth++
		case tok == ")":
			depth--
			if depth < 0 {
				return promqlInfo{}, fmt.Errorf("unbalanced )")
			}
		case tok == "{" || tok == "}":
			return promqlInfo{}, fmt.Errorf("a label matcher without a metric name")
		case strings.HasPrefix(tok, "["):
			if _, err := time.ParseDuration(strings.Trim(tok, "[]")); err != nil && !strings.HasPrefix(tok, "[$__") {
				return promqlInfo{}, fmt.Errorf("range %s is not a duration", tok)
			}
		case promqlGrouping[tok]:
			if next != "(" {
				return promqlInfo{}, fmt.Errorf("%s without a label list", tok)
			}
			i += 2
			for ; i < len(toks) && toks[i] != ")"; i++ {
				if toks[i] == "," {
					continue
				}
				if !isIdent(toks[i]) {
					return promqlInfo{}, fmt.Errorf("%s: %q is not a label name", tok, toks[i])
				}
				groupLabels = append(groupLabels, toks[i])
			}
		case promqlKeywords[tok]:
		case isIdent(tok) && (next == "(" || promqlGrouping[next]):
			if !promqlFuncs[tok] {
				return promqlInfo{}, fmt.Errorf("unknown function %s", tok)
			}
		case isIdent(tok):
			m, ok := metrics[tok]
			if !ok {
				return promqlInfo{}, fmt.Errorf("unknown metric %s", tok)
			}
			used = append(used, tok)
			if next != "{" {
				continue
			}
			i += 2
			braces++
			for ; i < len(toks) && toks[i] != "}"; i++ {
				if toks[i] == "," {
					continue
				}
				if i+2 >= len(toks) {
					return promqlInfo{}, fmt.Errorf("%s: unterminated matcher", tok)
				}
				label, op, val := toks[i], toks[i+1], toks[i+2]
				if !m.labels[label] {
					return promqlInfo{}, fmt.Errorf("metric %s has no label %q (it has %v)", tok, label, keys(m.labels))
				}
				if op != "=" && op != "!=" && op != "=~" && op != "!~" {
					return promqlInfo{}, fmt.Errorf("%s: bad matcher operator %q", tok, op)
				}
				if !strings.HasPrefix(val, `"`) {
					return promqlInfo{}, fmt.Errorf("%s: matcher value %s is not a string", tok, val)
				}
				if op == "=~" || op == "!~" {
					s, _ := strconvUnquote(val)
					if _, err := regexp.Compile("^(?:" + s + ")$"); err != nil {
						return promqlInfo{}, fmt.Errorf("%s: bad regular expression %s: %v", tok, val, err)
					}
				}
				i += 2
			}
			if i >= len(toks) {
				return promqlInfo{}, fmt.Errorf("%s: unterminated {", tok)
			}
			braces--
		case strings.HasPrefix(tok, `"`) || strings.HasPrefix(tok, `'`):
			// A string argument, e.g. of label_replace; none of the files need one.
			return promqlInfo{}, fmt.Errorf("unexpected string %s", tok)
		}
	}
	if depth != 0 || braces != 0 {
		return promqlInfo{}, fmt.Errorf("unbalanced parentheses or braces")
	}
	if len(used) == 0 {
		return promqlInfo{}, fmt.Errorf("no metric in %q", expr)
	}
	for _, l := range groupLabels {
		found := false
		for _, name := range used {
			if metrics[name].labels[l] {
				found = true
			}
		}
		if !found {
			return promqlInfo{}, fmt.Errorf("label %q of a grouping is on none of %v", l, used)
		}
	}
	return promqlInfo{metrics: used, grouping: groupLabels}, nil
}

func strconvUnquote(s string) (string, error) {
	var out string
	err := json.Unmarshal([]byte(s), &out)
	return out, err
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestPromQLChecker shows that the checker used below rejects the mistakes it exists for.
func TestPromQLChecker(t *testing.T) {
	t.Parallel()
	metrics := allMetrics(t)
	good := []string{
		`sum by (status) (rate(mailvet_verifier_addresses_total[5m]))`,
		`histogram_quantile(0.99, sum by (le, route) (rate(mailvet_http_request_duration_seconds_bucket{route="/v1/email/verify"}[$__rate_interval]))) > 3`,
		`max by (consumer_name) (jetstream_consumer_num_pending{is_consumer_leader="true", stream_name=~"VERIFY|JOBS"})`,
		`go_goroutines{job=~"mailvet-.*"}`,
	}
	for _, e := range good {
		if err := checkPromQL(e, metrics); err != nil {
			t.Errorf("%s: %v", e, err)
		}
	}
	bad := map[string]string{
		"misspelt metric":       `rate(mailvet_verifier_adresses_total[5m])`,
		"unknown label":         `mailvet_http_requests_total{status="500"}`,
		"grouping label":        `sum by (reason) (rate(mailvet_verifier_addresses_total[5m]))`,
		"unknown function":      `rates(mailvet_verifier_busy_total[5m])`,
		"histogram without le":  `mailvet_http_request_duration_seconds{route="x"}`,
		"unbalanced":            `sum(rate(mailvet_verifier_busy_total[5m])`,
		"bad regexp":            `mailvet_http_requests_total{code=~"5(.."}`,
		"bad range":             `rate(mailvet_verifier_busy_total[5 minutes])`,
		"exporter label":        `jetstream_consumer_num_pending{consumer="verifiers"}`,
		"counter label on hist": `mailvet_webhook_attempt_duration_seconds_bucket{outcome="success"}`,
	}
	for why, e := range bad {
		if err := checkPromQL(e, metrics); err == nil {
			t.Errorf("%s: %s was accepted", why, e)
		}
	}
}

// rulesFile mirrors the Prometheus rule file format (groups of alerting rules) for the fields
// alerts.yaml uses; it is decoded strictly, so an unknown or misspelt field fails.
type rulesFile struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval,omitempty"`
		Rules    []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func TestAlertRules(t *testing.T) {
	t.Parallel()
	var rf rulesFile
	if err := yaml.UnmarshalStrict(readFile(t, "deploy/grafana/alerts.yaml"), &rf); err != nil {
		t.Fatal(err)
	}
	metrics := allMetrics(t)
	names := map[string]bool{}
	severities := map[string]bool{"critical": true, "warning": true, "info": true}
	count := 0
	for _, g := range rf.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: a name and rules are required", g.Name)
		}
		for _, r := range g.Rules {
			count++
			if r.Alert == "" || names[r.Alert] {
				t.Errorf("rule %q: missing or repeated alert name", r.Alert)
			}
			names[r.Alert] = true
			if d, err := time.ParseDuration(r.For); err != nil || d <= 0 {
				t.Errorf("%s: for %q is not a positive duration", r.Alert, r.For)
			}
			if !severities[r.Labels["severity"]] {
				t.Errorf("%s: severity %q", r.Alert, r.Labels["severity"])
			}
			if strings.TrimSpace(r.Annotations["summary"]) == "" || strings.TrimSpace(r.Annotations["description"]) == "" {
				t.Errorf("%s: summary and description annotations are required", r.Alert)
			}
			if err := checkPromQL(r.Expr, metrics); err != nil {
				t.Errorf("%s: %v", r.Alert, err)
			}
			if !regexp.MustCompile(`(==|>|<|>=|<=|!=)\s*[0-9.]+\s*$`).MatchString(strings.TrimSpace(r.Expr)) {
				t.Errorf("%s: the expression should end in a comparison with a threshold", r.Alert)
			}
		}
	}
	// The failures docs/deployment.md tells the operator are alerted on.
	for _, want := range []string{"MailvetTargetDown", "MailvetAPIErrors", "MailvetVerifyUnavailable", "MailvetUsageRowsDropped",
		"MailvetVerifierSaturated", "MailvetQueueBacklog", "MailvetUnknownRatioHigh", "MailvetWebhookDeliveriesFailing", "MailvetJetStreamDisabled"} {
		if !names[want] {
			t.Errorf("alert %s is missing", want)
		}
	}
	t.Logf("%d alerting rules checked", count)
}

// dashboard mirrors the parts of a Grafana dashboard model the test reads; unknown fields are
// allowed here (Grafana's model is large), the checks are on what matters: the queries.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID        string `json:"refId"`
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
}

func TestDashboard(t *testing.T) {
	t.Parallel()
	raw := readFile(t, "deploy/grafana/mailvet-dashboard.json")
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("uid and title are required")
	}
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus" {
			hasDS = true
		}
	}
	if !hasDS {
		t.Error("the dashboard needs a Prometheus datasource variable named datasource")
	}
	metrics := allMetrics(t)
	ids := map[int]bool{}
	legend := regexp.MustCompile(`\{\{\s*([A-Za-z_]+)\s*\}\}`)
	used := map[string]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d repeated", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: grid position %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: needs the datasource variable and at least one query", p.Title)
		}
		for _, tg := range p.Targets {
			info, err := readPromQL(tg.Expr, metrics)
			if err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
				continue
			}
			for _, name := range info.metrics {
				used[name] = true
			}
			// A legend names labels the query keeps: those it groups by, or, without grouping,
			// the labels of its metrics.
			for _, m := range legend.FindAllStringSubmatch(tg.LegendFormat, -1) {
				kept := slices.Contains(info.grouping, m[1])
				if len(info.grouping) == 0 {
					for _, name := range info.metrics {
						kept = kept || metrics[name].labels[m[1]]
					}
				}
				if !kept {
					t.Errorf("panel %q: legend label %q is not kept by %s", p.Title, m[1], tg.Expr)
				}
			}
		}
	}
	// Every Mailvet metric the code registers is on the dashboard (histograms through _bucket
	// or _count), so a new metric is not forgotten.
	for name := range codeMetrics(t) {
		if !strings.HasPrefix(name, "mailvet_") || strings.HasSuffix(name, "_sum") {
			continue
		}
		base := strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count")
		if !used[name] && !used[base+"_bucket"] && !used[base+"_count"] && !used[base] {
			t.Errorf("metric %s is on no panel", name)
		}
	}
}
