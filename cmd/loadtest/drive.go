package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"
)

// result is one phase's measurement.
type result struct {
	name     string
	requests int
	ok       int             // 200 answers
	statuses map[int]int     // every other status, and -1 for transport errors
	elapsed  time.Duration   // from the first request to the last answer
	lats     []time.Duration // of every answer, sorted
	cpu      cpuTimes        // spent during the measured loops
}

func (r result) rate() float64 { return float64(r.requests) / r.elapsed.Seconds() }

// percentile is the nearest-rank p-quantile (0 < p ≤ 1).
func (r result) percentile(p float64) time.Duration {
	if len(r.lats) == 0 {
		return 0
	}
	i := int(float64(len(r.lats))*p+0.999999) - 1
	return r.lats[min(max(i, 0), len(r.lats)-1)]
}

// call is one request of a phase's closed loop; i numbers it within its client.
type call func(ctx context.Context, i int) (status int, err error)

// drive runs clients closed loops of call for warm-up (not measured) and then for d, and
// measures the second part, calling measuring just before it; it also returns the warm-up's 200
// answers, which were metered too. Every loop is bounded by the phase's time.
func drive(ctx context.Context, name string, clients int, warmup, d time.Duration, c call, measuring func()) (result, int) {
	run := func(d time.Duration) result {
		res := result{name: name, statuses: map[int]int{}}
		var (
			mu sync.Mutex
			wg sync.WaitGroup
		)
		start := time.Now()
		stop := start.Add(d)
		for w := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var lats []time.Duration
				ok, statuses := 0, map[int]int{}
				for i := w * 1_000_000; time.Now().Before(stop) && ctx.Err() == nil; i++ {
					t := time.Now()
					status, err := c(ctx, i)
					lats = append(lats, time.Since(t))
					switch {
					case err != nil:
						statuses[-1]++
					case status == http.StatusOK:
						ok++
					default:
						statuses[status]++
					}
				}
				mu.Lock()
				res.lats = append(res.lats, lats...)
				res.ok += ok
				for k, v := range statuses {
					res.statuses[k] += v
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		res.elapsed = time.Since(start)
		res.requests = len(res.lats)
		slices.Sort(res.lats)
		return res
	}
	warm := 0
	if warmup > 0 {
		warm = run(warmup).ok
	}
	measuring()
	before := readCPU()
	r := run(d)
	r.cpu = readCPU().sub(before)
	return r, warm
}

// poster posts JSON bodies to base+path with a key, on a client with an idle connection per
// load client.
type poster struct {
	client *http.Client
	url    string
	key    string
}

func newPoster(base, path, key string, clients int) *poster {
	tr := &http.Transport{MaxIdleConns: clients * 2, MaxIdleConnsPerHost: clients * 2, IdleConnTimeout: time.Minute}
	return &poster{client: &http.Client{Transport: tr, Timeout: 30 * time.Second}, url: base + path, key: key}
}

func (p *poster) post(ctx context.Context, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if p.key != "" {
		req.Header.Set("Authorization", "Bearer "+p.key)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

func (p *poster) close() { p.client.CloseIdleConnections() }

// verifyCall posts {"email": address(i)} to the verify route.
func verifyCall(p *poster, address func(i int) string) call {
	return func(ctx context.Context, i int) (int, error) {
		status, _, err := p.post(ctx, fmt.Appendf(nil, `{"email":%q}`, address(i)))
		return status, err
	}
}

// localAddress is the i-th address the API decides itself: alternately one that fails the
// syntax check (not billable) and one of a disposable domain (billable).
func localAddress(i int) string {
	if i%2 == 0 {
		return fmt.Sprintf("not-an-address-%d", i)
	}
	return fmt.Sprintf("load%d@mailinator.com", i)
}

// statusSummary lists the non-200 answers, for the report.
func statusSummary(m map[int]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	var b bytes.Buffer
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		if k == -1 {
			fmt.Fprintf(&b, "transport error ×%d", m[k])
		} else {
			fmt.Fprintf(&b, "%d ×%d", k, m[k])
		}
	}
	return b.String()
}
