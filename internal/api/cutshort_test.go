package api

import (
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailvet/mailvet/internal/app"
	"github.com/mailvet/mailvet/internal/plan"
	"github.com/mailvet/mailvet/internal/testkit/logtest"
	"github.com/mailvet/mailvet/internal/testkit/pgtest"
	"github.com/mailvet/mailvet/internal/testkit/wait"
)

// A list download whose client goes away mid-body is logged without the client's address: the
// failed write's error names both ends of the connection, and logs carry a client's IP address
// only where docs/personal-data.md says so. The client stops reading until the server's write
// waits on the full connection, then resets it: that write is what fails.
func TestListDownloadCutShortLogsNoClientAddress(t *testing.T) {
	t.Parallel()
	logs := &logtest.Buffer{}
	b := setup(t, nil, func(d *Deps) { d.Log = app.NewLogger(logs, "test") })
	a, _ := b.account(plan.Free, "")
	key := b.standardKey(a.ID).Raw
	id := uuid.New()
	const rows = 40000 // about 20 MB of CSV: far more than the connection's buffers hold
	pgtest.Exec(t, b.pool, `INSERT INTO lists (id, account_id, name, format, columns, email_column, state, rows, unique_addresses, verified, created_at, finished_at)
		VALUES ($1, $2, 'cut', 'csv', '{email,note}', 0, 'completed', $3, $3, $3, now(), now())`, id, a.ID, rows)
	pgtest.Exec(t, b.pool, `INSERT INTO list_rows (list_id, row_no, email, cols)
		SELECT $1, i, 'a' || i || '@acme.test', ARRAY['a' || i || '@acme.test', repeat('x', 400)] FROM generate_series(1, $2::int) i`, id, rows)
	pgtest.Exec(t, b.pool, `INSERT INTO list_addresses (list_id, email, idx, chunk, status, reason, result)
		SELECT $1, 'a' || i || '@acme.test', i - 1, 0, 'deliverable', 'accepted_email', jsonb_build_object('email', 'a' || i || '@acme.test')
		FROM generate_series(1, $2::int) i`, id, rows)
	srv := httptest.NewServer(b.srv.Handler())
	t.Cleanup(srv.Close)

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client := conn.LocalAddr().String()
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	fmt.Fprintf(conn, "GET /v1/email/lists/%s/results HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", id, key)
	head := make([]byte, 12)
	if _, err := io.ReadFull(conn, head); err != nil || string(head) != "HTTP/1.1 200" {
		t.Fatalf("download answered %q, %v", head, err)
	}
	time.Sleep(time.Second) // the server fills the connection and waits in a write
	_ = conn.(*net.TCPConn).SetLinger(0)
	conn.Close()

	var line string
	wait.For(t, 10*time.Second, "the cut download's log line", func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `"list results"`) {
				line = l
				return true
			}
		}
		return false
	})
	if strings.Contains(line, client) || !strings.Contains(line, "(the client)") {
		t.Errorf("the log line names the client %s, or no failed write to it:\n%s", client, line)
	}
}
