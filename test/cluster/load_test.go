package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The paths of the load, in the order of the report.
const (
	pathSync   = "sync"
	pathBatch  = "batch"
	pathStream = "stream"
	pathAsync  = "async"
	pathList   = "list"
)

var paths = []string{pathSync, pathBatch, pathStream, pathAsync, pathList}

// want is the known outcome of an address of the test's mail world.
type want struct {
	status, failedCheck string
	billable            bool
}

// expected is the outcome of an address made by gen.next: its first letter says what it is.
func expected(email string) want {
	switch {
	case strings.HasPrefix(email, "d"):
		return want{"deliverable", "", true}
	case strings.HasPrefix(email, "u"):
		return want{"undeliverable", "smtp", true}
	case strings.HasPrefix(email, "c"):
		return want{"catch_all", "", true}
	case strings.HasPrefix(email, "n"):
		return want{"invalid", "no_mx", true}
	case strings.HasPrefix(email, "x"):
		return want{"invalid", "disposable", true}
	default: // "s…": no @ at all
		return want{"invalid", "syntax", false}
	}
}

// gen makes every address of the run unique, so that each usage row can be traced to the one
// request that sent it.
type gen struct {
	n   atomic.Int64
	max int
}

// next returns a new address; fleetOnly leaves out those the API decides itself (disposable,
// syntax), for the async path, where they would not exercise the fleet.
func (g *gen) next(fleetOnly bool) string {
	n := int(g.n.Add(1))
	if n >= g.max {
		panic("cluster test: more addresses than the mail world has mailboxes; raise profile.maxEmails")
	}
	kinds := 6
	if fleetOnly {
		kinds = 4
	}
	switch n % kinds {
	case 0:
		return "d" + strconv.Itoa(n) + "@" + domainOK
	case 1:
		return "u" + strconv.Itoa(n) + "@" + domainOK
	case 2:
		return "c" + strconv.Itoa(n) + "@" + domainCatch
	case 3:
		return "n" + strconv.Itoa(n) + "@" + domainNoMX
	case 4:
		return "x" + strconv.Itoa(n) + "@mailinator.com"
	default:
		return "s" + strconv.Itoa(n) + ".at." + domainOK
	}
}

func (g *gen) batch(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = g.next(false)
	}
	return out
}

// result is the part of a verify result the test checks.
type result struct {
	Email       string  `json:"email"`
	Status      string  `json:"status"`
	FailedCheck *string `json:"failed_check"`
	Reason      string  `json:"reason"`
}

func (r result) check() string {
	w := expected(r.Email)
	fc := ""
	if r.FailedCheck != nil {
		fc = *r.FailedCheck
	}
	if r.Status != w.status || fc != w.failedCheck {
		return fmt.Sprintf("%s: got %s/%s (reason %s), want %s/%s", r.Email, r.Status, fc, r.Reason, w.status, w.failedCheck)
	}
	return ""
}

// Outcomes of a request.
const (
	answered    = "answered"    // complete: every result (or the 202 of an async job)
	unavailable = "unavailable" // 503 service_unavailable, or a stream's error line: documented (docs/errors.md)
	cut         = "cut"         // the connection broke: the replica was killed
	otherError  = "error"       // anything else: always a failure
)

// request is one request of the load and what came back.
type request struct {
	path    string
	phase   string // "faults" or "rolling"
	replica int
	emails  []string
	outcome string
	detail  string               // for otherError and cut: what happened
	got     map[string]result    // results that reached the client, by email
	dupes   int                  // results that reached the client twice
	wrong   []string             // results that differ from the known outcome
	jobID   string               // async: the accepted job
	atKill  bool                 // in flight at its replica when that replica was killed
	arrived map[string]time.Time // when each result reached the client
	// overbilled counts its emails billed although their results never reached the client
	// (set by verdict).
	overbilled int
}

// load sends the mixed load and records every request.
type load struct {
	s      *system
	g      *gen
	client *http.Client
	phase  atomic.Value // string
	next   atomic.Int64 // round robin over the API replicas

	mu       sync.Mutex
	reqs     []*request
	inflight map[*request]bool
	kills    map[int]time.Time // API replica ⇒ when it was killed (kill -9)
}

func newLoad(s *system, maxEmails int) *load {
	l := &load{s: s, g: &gen{max: maxEmails}, client: &http.Client{
		Timeout:   150 * time.Second, // above the stream's own 120 s limit: the server ends first
		Transport: &http.Transport{MaxIdleConnsPerHost: 64},
	}}
	l.phase.Store("faults")
	l.inflight = map[*request]bool{}
	l.kills = map[int]time.Time{}
	return l
}

func (l *load) record(r *request) {
	l.mu.Lock()
	delete(l.inflight, r)
	l.reqs = append(l.reqs, r)
	l.mu.Unlock()
}

func (l *load) start(r *request) {
	r.replica = l.s.pick(int(l.next.Add(1)))
	r.phase = l.phase.Load().(string)
	l.mu.Lock()
	l.inflight[r] = true
	l.mu.Unlock()
}

// busy reports whether a request of one of paths is in flight at replica.
func (l *load) busy(replica int, paths ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for r := range l.inflight {
		if r.replica == replica && slices.Contains(paths, r.path) {
			return true
		}
	}
	return false
}

// killed marks the requests in flight at replica as caught by its kill, and returns how many.
func (l *load) killed(replica int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.kills[replica] = time.Now()
	n := 0
	for r := range l.inflight {
		if r.replica == replica {
			r.atKill = true
			n++
		}
	}
	return n
}

// killTimes returns when each killed API replica was killed.
func (l *load) killTimes() map[int]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.kills)
}

func (l *load) requests() []*request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*request(nil), l.reqs...)
}

// post sends body to path on the next replica in rotation.
func (l *load) post(ctx context.Context, r *request, route string, body any) (*http.Response, error) {
	l.start(r)
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, l.s.apiURLs[r.replica]+route, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+l.s.key)
	req.Header.Set("Content-Type", "application/json")
	return l.client.Do(req)
}

// classify records a response that is not the success the route answers.
func classify(r *request, resp *http.Response, err error) {
	if err != nil {
		r.outcome, r.detail = cut, err.Error()
		return
	}
	b, _ := io.ReadAll(resp.Body)
	var env struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(b, &env)
	if resp.StatusCode == http.StatusServiceUnavailable && env.Error == "service_unavailable" {
		r.outcome, r.detail = unavailable, env.Message
		return
	}
	r.outcome, r.detail = otherError, fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(b))
}

func (r *request) take(res result) {
	if r.got == nil {
		r.got = map[string]result{}
	}
	if _, dup := r.got[res.Email]; dup {
		r.dupes++
		return
	}
	r.got[res.Email] = res
	if r.arrived == nil {
		r.arrived = map[string]time.Time{}
	}
	r.arrived[res.Email] = time.Now()
	if msg := res.check(); msg != "" {
		r.wrong = append(r.wrong, msg)
	}
}

func (l *load) sync(ctx context.Context) {
	r := &request{path: pathSync, emails: []string{l.g.next(false)}}
	defer l.record(r)
	resp, err := l.post(ctx, r, "/v1/email/verify", map[string]string{"email": r.emails[0]})
	if err != nil || resp.StatusCode != http.StatusOK {
		classify(r, resp, err)
		return
	}
	defer resp.Body.Close()
	var res result
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		r.outcome, r.detail = cut, err.Error()
		return
	}
	r.take(res)
	r.outcome = answered
}

func (l *load) batch(ctx context.Context, size int) {
	r := &request{path: pathBatch, emails: l.g.batch(size)}
	defer l.record(r)
	resp, err := l.post(ctx, r, "/v1/email/verify/batch", map[string][]string{"emails": r.emails})
	if err != nil || resp.StatusCode != http.StatusOK {
		classify(r, resp, err)
		return
	}
	defer resp.Body.Close()
	var out struct {
		Results []result `json:"results"`
		Count   int      `json:"count"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		r.outcome, r.detail = cut, err.Error()
		return
	}
	for i, res := range out.Results {
		if i < len(r.emails) && res.Email != r.emails[i] {
			r.wrong = append(r.wrong, fmt.Sprintf("batch result %d is %s, want %s (input order)", i, res.Email, r.emails[i]))
		}
		r.take(res)
	}
	r.outcome = answered
	if len(out.Results) != len(r.emails) || out.Count != len(r.emails) {
		r.outcome, r.detail = otherError, fmt.Sprintf("200 with %d results (count %d) for %d emails", len(out.Results), out.Count, len(r.emails))
	}
}

func (l *load) stream(ctx context.Context, size int) {
	r := &request{path: pathStream, emails: l.g.batch(size)}
	defer l.record(r)
	resp, err := l.post(ctx, r, "/v1/email/verify/stream", map[string][]string{"emails": r.emails})
	if err != nil || resp.StatusCode != http.StatusOK {
		classify(r, resp, err)
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var missing []string
	errLine := false
	for sc.Scan() {
		var line struct {
			result
			Error   string   `json:"error"`
			Message string   `json:"message"`
			Emails  []string `json:"emails"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			r.outcome, r.detail = otherError, "a stream line is not JSON: "+sc.Text()
			return
		}
		if line.Error != "" {
			if line.Error != "service_unavailable" {
				r.outcome, r.detail = otherError, "error line: "+sc.Text()
				return
			}
			errLine, missing, r.detail = true, line.Emails, line.Message
			continue
		}
		r.take(line.result)
	}
	switch {
	case sc.Err() != nil:
		r.outcome, r.detail = cut, sc.Err().Error()
	case errLine:
		r.outcome = unavailable
		// The error line must list exactly the addresses without a result line.
		if len(missing)+len(r.got) != len(r.emails) {
			r.wrong = append(r.wrong, fmt.Sprintf("stream: %d results and %d addresses in the error line for %d emails",
				len(r.got), len(missing), len(r.emails)))
		}
		for _, e := range missing {
			if _, ok := r.got[e]; ok {
				r.wrong = append(r.wrong, "stream error line lists "+e+", which had a result line")
			}
		}
	case len(r.got) == len(r.emails):
		r.outcome = answered
	default:
		// Ended cleanly without its error line and without every result: a silent loss, unless the
		// replica was killed (the connection then ends without HTTP's last chunk: sc.Err).
		r.outcome, r.detail = otherError, fmt.Sprintf("stream ended with %d of %d results and no error line", len(r.got), len(r.emails))
	}
}

func (l *load) async(ctx context.Context) {
	r := &request{path: pathAsync, emails: []string{l.g.next(true)}}
	defer l.record(r)
	resp, err := l.post(ctx, r, "/v1/email/verify", map[string]string{
		"email": r.emails[0], "webhook_url": l.s.hookURL, "webhook_secret": webhookSecret})
	if err != nil || resp.StatusCode != http.StatusAccepted {
		classify(r, resp, err)
		return
	}
	defer resp.Body.Close()
	var acc struct {
		JobID string `json:"job_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&acc); err != nil || acc.JobID == "" {
		r.outcome, r.detail = cut, fmt.Sprintf("202 without a job id: %v", err)
		return
	}
	r.jobID, r.outcome = acc.JobID, answered
}

// uploadList uploads a text list of n new addresses plus dups repeats of its first rows, with a
// completion callback.
func (l *load) uploadList(ctx context.Context, n, dups int) *request {
	r := &request{path: pathList, emails: l.g.batch(n)}
	defer l.record(r)
	l.start(r)
	var body bytes.Buffer
	for _, e := range r.emails {
		body.WriteString(e + "\n")
	}
	for _, e := range r.emails[:dups] {
		body.WriteString(strings.ToUpper(e) + "\n") // a duplicate after normalisation
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost,
		l.s.apiURLs[r.replica]+"/v1/email/lists?name=cluster-test&webhook_url="+l.s.hookURL, &body)
	req.Header.Set("Authorization", "Bearer "+l.s.key)
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Mailvet-Webhook-Secret", webhookSecret)
	resp, err := l.client.Do(req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		classify(r, resp, err)
		return r
	}
	defer resp.Body.Close()
	var lst struct {
		ID     string `json:"id"`
		Rows   int    `json:"rows"`
		Unique int    `json:"unique"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&lst); err != nil || lst.ID == "" {
		r.outcome, r.detail = cut, fmt.Sprintf("202 without a list id: %v", err)
		return r
	}
	r.jobID, r.outcome = lst.ID, answered
	if lst.Rows != n+dups || lst.Unique != n {
		r.wrong = append(r.wrong, fmt.Sprintf("list has %d rows, %d unique; want %d, %d", lst.Rows, lst.Unique, n+dups, n))
	}
	return r
}

// worker runs send up to max times, pausing pause in between, until stop is closed.
func worker(stop <-chan struct{}, wg *sync.WaitGroup, max int, pause time.Duration, send func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range max {
			select {
			case <-stop:
				return
			default:
			}
			send()
			select {
			case <-stop:
				return
			case <-time.After(pause):
			}
		}
	}()
}
