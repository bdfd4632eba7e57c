package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mailvet/mailvet/internal/testkit/gobuild"
)

// NATSServerBinary finds the nats-server executable: on PATH (the Makefile puts its pinned
// install, .tools/bin, first) or in the module's .tools/bin. Without it the test is skipped, with
// the command that installs it, unless CI is set: in CI a missing tool is a failure, not a skip.
func NATSServerBinary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	if root, err := gobuild.ModuleRoot(); err == nil {
		p := filepath.Join(root, ".tools", "bin", "nats-server")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	msg := "nats-server is not installed: run `make tools` (it installs the pinned nats-server into .tools/bin)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// NATSNode is one nats-server of a NATSCluster.
type NATSNode struct {
	*Proc
	ServerName string // its server_name, as JetStream names stream leaders
	ClientURL  string // nats://127.0.0.1:port
	MonitorURL string // http://127.0.0.1:port (/healthz, /jsz)
}

// NATSCluster is a JetStream cluster of nats-server processes on loopback, each with its own
// store directory, which survives a kill so that a restarted node rejoins with its data.
type NATSCluster struct {
	Nodes []*NATSNode
}

// StartNATSCluster starts n nats-server processes (bin) forming one JetStream cluster, and waits
// until each answers its /healthz.
func StartNATSCluster(ctx context.Context, t testing.TB, s *Supervisor, bin string, n int) *NATSCluster {
	t.Helper()
	ports := FreePorts(t, 3*n) // client, cluster, monitoring per node
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3*i+1]))
	}
	c := &NATSCluster{}
	for i := range n {
		name := fmt.Sprintf("nats-%d", i+1)
		store := filepath.Join(s.Dir(), name+"-store")
		conf := filepath.Join(s.Dir(), name+".conf")
		// The same layout as deploy/nats-cluster.conf, on loopback ports, with smaller stores.
		text := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
jetstream {
  store_dir: %q
  max_memory_store: 256M
  max_file_store: 1G
}
cluster {
  name: mailvet-test
  listen: 127.0.0.1:%d
  routes: [
    %s
  ]
}
`, name, ports[3*i], ports[3*i+2], store, ports[3*i+1], strings.Join(routes, "\n    "))
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		node := &NATSNode{
			ServerName: name,
			ClientURL:  fmt.Sprintf("nats://127.0.0.1:%d", ports[3*i]),
			MonitorURL: fmt.Sprintf("http://127.0.0.1:%d", ports[3*i+2]),
		}
		node.Proc = s.Add(&Proc{Name: name, Bin: bin, Args: []string{"-c", conf},
			Env: []string{"PATH=" + os.Getenv("PATH")}, ReadyURL: node.MonitorURL + "/healthz"})
		c.Nodes = append(c.Nodes, node)
	}
	for _, node := range c.Nodes {
		if err := node.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, node := range c.Nodes {
		if err := node.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.waitMetaLeader(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitMetaLeader waits until JetStream answers an account-info request, which needs the
// cluster's meta leader: a process started before then spends its first attempts to create the
// streams waiting out their timeouts (queue.EnsureStreams), seconds the test need not wait.
func (c *NATSCluster) waitMetaLeader(ctx context.Context) error {
	nc, err := nats.Connect(c.URLs(), nats.Name("cluster-test-probe"), nats.Timeout(2*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	for {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("JetStream has no meta leader: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// URLs is every node's client URL, comma-separated, as NATS_URL takes them.
func (c *NATSCluster) URLs() string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.ClientURL
	}
	return strings.Join(urls, ",")
}

// Node is the node whose server name is name, or nil.
func (c *NATSCluster) Node(name string) *NATSNode {
	for _, n := range c.Nodes {
		if n.ServerName == name {
			return n
		}
	}
	return nil
}

// StreamLeaders asks JetStream, through any running node, which server leads each of streams.
func (c *NATSCluster) StreamLeaders(ctx context.Context, streams ...string) (map[string]string, error) {
	var urls []string
	for _, n := range c.Nodes {
		if n.Running() {
			urls = append(urls, n.ClientURL)
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Name("cluster-test-probe"), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	leaders := map[string]string{}
	for _, name := range streams {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := js.Stream(cctx, name)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", name, err)
		}
		info := st.CachedInfo()
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return nil, fmt.Errorf("stream %s has no leader", name)
		}
		leaders[name] = info.Cluster.Leader
	}
	return leaders, nil
}

// StreamsLeader is the node that leads the most of streams (ties go to the earlier stream in
// the list), with every stream's leader for the report.
func (c *NATSCluster) StreamsLeader(ctx context.Context, streams ...string) (*NATSNode, map[string]string, error) {
	leaders, err := c.StreamLeaders(ctx, streams...)
	if err != nil {
		return nil, nil, err
	}
	count := map[string]int{}
	best := ""
	for _, s := range streams {
		count[leaders[s]]++
	}
	for _, s := range streams {
		if l := leaders[s]; best == "" || count[l] > count[best] {
			best = l
		}
	}
	node := c.Node(best)
	if node == nil {
		return nil, leaders, fmt.Errorf("leader %q is not a node of this cluster", best)
	}
	return node, leaders, nil
}
