package abtest

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText writes r as the human-readable tables of `parley ctl report`,
// followed by d's verdict and checks when d is not nil.
func WriteText(w io.Writer, r Report, d *Decision) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	p("experiment %s at %s\n\n", r.ExperimentID, r.At.UTC().Format(time.RFC3339))
	p("arm\tversions\tsessions\topen\tAvg.L [95%% CI]\tAvg.r [95%% CI]\n")
	for _, a := range []ArmStats{r.Stable, r.Canary} {
		p("%s\t%s\t%d\t%d\t%s\t%s\n", a.Arm, strings.Join(a.Versions, ","), a.AvgL.N, a.Open, estimateText(a.AvgL), estimateText(a.AvgR))
	}
	p("\nmetric\tcanary − stable [95%% CI]\tWelch p\tmSPRT p (always valid)\talways-valid CI\tlooks\n")
	for _, c := range []struct {
		name string
		c    Comparison
	}{{"Avg.L", r.AvgL}, {"Avg.r", r.AvgR}} {
		if !c.c.Valid {
			p("%s\t–\t–\t%.3g\t–\t%d\n", c.name, c.c.Seq.P, c.c.Seq.Looks)
			continue
		}
		seqCI := "–"
		if c.c.Seq.Looks > 0 {
			seqCI = fmt.Sprintf("[%.3g, %.3g]", c.c.Seq.Lo, c.c.Seq.Hi)
		}
		p("%s\t%+.3g [%.3g, %.3g]\t%.3g\t%.3g\t%s\t%d\n", c.name, c.c.Diff, c.c.Lo, c.c.Hi, c.c.P, c.c.Seq.P, seqCI, c.c.Seq.Looks)
	}
	p("\nguardrail (last %v)\tstable\tcanary\n", r.GuardrailWindow)
	s, c := r.Stable.Window, r.Canary.Window
	p("sessions / exchanges\t%d / %d\t%d / %d\n", s.Sessions, s.Exchanges, c.Sessions, c.Exchanges)
	p("error rate\t%.2f%%\t%.2f%%\n", 100*s.ErrorRate, 100*c.ErrorRate)
	p("p95 latency\t%.0f ms\t%.0f ms\n", s.P95LatencyMS, c.P95LatencyMS)
	p("early termination (≤ 1 exchange)\t%.2f%%\t%.2f%%\n", 100*s.EarlyTermRate, 100*c.EarlyTermRate)
	p("safety refusals\t%.2f%%\t%.2f%%\n", 100*s.SafetyRefusalRate, 100*c.SafetyRefusalRate)
	if d != nil {
		p("\ndecision: %s — %s\n", d.Verdict, d.Reason)
		for _, ch := range d.Checks {
			state := "ok"
			switch {
			case !ch.Judged:
				state = "not judged (too little data)"
			case ch.Breached:
				state = "BREACHED"
			}
			p("  %s\tcanary %.4g\tlimit %.4g\t%s\n", ch.Name, ch.Canary, ch.Limit, state)
		}
	}
	return tw.Flush()
}

func estimateText(e Estimate) string {
	if e.N == 0 {
		return "–"
	}
	if e.N < 2 {
		return fmt.Sprintf("%.3g", e.Mean)
	}
	return fmt.Sprintf("%.3g [%.3g, %.3g]", e.Mean, e.Lo, e.Hi)
}
