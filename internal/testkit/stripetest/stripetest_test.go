package stripetest

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
)

func TestStripeMockAnswers(t *testing.T) {
	mustGet(t, URL(t)+"/v1/customers/cus_123")
}

// mustGet fails t unless GET url, with the test key, answers 200.
func mustGet(t *testing.T, url string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+SecretKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
}

// occupy holds port on every interface for the rest of the test, as another program (a second
// stripe-mock, a developer's own) would. A port that is already taken is just as occupied.
func occupy(t *testing.T, port string) {
	t.Helper()
	ln, err := net.Listen("tcp", ":"+port)
	if errors.Is(err, syscall.EADDRINUSE) {
		t.Logf("port %s is already in use by another process", port)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
}

// stripe-mock's default ports (12111 HTTP, 12112 HTTPS) being taken must not matter: the helper
// binds both of its listeners to ports the kernel picks. Not parallel, because it holds the
// default ports for its whole run.
func TestStartsWhenDefaultPortsAreTaken(t *testing.T) {
	occupy(t, "12111")
	occupy(t, "12112")
	base := URL(t)
	if !strings.HasPrefix(base, "http://127.0.0.1:") || strings.HasSuffix(base, ":12111") {
		t.Fatalf("base URL %q is not on a free loopback port", base)
	}
	mustGet(t, base+"/v1/customers")
}
