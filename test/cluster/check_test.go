package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mailvet/mailvet/internal/usage/usagetest"
)

// row is the report of one path: requests and addresses, and what became of them.
type row struct {
	requests, emails             int
	answered, unavailable, cut   int // requests
	errors                       int // requests with an undocumented error: always a failure
	wrong                        int // results that differ from the address's known outcome
	delivered, billed            int // results (async: callbacks; list: unique addresses)
	lost, duplicated, overbilled int // results
	finalFailures                int // async: deliveries that failed after 3 attempts
	// unbilledAtKill are results delivered by an API replica within a second of its kill and not
	// billed: their rows, written behind the responses, died with it (docs/reliability.md,
	// "Metering guarantees": in the customer's favour). Reported, not failed; any other unbilled
	// result is lost.
	unbilledAtKill int
	// resentAfterKill are async callbacks sent again because the webhook worker was killed
	// during an attempt the receiver had already got (logged interrupted): at least once, as
	// documented. Reported, not failed; any other second callback is a duplicate.
	resentAfterKill int
}

// confirmWindow is how close to its replica's kill a delivered result may have gone unbilled: the
// statement that bills it behind its response, on a loaded machine.
const confirmWindow = time.Second

// beforeKill reports whether r's result for email reached the client within a second of the kill
// of r's API replica: before it, or just after (an answer already on its way when the process
// died, as the kill time is taken just before the signal).
func beforeKill(r *request, email string, kills map[int]time.Time) bool {
	k, killed := kills[r.replica]
	at, ok := r.arrived[email]
	return killed && ok && at.Sub(k).Abs() <= confirmWindow
}

// ledger is what Postgres says the account was charged and what became of its async work.
type ledger struct {
	rowsByEmail   map[string]int // non-list, non-async usage rows traced by their snapshot's email
	anonymous     map[string]int // route ⇒ usage rows without a snapshot (none is expected)
	anonDomains   map[string]int // email domain ⇒ such rows of single verifications
	rowsByJob     map[string]int // async: usage rows by job id
	listRows      map[string]int // list id ⇒ usage rows
	billableRows  int
	billableWrong []string
	monthly       int // the month's billable count
	daily         int // the days' billable counts, summed
	jobsByEmail   map[string]string
	jobState      map[string]string
	delivery      map[string]delivery // job id ⇒ its delivery
}

type delivery struct {
	state       string
	attempts    int
	interrupted int
}

// settle waits until every accepted async job has finished and been delivered or has failed and
// every list has completed, or until the deadline; then a little more, for the usage rows the
// live API replicas write behind their responses. A killed replica's undelivered results were
// never billed, so nothing of it needs waiting for (docs/reliability.md, "Metering guarantees").
func (s *system) settle(ctx context.Context, lists []string, deadline time.Duration) error {
	end := time.Now().Add(deadline)
	for {
		var open int
		err := s.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM jobs WHERE account_id = $1 AND state NOT IN ('completed', 'failed')) +
			(SELECT count(*) FROM deliveries WHERE account_id = $1 AND state NOT IN ('delivered', 'failed')) +
			(SELECT count(*) FROM lists WHERE account_id = $1 AND state <> 'completed')`, s.accountID).Scan(&open)
		if err == nil && open == 0 {
			// Usage rows are written just behind their responses, batched.
			time.Sleep(2 * time.Second)
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("after %s still %d unfinished jobs, deliveries or lists (err %v)", deadline, open, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (s *system) readLedger(ctx context.Context) ledger {
	l := ledger{rowsByEmail: map[string]int{}, anonymous: map[string]int{}, anonDomains: map[string]int{}, rowsByJob: map[string]int{},
		listRows: map[string]int{}, jobsByEmail: map[string]string{}, jobState: map[string]string{},
		delivery: map[string]delivery{}}
	for _, r := range usagetest.Rows(s.t, s.pool, s.accountID) {
		if strings.HasSuffix(r.ItemKey, ":rejected") {
			continue
		}
		route, key, email, billable := r.Route, r.ItemKey, r.Email, r.Billable
		if billable {
			l.billableRows++
		}
		switch {
		case route == "verify_list":
			parts := strings.Split(key, ":") // list:<id>:<index>
			l.listRows[parts[1]]++
		case route == "verify_async":
			l.rowsByJob[strings.TrimPrefix(key, "job:")]++
		case email == "":
			l.anonymous[route]++
			if route == "verify" {
				l.anonDomains[r.EmailDomain]++
			}
		default:
			l.rowsByEmail[email]++
			if expected(email).billable != billable {
				l.billableWrong = append(l.billableWrong, fmt.Sprintf("%s billable=%v", email, billable))
			}
		}
	}
	counts := usagetest.Of(s.t, s.pool, s.accountID)
	l.monthly, l.daily = counts.Billable, counts.Daily
	jobs, err := s.pool.Query(ctx, `SELECT id::text, email, state FROM jobs WHERE account_id = $1`, s.accountID)
	if err != nil {
		s.t.Fatal(err)
	}
	for jobs.Next() {
		var id, email, state string
		if err := jobs.Scan(&id, &email, &state); err != nil {
			s.t.Fatal(err)
		}
		l.jobsByEmail[email], l.jobState[id] = id, state
	}
	ds, err := s.pool.Query(ctx, `SELECT d.job_id::text, d.state, d.attempts,
		(SELECT count(*) FROM delivery_attempts a WHERE a.delivery_id = d.id AND a.error LIKE 'interrupted%')
		FROM deliveries d WHERE d.account_id = $1 AND d.job_id IS NOT NULL AND d.replay_of IS NULL`, s.accountID)
	if err != nil {
		s.t.Fatal(err)
	}
	for ds.Next() {
		var job string
		var d delivery
		if err := ds.Scan(&job, &d.state, &d.attempts, &d.interrupted); err != nil {
			s.t.Fatal(err)
		}
		l.delivery[job] = d
	}
	return l
}

// verdict checks every request against the ledger and the receiver, and returns the table and
// every failure found.
func (s *system) verdict(ctx context.Context, reqs []*request, kills map[int]time.Time) (map[string]*row, []string) {
	led := s.readLedger(ctx)
	s.recv.mu.Lock()
	defer s.recv.mu.Unlock()
	table := map[string]*row{}
	for _, p := range paths {
		table[p] = &row{}
	}
	var fails []string
	failf := func(format string, args ...any) { fails = append(fails, fmt.Sprintf(format, args...)) }
	answeredSync := 0             // answered single verifications whose row has no snapshot yet
	syncBeforeKill := 0           // of those, answered within a second of their replica's kill
	var untraced []string         // their emails
	var unansweredSync []*request // single verifications that got no result

	for _, r := range reqs {
		t := table[r.path]
		t.requests++
		t.emails += len(r.emails)
		switch r.outcome {
		case answered:
			t.answered++
		case unavailable:
			t.unavailable++
		case cut:
			t.cut++
			if r.phase == "rolling" {
				failf("%s request to api-%d cut during the rolling restart (not the documented 503): %s", r.path, r.replica+1, r.detail)
			}
		default:
			t.errors++
			failf("%s request to api-%d (%s phase): %s", r.path, r.replica+1, r.phase, r.detail)
		}
		t.wrong += len(r.wrong)
		if len(r.wrong) > 0 {
			failf("%s request to api-%d: %d wrong results: %s", r.path, r.replica+1, len(r.wrong), firstFew(r.wrong))
		}
		t.duplicated += r.dupes

		if r.path == pathSync && len(r.got) == 0 {
			unansweredSync = append(unansweredSync, r)
		}
		switch r.path {
		case pathSync, pathBatch, pathStream:
			var unbilled, twice, overbilled []string
			for _, e := range r.emails {
				_, got := r.got[e]
				n := led.rowsByEmail[e]
				if got {
					t.delivered++
				}
				switch {
				case got && n == 1:
					t.billed++
				case got && n == 0 && r.path == pathSync:
					answeredSync++ // its row's verdict may not be written: matched below
					untraced = append(untraced, e)
					if beforeKill(r, e, kills) {
						syncBeforeKill++
					}
				case got && n == 0 && beforeKill(r, e, kills):
					t.unbilledAtKill++
				case got && n == 0:
					t.lost++
					unbilled = append(unbilled, e)
				case n > 1:
					t.billed += n
					t.duplicated += n - 1
					twice = append(twice, fmt.Sprintf("%s ×%d", e, n))
				case !got && n > 0:
					t.billed += n
					t.overbilled += n
					r.overbilled += n
					overbilled = append(overbilled, e)
				}
			}
			what := fmt.Sprintf("%s request of %d emails to api-%d (%s, %s phase)", r.path, len(r.emails), r.replica+1, r.outcome, r.phase)
			if len(unbilled) > 0 {
				failf("%s: %d results answered but never billed: %s", what, len(unbilled), firstFew(unbilled))
			}
			if len(twice) > 0 {
				failf("%s: billed more than once: %s", what, firstFew(twice))
			}
			if len(overbilled) > 0 {
				failf("%s: %d emails billed whose results never reached the client: %s", what, len(overbilled), firstFew(overbilled))
			}
		case pathAsync:
			e := r.emails[0]
			job := r.jobID
			if job == "" {
				job = led.jobsByEmail[e] // a cut request whose job was stored nonetheless
			}
			if job == "" {
				continue
			}
			n, calls, d := led.rowsByJob[job], s.recv.jobs[job], led.delivery[job]
			t.billed += n
			t.delivered += min(calls, 1)
			switch {
			case calls == 1:
			case calls == 0 && d.state == "failed" && d.attempts == 3:
				t.finalFailures++
			case calls == 0:
				t.lost++
				failf("async job %s (%s) never delivered: job %s, delivery %+v", job, e, led.jobState[job], d)
			case calls-1 <= d.interrupted:
				// An attempt cut off by the webhook worker's kill after the receiver had it is
				// sent again (docs/api.md: deduplicate on job_id); its log says interrupted.
				t.resentAfterKill += calls - 1
			default:
				t.duplicated += calls - 1
				failf("async job %s delivered %d times (attempts %v, %d interrupted attempts logged)", job, calls, s.recv.attempts[job], d.interrupted)
			}
			if led.jobState[job] == "completed" && n != 1 {
				t.lost += max(0, 1-n)
				t.duplicated += max(0, n-1)
				failf("async job %s has %d usage rows, want 1", job, n)
			}
		case pathList:
			if r.jobID == "" {
				continue
			}
			s.checkList(ctx, r, t, led, failf)
		}
	}
	// Single verifications whose verdict has not been written (their replica was killed between
	// the answer and the verdict's write) are rows without a snapshot: one per answered request
	// that has no traced row. More such rows than those requests were billed without an answer.
	anon := led.anonymous["verify"]
	t := table[pathSync]
	t.billed += min(anon, answeredSync)
	if missing := answeredSync - anon; missing > 0 {
		// Up to those answered just before their replica's kill may have had their rows swept.
		t.unbilledAtKill += min(missing, syncBeforeKill)
		if lost := missing - syncBeforeKill; lost > 0 {
			t.lost += lost
			failf("sync: %d answered single verifications have no usage row", lost)
		}
	}
	if anon > answeredSync {
		t.billed += anon - answeredSync
		t.overbilled += anon - answeredSync
		// Such a row names only its email's domain: after the answered requests have taken theirs,
		// a request that got no answer and whose domain still has a row is the likely owner.
		left := maps.Clone(led.anonDomains)
		for _, e := range untraced {
			left[domainOf(e)]--
		}
		var owners []string
		for _, r := range unansweredSync {
			if d := domainOf(r.emails[0]); left[d] > 0 {
				left[d]--
				r.overbilled++
				owners = append(owners, fmt.Sprintf("%s (%s at api-%d)", r.emails[0], r.outcome, r.replica+1))
			}
		}
		failf("sync: %d usage rows without a verdict belong to no answered request (billed, not answered); likely %s",
			anon-answeredSync, firstFew(owners))
	}
	for route, n := range led.anonymous {
		if route != "verify" {
			failf("%d usage rows of %s have no snapshot", n, route)
		}
	}
	for _, w := range led.billableWrong {
		failf("usage row with the wrong billable flag: %s", w)
	}
	if led.monthly != led.billableRows || led.daily != led.billableRows {
		failf("usage counts disagree with the usage rows: %d billable rows, usage_monthly %d, usage_daily %d",
			led.billableRows, led.monthly, led.daily)
	}
	if s.recv.badSig > 0 {
		failf("%d callbacks with a bad signature", s.recv.badSig)
	}
	return table, fails
}

// checkList checks a completed list: its counts, every row's result, its usage rows and its one
// completion callback.
func (s *system) checkList(ctx context.Context, r *request, t *row, led ledger, failf func(string, ...any)) {
	id := r.jobID
	t.billed += led.listRows[id]
	if n := led.listRows[id]; n != len(r.emails) {
		if n < len(r.emails) {
			t.lost += len(r.emails) - n
		} else {
			t.duplicated += n - len(r.emails)
		}
		failf("list %s: %d usage rows for %d unique addresses", id, n, len(r.emails))
	}
	switch n := s.recv.lists[id]; {
	case n == 0:
		failf("list %s: no completion callback", id)
	case n > 1:
		t.duplicated += n - 1
		failf("list %s: %d completion callbacks", id, n)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.apiURLs[s.pick(0)]+"/v1/email/lists/"+id+"/results?format=ndjson", nil)
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		failf("list %s results: %v", id, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		failf("list %s results: status %d", id, resp.StatusCode)
		return
	}
	seen := map[string]bool{}
	rowsN := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var line struct {
			Email  string  `json:"email"`
			Result *result `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			failf("list %s results: %v", id, err)
			return
		}
		rowsN++
		if line.Result == nil {
			t.lost++
			failf("list %s: row %s has no result", id, line.Email)
			continue
		}
		res := *line.Result
		res.Email = strings.ToLower(strings.TrimSpace(line.Email))
		if msg := res.check(); msg != "" {
			t.wrong++
			failf("list %s: wrong result: %s", id, msg)
		}
		if !seen[res.Email] {
			seen[res.Email] = true
			t.delivered++
		}
	}
	if err := sc.Err(); err != nil {
		failf("list %s results: %v", id, err)
	}
	if len(seen) != len(r.emails) {
		failf("list %s: results for %d addresses, want %d (%d rows)", id, len(seen), len(r.emails), rowsN)
	}
}

// printTable writes the report of docs/reliability.md ("Cluster fault test").
func printTable(w *strings.Builder, table map[string]*row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\trequests\temails\tanswered\t503s\tcut\terrors\tdelivered\twrong\tbilled\tlost\tduplicated\toverbilled\t")
	for _, p := range paths {
		r := table[p]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", p, r.requests, r.emails, r.answered,
			r.unavailable, r.cut, r.errors, r.delivered, r.wrong, r.billed, r.lost, r.duplicated, r.overbilled)
	}
	tw.Flush()
}

func domainOf(email string) string { return email[strings.LastIndexByte(email, '@')+1:] }

// firstFew is a list for a failure message: its first three items and how many more.
func firstFew(items []string) string {
	if len(items) <= 3 {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:3], ", "), len(items)-3)
}

// sortedFailures orders failures for a stable report, and shortens a long list.
func sortedFailures(f []string) []string {
	sort.Strings(f)
	if len(f) > 60 {
		f = append(f[:60], fmt.Sprintf("… and %d more", len(f)-60))
	}
	return f
}
