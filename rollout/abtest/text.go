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
	p("arm\tversions\tplayers\tsessions\topen\tAvg.L [95%% CI]\tAvg.r [95%% CI]\n")
	for _, a := range []ArmStats{r.Stable, r.Canary} {
		p("%s\t%s\t%d\t%d\t%d\t%s\t%s\n", a.Arm, strings.Join(a.Versions, ","), a.Players, a.AvgL.N, a.Open, estimateText(a.AvgL), estimateText(a.AvgR))
	}
	p("\nmetric\tcanary − stable [95%% CI]\tfixed-horizon p\tmSPRT p (always valid)\talways-valid CI\tlooks\tCUPED variance reduction\n")
	for _, c := range []struct {
		name string
		c    Comparison
	}{{"Avg.L", r.AvgL}, {"Avg.r", r.AvgR}} {
		if !c.c.Valid {
			p("%s\t–\t–\t%.3g\t–\t%d\t–\n", c.name, c.c.Seq.P, c.c.Seq.Looks)
			continue
		}
		p("%s\t%+.3g [%.3g, %.3g]\t%.3g\t%.3g\t%s\t%d\t%.1f%%\n", c.name, c.c.Diff, c.c.Lo, c.c.Hi, c.c.P, c.c.Seq.P,
			seqCIText(c.c.Seq), c.c.Seq.Looks, 100*c.c.VarianceReduction)
	}
	srm := "not checked"
	if r.SRM.Checked {
		srm = fmt.Sprintf("p %.3g (χ² %.2f against a canary share of %.3g)", r.SRM.P, r.SRM.ChiSq, r.SRM.Expected)
		if r.SRM.Failed {
			srm += " FAILED"
		}
	}
	p("\nsample ratio: %d stable, %d canary players; %s\n", r.SRM.Stable, r.SRM.Canary, srm)
	p("\nguardrail (whole experiment, per player)\tstable\tcanary\talways-valid CI of canary − stable\n")
	s, c := r.Stable.All, r.Canary.All
	p("sessions / exchanges\t%d / %d\t%d / %d\n", s.Sessions, s.Exchanges, c.Sessions, c.Exchanges)
	p("p95 latency\t%.0f ms\t%.0f ms\n", s.P95LatencyMS, c.P95LatencyMS)
	for _, g := range r.Guardrails {
		p("%s\t%.2f%%\t%.2f%%\t%s\n", g.Name, 100*g.Stable, 100*g.Canary, seqCIText(g.Seq))
	}
	if d != nil {
		p("\ndecision: %s — %s\n", d.Verdict, d.Reason)
		for _, ch := range d.Checks {
			state := "ok"
			switch {
			case ch.Breached:
				state = "BREACHED"
			case !ch.Judged:
				state = "not judged (too few players)"
			}
			p("  %s\tlower bound %.4g\tallowance %.4g\t%s\n", ch.Name, ch.LowerBound, ch.Allowance, state)
		}
	}
	return tw.Flush()
}

func seqCIText(s Sequential) string {
	switch {
	case s.Looks == 0:
		return "–"
	case s.Empty:
		return fmt.Sprintf("empty ([%.3g, %.3g])", s.Lo, s.Hi)
	}
	return fmt.Sprintf("[%.3g, %.3g]", s.Lo, s.Hi)
}

func estimateText(e Estimate) string {
	if e.N == 0 {
		return "–"
	}
	if e.Players < 2 {
		return fmt.Sprintf("%.3g", e.Mean)
	}
	return fmt.Sprintf("%.3g [%.3g, %.3g]", e.Mean, e.Lo, e.Hi)
}
