package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mailvet/mailvet/client"
)

// progress draws a one-line progress bar of a bulk list on a terminal, with the rate and the
// time left that the API computes (docs/lists.md, "Progress"); when disabled it draws nothing.
type progress struct {
	w       io.Writer
	enabled bool
	done    int
	total   int
	rate    float64
	eta     *int
	now     func() time.Time
}

func newProgress(w io.Writer, enabled bool) *progress {
	p := &progress{w: w, enabled: enabled, now: time.Now}
	return p
}

// update redraws the bar from a reading of the list.
func (p *progress) update(l client.List) {
	p.done, p.total, p.eta = l.Verified, l.Unique, l.ETASeconds
	if l.RatePerSecond != nil {
		p.rate = *l.RatePerSecond
	}
	if p.enabled {
		fmt.Fprint(p.w, "\r"+p.line())
	}
}

// finish ends the bar's line, so later output starts on a fresh one.
func (p *progress) finish() {
	if p.enabled {
		fmt.Fprint(p.w, "\r"+p.line()+"\n")
		p.enabled = false
	}
}

// line is the bar: "[=====>    ]  420/1000  42%  85.3/s  ETA 7s".
func (p *progress) line() string {
	const width = 30
	frac := 0.0
	if p.total > 0 {
		frac = float64(p.done) / float64(p.total)
	}
	filled := int(frac * width)
	bar := strings.Repeat("=", filled)
	if filled < width {
		bar += ">" + strings.Repeat(" ", width-filled-1)
	}
	eta := "?"
	if p.eta != nil {
		eta = (time.Duration(*p.eta) * time.Second).String()
	} else if p.total > 0 && p.done == p.total {
		eta = "0s"
	}
	return fmt.Sprintf("[%s] %*d/%d %3.0f%%  %.1f/s  ETA %s ", bar, len(fmt.Sprint(p.total)), p.done, p.total, 100*frac, p.rate, eta)
}
