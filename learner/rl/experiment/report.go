package experiment

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/parleyhq/parley/learner/rl"
)

// Report file names inside the output directory.
const (
	ResultsMarkdown = "results.md"
	ResultsCSV      = "results.csv"
	ResultsJSON     = "results.json"
	FigureAvgR      = "figure5_avg_r.png"
	FigureAvgL      = "figure5_avg_l.png"
)

// WriteReport writes results.md, results.csv, results.json and the two
// panels of Figure 5 into dir.
func WriteReport(dir string, res *Results) error {
	if err := writeCSV(filepath.Join(dir, ResultsCSV), res); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ResultsJSON), b, 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	where := "user agent, α=1"
	if res.TrainOn == TrainOnPlayers {
		where = "ground-truth players"
	}
	for _, f := range []struct {
		file, label string
		get         func(CurvePoint) float64
	}{
		{FigureAvgR, "Avg.r (" + where + ")", func(p CurvePoint) float64 { return p.AvgR }},
		{FigureAvgL, "Avg.L (" + where + ")", func(p CurvePoint) float64 { return p.AvgL }},
	} {
		if err := writeFigure(filepath.Join(dir, f.file), res, f.label, f.get); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ResultsMarkdown), []byte(Markdown(res)), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

func writeCSV(path string, res *Results) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	defer f.Close()
	w := csv.NewWriter(f)
	head := []string{"variant", "table", "seed", "ppl", "dist1", "dist2", "avg_l", "avg_r", "ua_avg_l", "ua_avg_r",
		"sec_per_step", "peak_heap_mb", "nodes_per_tree", "budget_s", "group_nodes", "exact_nodes", "exp_l", "ua_exp_l", "train_on"}
	if err := w.Write(head); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	g := func(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
	for _, r := range res.Rows {
		rec := []string{r.Variant, r.Table, strconv.Itoa(r.Seed), g(r.PPL), g(r.Dist1), g(r.Dist2), g(r.AvgL), g(r.AvgR),
			g(r.UAAvgL), g(r.UAAvgR), g(r.SecPerStep), g(r.PeakHeapMB), g(r.NodesPerTree),
			strconv.Itoa(r.BudgetS), strconv.Itoa(r.GroupNodes), strconv.Itoa(r.ExactNodes), g(r.ExpL), g(r.UAExpL), r.TrainOn}
		if err := w.Write(rec); err != nil {
			return fmt.Errorf("write csv: %w", err)
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return f.Close()
}

// byVariant collects one metric of every seed of a variant.
func byVariant(res *Results, name string, get func(Row) float64) []float64 {
	var out []float64
	for _, r := range res.Rows {
		if r.Variant == name {
			out = append(out, get(r))
		}
	}
	return out
}

func pm(xs []float64, prec int) string {
	if len(xs) == 0 {
		return "–"
	}
	m, s := rl.MeanStd(xs)
	if len(xs) < 2 {
		return strconv.FormatFloat(m, 'f', prec, 64)
	}
	return fmt.Sprintf("%.*f ± %.*f", prec, m, prec, s)
}

// Markdown renders Tables 3, 5 and 6 (mean ± sample std over seeds) and
// links Figure 5.
func Markdown(res *Results) string {
	var b strings.Builder
	p := res.Profile
	t := p.RL.Tree
	mc := p.Model
	mc.VocabSize = p.VocabSize
	fmt.Fprintf(&b, "# AT-GRPO experiment — profile %s\n\n", p.Name)
	fmt.Fprintf(&b, "%d seed(s); model %d params (d%d, %d layers); trees W=%d, w=%d, γ=%g, ω=%g, L=%d; "+
		"%d trees/step, %d steps, RL lr %g, β=%g, ε=%g, λ=%g. Bootstrap %.0f s, total %.0f s.\n\n",
		res.Seeds, mc.Params(), p.Model.Dim, p.Model.Layers, t.W, t.Width, t.Gamma, t.Omega, t.Depth,
		p.RL.Batch, p.RL.Steps, p.RL.Update.Train.LearningRate, p.RL.Update.Beta, p.RL.Update.Epsilon, p.RL.Lambda,
		res.SFTSeconds, res.Seconds)
	fmt.Fprintf(&b, "RL environment: %s.\n\n", cmp.Or(res.TrainOn, TrainOnUserAgent))
	b.WriteString("Avg.L and Avg.r are measured on held-out ground-truth players (the referee) and, in the\n" +
		"UA columns, on the learned user agent with α = 1, over the same " + strconv.Itoa(p.EvalPrompts) + " held-out openings, L = " +
		strconv.Itoa(p.EvalDepth) + "; Exp.L is the expected length from the hazards (survival product). PPL is on the held-out players' reference NPC turns.\n\n")
	bs := res.Bootstrap
	fmt.Fprintf(&b, "SFT start on held-out players (learner.TrainSFT): dialogue agent PPL %.2f, Dist-1 %.3f, Dist-2 %.3f "+
		"(final loss %.3f); user agent PPL %.2f, ρ %.3f (defined: %v), termination log-loss %.4f, simulated/real Avg.L %.2f/%.2f "+
		"(final loss %.3f).\n\n",
		bs.NPC.PPL, bs.NPC.Dist1, bs.NPC.Dist2, bs.NPCLoss, bs.UserAgent.PPL, bs.UserAgent.Rho, bs.UserAgent.RhoDefined,
		bs.UserAgent.TermLogLoss, bs.UserAgent.AvgL, bs.UserAgent.RealAvgL, bs.UserAgentLoss)
	if len(res.Probes) > 0 {
		b.WriteString("Does the environment reward quality? Mean termination probability p after a first NPC turn by a scripted NPC\n" +
			"of each quality, on the held-out openings (the user agent's p = min(2·P_T, 1); the players' p is their hidden hazard):\n\n" +
			"| scripted NPC | user agent p | players p |\n| --- | --- | --- |\n")
		for _, pr := range res.Probes {
			fmt.Fprintf(&b, "| %s | %.3f | %.3f |\n", pr.Quality, pr.UserAgent, pr.Players)
		}
		b.WriteString("\n")
	}
	metrics := []struct {
		head string
		prec int
		get  func(Row) float64
	}{
		{"PPL", 2, func(r Row) float64 { return r.PPL }},
		{"Dist-1", 3, func(r Row) float64 { return r.Dist1 }},
		{"Dist-2", 3, func(r Row) float64 { return r.Dist2 }},
		{"Avg.r", 3, func(r Row) float64 { return r.AvgR }},
		{"Avg.L", 2, func(r Row) float64 { return r.AvgL }},
		{"Exp.L", 2, func(r Row) float64 { return r.ExpL }},
		{"UA Avg.r", 3, func(r Row) float64 { return r.UAAvgR }},
		{"UA Avg.L", 2, func(r Row) float64 { return r.UAAvgL }},
		{"UA Exp.L", 2, func(r Row) float64 { return r.UAExpL }},
	}
	table := func(title string, rows []string) {
		fmt.Fprintf(&b, "## %s\n\n| method |", title)
		for _, m := range metrics {
			fmt.Fprintf(&b, " %s |", m.head)
		}
		b.WriteString("\n| --- |")
		for range metrics {
			b.WriteString(" --- |")
		}
		b.WriteString("\n")
		for _, name := range rows {
			fmt.Fprintf(&b, "| %s |", name)
			for _, m := range metrics {
				fmt.Fprintf(&b, " %s |", pm(byVariant(res, name, m.get), m.prec))
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	table("Table 3 analogue: main results", tableRows(res.Variants, "main"))
	if rows := tableRows(res.Variants, "ablation"); len(rows) > 1 {
		table("Table 5 analogue: ablations of AT-GRPO", rows)
	}
	if rows := tableRows(res.Variants, "fidelity"); len(rows) > 0 {
		table("Fidelity: AT-GRPO trained on the ground-truth players", rows)
	}
	writeAcceptance(&b, res.Acceptance)
	writeRounds(&b, res)
	b.WriteString("## Table 6 analogue: cost\n\n")
	b.WriteString("| method | s/step | × GRPO | peak Go heap (MiB) | nodes/tree measured | S + W·L (paper's bound) | exact, no terminations |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	grpo, _ := rl.MeanStd(byVariant(res, "GRPO", func(r Row) float64 { return r.SecPerStep }))
	for _, v := range res.Variants {
		if v.Config == nil {
			continue
		}
		secs := byVariant(res, v.Name, func(r Row) float64 { return r.SecPerStep })
		m, _ := rl.MeanStd(secs)
		ratio := "–"
		if grpo > 0 && len(secs) > 0 {
			ratio = fmt.Sprintf("%.2f", m/grpo)
		}
		c := v.Config.Tree
		bound := strconv.Itoa(c.Budget() + c.W*c.Depth)
		if c.Shape == rl.ShapeFull {
			bound = "–"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %d |\n", v.Name, pm(secs, 1), ratio,
			pm(byVariant(res, v.Name, func(r Row) float64 { return r.PeakHeapMB }), 0),
			pm(byVariant(res, v.Name, func(r Row) float64 { return r.NodesPerTree }), 1),
			bound, c.NodesWithoutTerminations())
	}
	b.WriteString("\nS = Σ_i W·Σ_{t=1}^{l_i} w^t counts a full expansion for every group node; the exact count\n" +
		"reuses the chosen node's w children and their subtrees at the next depth (see rl.TreeConfig.NodesWithoutTerminations).\n" +
		"TreeRPO's full tree has W + W² + … + W^L nodes. Paper: AT-GRPO/GRPO = 39.4 s / 24.2 s = 1.63, TreeRPO/GRPO = 6.0.\n\n")
	fmt.Fprintf(&b, "## Figure 5 analogue\n\n![Avg.r over steps](%s)\n\n![Avg.L over steps](%s)\n\n", FigureAvgR, FigureAvgL)
	b.WriteString("Curves are the mean over seeds, evaluated on held-out openings in the RL environment (the user agent at α = 1, or the players).\n")
	return b.String()
}

// meanCurve averages a variant's curves over seeds, point by point.
func meanCurve(res *Results, name string, get func(CurvePoint) float64) plotter.XYs {
	var sum []float64
	var steps []int
	n := 0
	for _, r := range res.Rows {
		if r.Variant != name || len(r.Curve) == 0 {
			continue
		}
		if sum == nil {
			sum = make([]float64, len(r.Curve))
			for _, p := range r.Curve {
				steps = append(steps, p.Step)
			}
		}
		for i := range min(len(sum), len(r.Curve)) {
			sum[i] += get(r.Curve[i])
		}
		n++
	}
	xys := make(plotter.XYs, len(sum))
	for i := range sum {
		xys[i].X, xys[i].Y = float64(steps[i]), sum[i]/float64(n)
	}
	return xys
}

func writeFigure(path string, res *Results, label string, get func(CurvePoint) float64) error {
	pl := plot.New()
	pl.Title.Text = "Figure 5 analogue: " + label
	pl.X.Label.Text = "RL step"
	pl.Y.Label.Text = label
	var lines []any
	for _, v := range res.Variants {
		if v.Table != "main" || v.Config == nil {
			continue
		}
		xys := meanCurve(res, v.Name, get)
		if len(xys) == 0 {
			continue
		}
		for _, p := range xys {
			if math.IsNaN(p.Y) {
				return fmt.Errorf("figure %s: %s has NaN points", path, v.Name)
			}
		}
		lines = append(lines, v.Name, xys)
	}
	if err := plotutil.AddLinePoints(pl, lines...); err != nil {
		return fmt.Errorf("figure %s: %w", path, err)
	}
	pl.Legend.Top = true
	if err := pl.Save(7*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("figure %s: %w", path, err)
	}
	return nil
}

// LoadResults reads the results.json of an earlier run, for re-rendering
// its report with WriteReport.
func LoadResults(dir string) (*Results, error) {
	b, err := os.ReadFile(filepath.Join(dir, ResultsJSON))
	if err != nil {
		return nil, fmt.Errorf("load results: %w", err)
	}
	var res Results
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("load results %q: %w", dir, err)
	}
	return &res, nil
}

// writeRounds renders the loop's rounds (Results.Rounds) as Markdown.
func writeRounds(w io.Writer, res *Results) {
	l := res.Profile.Loop
	if len(res.Rounds) == 0 || l == nil {
		return
	}
	fmt.Fprintf(w, "## The loop: RL, refresh the user agent, RL again\n\n")
	fmt.Fprintf(w, "%d rounds of %s. ", l.Rounds, res.Rounds[0].Variant)
	if l.KeepUserAgent {
		fmt.Fprintf(w, "The loop's control: every round trains against the bootstrap user agent (no play, no refresh), "+
			"its referee gate measured again with the previous round's policy writing the siblings, RL starting again from that policy. ")
	} else {
		fmt.Fprintf(w, "Before each later round the previous round's policy plays %d dialogues with every training "+
			"player (as the bootstrap's scripted NPCs did), the user agent is fine-tuned from its previous version on the dialogues "+
			"it was trained on plus the new ones (learner.TrainSFT, %d steps at lr %g), its referee gate is measured with the "+
			"previous round's policy writing the siblings, and RL starts again from that policy against the refreshed agent. ",
			l.DialoguesPerPlayer, l.RefreshSteps, l.RefreshLR)
	}
	fmt.Fprintf(w, "Every round is evaluated on the same %d held-out openings as SFT only, paired; %.0f %% intervals from %d bootstrap "+
		"resamples of the players. The UA columns use the round's user agent, SFT only's UA Avg.L measured with it too.\n\n",
		res.Profile.EvalPrompts, 100*rl.DefaultBootstrapConfig().Level, rl.DefaultBootstrapConfig().Resamples)
	fmt.Fprintf(w, "| round | seed | user agent | Avg.L | Exp.L | Δ Avg.L vs SFT [CI] | Δ Exp.L vs SFT [CI] | UA Avg.L SFT → policy | "+
		"Δ UA Avg.L [CI] | Δ UA Exp.L [CI] | PPL (× SFT) | s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range res.Rounds {
		p, u := r.Players, r.UserAgentDelta
		fmt.Fprintf(w, "| %d | %d | %s | %.2f | %.2f | %+.3f [%+.3f, %+.3f] | %+.3f [%+.3f, %+.3f] | %.2f → %.2f | "+
			"%+.3f [%+.3f, %+.3f] | %+.3f [%+.3f, %+.3f] | %.2f (%.3f) | %.0f |\n",
			r.Round, r.Seed, r.UserAgent, r.AvgL, r.ExpL, p.DeltaAvgL, p.CILow, p.CIHigh, p.DeltaExpL, p.ExpCILow, p.ExpCIHigh,
			r.SFTUAAvgL, r.UAAvgL, u.DeltaAvgL, u.CILow, u.CIHigh, u.DeltaExpL, u.ExpCILow, u.ExpCIHigh, r.PPL, r.PPLRatio, r.Seconds)
	}
	fmt.Fprintf(w, "\nThe user agent of each round and its referee gate (τ-b is the mean within-group Kendall τ-b with its CI; "+
		"the previous agent is judged on the same sample):\n\n")
	fmt.Fprintf(w, "| round | seed | user agent | refreshed on: old + new (new Avg.L) | held-out ρ, log-loss, sim/real Avg.L after | "+
		"τ-b [CI] | Pearson | sim/real Avg.L | gate | previous agent: τ-b, Pearson, sim/real |\n"+
		"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range res.Rounds {
		refreshed, metrics, prev, gate := "bootstrap", "–", "–", "not measured"
		if f := r.Refresh; f != nil {
			refreshed = fmt.Sprintf("%d + %d (%.2f)", f.OldDialogues, f.NewDialogues, f.NewAvgL)
			metrics = fmt.Sprintf("%.3f, %.4f, %.2f/%.2f", f.After.Rho, f.After.TermLogLoss, f.After.AvgL, f.After.RealAvgL)
		}
		if b := r.RefereeBefore; b != nil {
			prev = fmt.Sprintf("%.3f, %.3f, %.3f", b.KendallTau, b.Pearson, b.SimRealAvgL)
		}
		tau, pearson, ratio := "–", "–", "–"
		if g := r.Referee; g != nil {
			tau = fmt.Sprintf("%.3f [%.3f, %.3f]", g.KendallTau, g.KendallTauCILow, g.KendallTauCIHigh)
			pearson, ratio = fmt.Sprintf("%.3f", g.Pearson), fmt.Sprintf("%.3f", g.SimRealAvgL)
			gate = fmt.Sprintf("%v (%s)", g.Pass, g.Reason)
		}
		fmt.Fprintf(w, "| %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.Round, r.Seed, r.UserAgent, refreshed, metrics, tau, pearson, ratio, gate, prev)
	}
	if res.Seeds > 1 {
		writePooledRounds(w, res)
	}
	chained := true
	for i := 1; i < len(res.Rounds); i++ {
		if r, prev := res.Rounds[i], res.Rounds[i-1]; r.Seed == prev.Seed && r.PolicyStart != prev.PolicyEnd {
			chained = false
		}
	}
	fmt.Fprintf(w, "\nEvery round's RL starts from the previous round's policy (the digest of its weights at the start "+
		"equals the previous round's at the end): %v.\n\n", chained)
}

// writePooledRounds renders each round against SFT only over every seed
// (rl.Compare pairs within each seed and resamples players across them,
// as the acceptance does) and the mean over seeds of the rest.
func writePooledRounds(w io.Writer, res *Results) {
	fmt.Fprintf(w, "\nEvery seed together (paired within each seed, players resampled across seeds; the other columns are means over seeds):\n\n")
	fmt.Fprintf(w, "| round | seeds | Avg.L | Exp.L | Δ Avg.L vs SFT [CI] | Δ Exp.L vs SFT [CI] | seeds positive | Δ UA Avg.L | Δ UA Exp.L | PPL ratio |\n"+
		"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for n := 1; n <= res.Profile.rounds(); n++ {
		var arm, base [][]rl.Outcome
		var avgL, expL, uaL, uaE, ppl []float64
		positive := 0
		for _, r := range res.Rounds {
			if r.Round != n {
				continue
			}
			held, sft := rowOf(res, r.Variant, r.Seed), rowOf(res, VariantSFT, r.Seed)
			if r.Row != nil {
				held = r.Row
			}
			if held == nil || sft == nil {
				continue
			}
			arm, base = append(arm, held.HeldOut), append(base, sft.HeldOut)
			avgL, expL, ppl = append(avgL, r.AvgL), append(expL, r.ExpL), append(ppl, r.PPLRatio)
			uaL, uaE = append(uaL, r.UserAgentDelta.DeltaAvgL), append(uaE, r.UserAgentDelta.DeltaExpL)
			if r.Players.DeltaAvgL > 0 {
				positive++
			}
		}
		c, err := rl.Compare(arm, base, res.Profile.EvalDepth, rl.DefaultBootstrapConfig())
		if err != nil {
			continue
		}
		mean := func(xs []float64) float64 { m, _ := rl.MeanStd(xs); return m }
		fmt.Fprintf(w, "| %d | %d | %s | %s | %+.3f [%+.3f, %+.3f] | %+.3f [%+.3f, %+.3f] | %d/%d | %+.3f | %+.3f | %.3f |\n",
			n, len(arm), pm(avgL, 2), pm(expL, 2), c.DeltaAvgL, c.CILow, c.CIHigh, c.DeltaExpL, c.ExpCILow, c.ExpCIHigh,
			positive, len(arm), mean(uaL), mean(uaE), mean(ppl))
	}
}
