package dashboard

import (
	"fmt"
	"time"

	"github.com/mailvet/mailvet/internal/usage"
)

// chart is the 30-day bar chart of daily calls, laid out on the server so that it is plain SVG with
// no script (docs/dashboard.md, "What a customer can do"). The SVG holds only the bars and the
// baseline, which may stretch to any width; its labels (Max, First, Last) are HTML around it, so
// that text is never stretched with the bars on a narrow screen.
type chart struct {
	Width, Height int
	Bars          []bar
	Max           int // the busiest day's calls
	Total         int
	First, Last   string // the dates under the first and last bars
	Label         string // the chart's text alternative
}

type bar struct {
	X, Y, W, H float64
	Title      string
}

const (
	chartWidth  = 600
	chartHeight = 140 // the baseline is at the bottom edge
	chartTop    = 4   // room above the tallest bar
)

func newChart(days []usage.Day) chart {
	c := chart{Width: chartWidth, Height: chartHeight}
	for _, d := range days {
		c.Max = max(c.Max, d.Calls)
		c.Total += d.Calls
	}
	if len(days) == 0 {
		c.Label = "No usage data."
		return c
	}
	slot := float64(chartWidth) / float64(len(days))
	for i, d := range days {
		h := 0.0
		if c.Max > 0 {
			h = float64(d.Calls) / float64(c.Max) * (chartHeight - chartTop)
		}
		if d.Calls > 0 && h < 2 {
			h = 2 // a day with calls stays visible next to a busy one
		}
		c.Bars = append(c.Bars, bar{X: float64(i)*slot + 1, Y: chartHeight - h, W: slot - 2, H: h,
			Title: fmt.Sprintf("%s: %s calls", d.Date, num(d.Calls))})
	}
	c.First, c.Last = shortDate(days[0].Date), shortDate(days[len(days)-1].Date)
	c.Label = fmt.Sprintf("Daily billable calls from %s to %s: %s in total, at most %s on one day.",
		c.First, c.Last, num(c.Total), num(c.Max))
	return c
}

func shortDate(iso string) string {
	t, err := time.Parse(time.DateOnly, iso)
	if err != nil {
		return iso
	}
	return t.Format("2 Jan")
}
