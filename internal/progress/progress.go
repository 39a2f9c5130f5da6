// Package progress reports how far a long job is, in a form that reads well
// wherever it is written: a [Reporter] draws a bar on a terminal, and writes
// one plain line every few seconds (and one at the end) with done/total,
// rate and ETA to a file or a pipe, where a redrawn bar would become one
// line of carriage returns.
package progress

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// DefaultInterval is how often a Reporter writing to a file or a pipe
// writes a line.
const DefaultInterval = 5 * time.Second

// Reporter shows the progress of one job of a known number of units. A
// Reporter on a nil writer shows nothing. It is not safe for concurrent use.
type Reporter struct {
	w           io.Writer
	bar         *progressbar.ProgressBar // on a terminal; nil otherwise
	name, unit  string
	total, done int
	resumed     int // units done before this run, left out of the rate
	interval    time.Duration
	now         func() time.Time
	began, last time.Time
}

// New returns a Reporter of total units (unit is singular, such as "step")
// written to w under name.
func New(w io.Writer, name, unit string, total int) *Reporter {
	return newReporter(w, name, unit, total, time.Now)
}

// newReporter is New on the clock now.
func newReporter(w io.Writer, name, unit string, total int, now func() time.Time) *Reporter {
	r := &Reporter{w: w, name: name, unit: unit, total: total, interval: DefaultInterval, now: now}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		r.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(name), progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true), progressbar.OptionSetElapsedTime(true),
			progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionSetWidth(30))
	}
	r.began = r.now()
	r.last = r.began
	return r
}

// Resume counts n units as done by an earlier run (a resumed job): they are
// shown in done/total but left out of the rate and the ETA.
func (r *Reporter) Resume(n int) {
	r.resumed += n
	r.done += n
	if r.bar != nil {
		_ = r.bar.Set(r.done)
	}
}

// Describe renames the job, as to show the latest loss beside its name.
func (r *Reporter) Describe(name string) {
	r.name = name
	if r.bar != nil {
		r.bar.Describe(name)
	}
}

// Add counts n more units done. Off a terminal it writes a line when the
// interval has passed since the last one.
func (r *Reporter) Add(n int) {
	r.done += n
	switch {
	case r.w == nil:
	case r.bar != nil:
		_ = r.bar.Add(n)
	default:
		if now := r.now(); now.Sub(r.last) >= r.interval {
			r.last = now
			fmt.Fprintln(r.w, r.line(now, false))
		}
	}
}

// Finish ends the bar, or writes the final line with the time the job took.
func (r *Reporter) Finish() {
	switch {
	case r.w == nil:
	case r.bar != nil:
		_ = r.bar.Finish()
		fmt.Fprintln(r.w)
	default:
		fmt.Fprintln(r.w, r.line(r.now(), true))
	}
}

// line formats the progress at now, such as
//
//	sft npc loss 2.345: 120/600 steps (20%), 3.4 steps/s, elapsed 35s, eta 2m21s
//
// and, when final, "…, took 2m56s" in place of the elapsed time and ETA.
func (r *Reporter) line(now time.Time, final bool) string {
	elapsed := now.Sub(r.began)
	s := fmt.Sprintf("%s: %d/%d %ss", r.name, r.done, r.total, r.unit)
	if r.total > 0 {
		s += fmt.Sprintf(" (%d%%)", r.done*100/r.total)
	}
	var perUnit time.Duration
	if ran := r.done - r.resumed; ran > 0 && elapsed > 0 {
		perUnit = elapsed / time.Duration(ran)
		if perUnit < time.Second {
			s += fmt.Sprintf(", %.1f %ss/s", float64(ran)/elapsed.Seconds(), r.unit)
		} else {
			s += fmt.Sprintf(", %v/%s", perUnit.Round(time.Second), r.unit)
		}
	}
	switch {
	case final:
		return s + fmt.Sprintf(", took %v", elapsed.Round(time.Second))
	case perUnit > 0 && r.done < r.total:
		eta := perUnit * time.Duration(r.total-r.done)
		return s + fmt.Sprintf(", elapsed %v, eta %v", elapsed.Round(time.Second), eta.Round(time.Second))
	default:
		return s + fmt.Sprintf(", elapsed %v", elapsed.Round(time.Second))
	}
}
