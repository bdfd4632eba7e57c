package api

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/plan"
)

// BenchmarkListUpload1M is the upload target of bulk lists (BENCHMARKS.md, "Bulk lists"): a
// 1,000,000-row CSV (three columns, 1,000,000 unique addresses over 1,000 domains), generated
// while it is sent so that the client holds none of it, POSTed over real HTTP to the API, until
// its 202. It reports the time and the process's peak resident memory (VmHWM), which bounds the
// API's: the benchmark process holds nothing else of size.
func BenchmarkListUpload1M(b *testing.B) {
	const rows = 1_000_000
	v := setupVerify(b, verifyOpts{noWorkers: true})
	_, key := v.customer(plan.Scale)
	srv := httptest.NewServer(v.srv.Handler())
	defer srv.Close()
	for b.Loop() {
		pr, pw := io.Pipe()
		go func() {
			w := bufio.NewWriterSize(pw, 64<<10)
			fmt.Fprintln(w, "customer_id,email,name")
			for i := range rows {
				fmt.Fprintf(w, "%d,user%d@domain%d.example,Customer %d\n", i, i, i%1000, i)
			}
			_ = w.Flush()
			_ = pw.Close()
		}()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/email/lists", pr)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "text/csv")
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != http.StatusAccepted || !strings.Contains(string(body), `"rows":1000000`) {
			b.Fatalf("%d %s", resp.StatusCode, body)
		}
		b.ReportMetric(took.Seconds(), "upload-s")
		b.ReportMetric(peakResidentMB(), "peak-rss-MB")
	}
}

// peakResidentMB is the process's peak resident set size so far, in MB (Linux's VmHWM).
func peakResidentMB() float64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
