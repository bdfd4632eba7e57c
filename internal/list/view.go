package list

import (
	"math"
	"time"
)

// View is a list as the API answers it and as its completion callback carries it
// (docs/lists.md, "Progress").
type View struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	State       State    `json:"state"`
	Format      Format   `json:"format"`
	Columns     []string `json:"columns"`
	EmailColumn string   `json:"email_column"`
	Rows        int      `json:"rows"`
	Unique      int      `json:"unique"`
	Verified    int      `json:"verified"`
	// Progress is verified / unique, from 0 to 1, rounded down to four decimals.
	Progress float64 `json:"progress"`
	// RatePerSecond is unique addresses verified per second since the list started; null before.
	RatePerSecond *float64 `json:"rate_per_second"`
	// ETASeconds is the time left at that rate while the list runs; null otherwise.
	ETASeconds *int    `json:"eta_seconds"`
	Counts     Counts  `json:"counts"`
	WebhookURL *string `json:"webhook_url"`
	Error      *string `json:"error"`
	CreatedAt  string  `json:"created_at"`
	StartedAt  *string `json:"started_at"`
	FinishedAt *string `json:"finished_at"`
	ExpiresAt  *string `json:"expires_at"`
	ResultsURL string  `json:"results_url"`
	// Sandbox is true for a list uploaded with a sandbox key (docs/sandbox.md); left out
	// otherwise.
	Sandbox bool `json:"sandbox,omitempty"`
}

// Counts are a list's verified unique addresses by status and by reason.
type Counts struct {
	ByStatus map[string]int `json:"by_status"`
	ByReason map[string]int `json:"by_reason"`
}

// View renders l for the API at now; publicURL is the base of its results URL.
func (l List) View(publicURL string, now time.Time) View {
	v := View{
		ID: l.ID.String(), Name: l.Name, State: l.State, Format: l.Format, Columns: l.Columns,
		EmailColumn: l.Columns[l.EmailColumn], Rows: l.Rows, Unique: l.Unique, Verified: l.Verified,
		Counts:     Counts{ByStatus: map[string]int{}, ByReason: map[string]int{}},
		WebhookURL: l.WebhookURL, Error: l.Error, CreatedAt: iso(l.CreatedAt),
		StartedAt: isoPtr(l.StartedAt), FinishedAt: isoPtr(l.FinishedAt), ExpiresAt: isoPtr(l.ExpiresAt),
		ResultsURL: publicURL + "/v1/email/lists/" + l.ID.String() + "/results",
		Sandbox:    l.Sandbox,
	}
	if l.Unique > 0 {
		// Four decimals, rounded down in whole numbers: a running list with addresses left never
		// shows 1, which a client may read as done (docs/lists.md, "Progress").
		v.Progress = float64(int64(l.Verified)*10000/int64(l.Unique)) / 10000
	}
	for _, c := range l.Counts {
		v.Counts.ByStatus[c.Status] += c.N
		v.Counts.ByReason[c.Reason] += c.N
	}
	if l.StartedAt != nil {
		end := now
		if l.FinishedAt != nil {
			end = *l.FinishedAt
		}
		if secs := end.Sub(*l.StartedAt).Seconds(); secs > 0 {
			rate := math.Round(float64(l.Verified)/secs*10) / 10
			v.RatePerSecond = &rate
			if l.State == Running && rate > 0 {
				eta := int(math.Ceil(float64(l.Unique-l.Verified) / rate))
				v.ETASeconds = &eta
			}
		}
	}
	return v
}

func iso(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func isoPtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := iso(*t)
	return &s
}
