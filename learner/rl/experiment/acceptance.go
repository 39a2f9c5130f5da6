package experiment

import (
	"fmt"
	"io"
	"slices"

	"github.com/parleyhq/parley/learner/rl"
)

// Issue 15's acceptance thresholds.
const (
	// MinDeltaAvgL is the Avg.L an RL method must gain over SFT only on
	// the held-out players (about +10 %).
	MinDeltaAvgL = 0.30
	// MaxPPLRatio bounds the method's PPL over SFT's (up at most 10 %).
	MaxPPLRatio = 1.10
	// MinFidelity is the least share of the players' own gain that
	// training against the user agent must reach.
	MinFidelity = 0.5
)

// Acceptance is issue 15's verdict, computed from the rows alone so that
// anyone can recompute it from results.json.
type Acceptance struct {
	// Referee is the referee gate measured before any RL (Results.Referee);
	// null when the run did not measure it.
	Referee *RefereeGate `json:"referee"`
	// RLvsSFT compares every RL method (keyed by variant name) with SFT
	// only on the held-out players, arm − SFT, paired dialogue by dialogue
	// within each seed.
	RLvsSFT map[string]MethodVerdict `json:"rl_vs_sft"`
	// RLvsSFTPass reports that at least one method trained against the
	// user agent passes.
	RLvsSFTPass bool `json:"rl_vs_sft_pass"`
	// Fidelity is AT-GRPO's gain trained against the user agent against
	// its gain trained on the players; nil without either row.
	Fidelity *Fidelity `json:"fidelity"`
	// ATGRPOvsGRPO is AT-GRPO − GRPO on the held-out players, reported
	// whatever it shows; nil without both rows.
	ATGRPOvsGRPO *rl.Comparison `json:"at_grpo_vs_grpo"`
	// Bootstrap sizes every interval.
	Bootstrap rl.BootstrapConfig `json:"bootstrap"`
}

// RefereeGate is the referee's report on the user agent the RL trains
// against, measured with the SFT policy on held-out players before any RL,
// and its verdict under rl.DefaultRefereeThresholds. The experiment has no
// earlier user agent, so "no worse than the current one" is not judged.
type RefereeGate struct {
	rl.RefereeReport
	Pass   bool   `json:"pass"`
	Reason string `json:"reason"`
}

// MethodVerdict is one method against SFT only. The embedded comparison's
// delta_avg_l is the mean over seeds of the paired difference in sampled
// Avg.L, with ci_low and ci_high from a bootstrap over held-out players;
// delta_exp_l is the same for the expected length from the hazards.
type MethodVerdict struct {
	rl.Comparison
	TrainOn string `json:"train_on"`
	// Seeds counts the paired seeds, SeedsPositive those whose own paired
	// Avg.L difference is above zero.
	Seeds         int `json:"seeds"`
	SeedsPositive int `json:"seeds_positive"`
	// PPLRatio is the method's mean PPL over SFT's on the same seeds.
	PPLRatio float64 `json:"ppl_ratio"`
	// The pass flags: delta ≥ MinDeltaAvgL, CI low > 0, every seed
	// positive, PPL ratio ≤ MaxPPLRatio, and all four.
	DeltaPass bool `json:"delta_pass"`
	CIPass    bool `json:"ci_pass"`
	SeedsPass bool `json:"seeds_pass"`
	PPLPass   bool `json:"ppl_pass"`
	Pass      bool `json:"pass"`
}

// Fidelity compares AT-GRPO's Avg.L gain over SFT on the held-out players
// when trained against the user agent with the gain when trained on the
// players themselves; Pass when the first is at least MinFidelity of the
// second and the second is positive. A gain is null without its row.
type Fidelity struct {
	Method        string   `json:"method"`
	GainUserAgent *float64 `json:"gain_user_agent"`
	GainPlayers   *float64 `json:"gain_players"`
	Pass          bool     `json:"pass"`
}

// Accept computes the acceptance from res's rows. Rows without held-out
// dialogues (from runs before the paired evaluation) are left out.
func Accept(res *Results) *Acceptance {
	a := &Acceptance{Referee: res.Referee, RLvsSFT: map[string]MethodVerdict{}, Bootstrap: rl.DefaultBootstrapConfig()}
	depth := res.Profile.EvalDepth
	for _, v := range res.Variants {
		if v.Config == nil || v.Table == "ablation" {
			continue
		}
		mv, ok := verdict(res, v.Name, depth, a.Bootstrap)
		if !ok {
			continue
		}
		a.RLvsSFT[v.Name] = mv
		a.RLvsSFTPass = a.RLvsSFTPass || mv.Pass && mv.TrainOn == TrainOnUserAgent
	}
	f := &Fidelity{Method: VariantATGRPO}
	for _, name := range []string{VariantATGRPO, VariantOracle} {
		mv, ok := a.RLvsSFT[name]
		if !ok {
			continue
		}
		gain := mv.DeltaAvgL
		if mv.TrainOn == TrainOnPlayers {
			f.GainPlayers = &gain
		} else {
			f.GainUserAgent = &gain
		}
	}
	if f.GainUserAgent != nil || f.GainPlayers != nil {
		f.Pass = f.GainUserAgent != nil && f.GainPlayers != nil && *f.GainPlayers > 0 && *f.GainUserAgent >= MinFidelity**f.GainPlayers
		a.Fidelity = f
	}
	if arm, base, _ := paired(res, VariantATGRPO, VariantGRPO); len(arm) > 0 {
		if c, err := rl.Compare(arm, base, depth, a.Bootstrap); err == nil {
			a.ATGRPOvsGRPO = &c
		}
	}
	return a
}

// verdict compares the variant name with SFT only.
func verdict(res *Results, name string, depth int, bs rl.BootstrapConfig) (MethodVerdict, bool) {
	arm, base, seeds := paired(res, name, VariantSFT)
	if len(arm) == 0 {
		return MethodVerdict{}, false
	}
	c, err := rl.Compare(arm, base, depth, bs)
	if err != nil {
		return MethodVerdict{}, false
	}
	mv := MethodVerdict{Comparison: c, Seeds: len(arm)}
	var pplArm, pplBase float64
	for _, r := range res.Rows {
		if !slices.Contains(seeds, r.Seed) {
			continue
		}
		switch r.Variant {
		case name:
			pplArm += r.PPL
			mv.TrainOn = r.TrainOn
		case VariantSFT:
			pplBase += r.PPL
		}
	}
	if pplBase > 0 {
		mv.PPLRatio = pplArm / pplBase
	}
	for s := range arm {
		d := 0
		for i := range arm[s] {
			d += arm[s][i].Length - base[s][i].Length
		}
		if d > 0 {
			mv.SeedsPositive++
		}
	}
	mv.DeltaPass = mv.DeltaAvgL >= MinDeltaAvgL
	mv.CIPass = mv.CILow > 0
	mv.SeedsPass = mv.SeedsPositive == mv.Seeds
	mv.PPLPass = mv.PPLRatio > 0 && mv.PPLRatio <= MaxPPLRatio
	mv.Pass = mv.DeltaPass && mv.CIPass && mv.SeedsPass && mv.PPLPass
	return mv, true
}

// paired returns the held-out dialogues of variants a and b for every seed
// both were evaluated with on the same openings, and those seeds.
func paired(res *Results, a, b string) (arm, base [][]rl.Outcome, seeds []int) {
	held := func(name string, seed int) []rl.Outcome {
		for _, r := range res.Rows {
			if r.Variant == name && r.Seed == seed {
				return r.HeldOut
			}
		}
		return nil
	}
	for seed := 1; seed <= res.Seeds; seed++ {
		x, y := held(a, seed), held(b, seed)
		if len(x) == 0 || len(x) != len(y) {
			continue
		}
		arm, base, seeds = append(arm, x), append(base, y), append(seeds, seed)
	}
	return arm, base, seeds
}

// writeAcceptance renders the acceptance as Markdown.
func writeAcceptance(w io.Writer, a *Acceptance) {
	if a == nil {
		return
	}
	fmt.Fprintf(w, "## Acceptance (issue 15)\n\n")
	if r := a.Referee; r == nil {
		fmt.Fprintf(w, "Referee gate: not measured by this run (null in results.json).\n\n")
	} else {
		fmt.Fprintf(w, "Referee gate before any RL (%d sibling groups, %d ranked, %d dialogues): Kendall τ-b %.3f [%.3f, %.3f], "+
			"Pearson %.3f (within groups %.3f), simulated/real Avg.L %.2f/%.2f = %.3f (expected lengths %.2f/%.2f = %.3f); pass: %v (%s). "+
			"%.0f %% of the players' hazard varies within the groups.\n\n",
			r.Groups, r.RankedGroups, r.Dialogues, r.KendallTau, r.KendallTauCILow, r.KendallTauCIHigh,
			r.Pearson, r.PearsonWithin, r.SimAvgL, r.RealAvgL, r.SimRealAvgL, r.SimExpL, r.RealExpL, r.SimRealExpL, r.Pass, r.Reason, 100*r.HazardWithinShare)
	}
	fmt.Fprintf(w, "RL against SFT only on the held-out players, paired dialogue by dialogue within each seed; "+
		"%.0f %% intervals from %d bootstrap resamples of the players. Pass: Δ Avg.L ≥ %+.2f, CI low > 0, every seed "+
		"positive, PPL ratio ≤ %.2f. Exp.L is the expected length from the hazards (survival product).\n\n",
		100*a.Bootstrap.Level, a.Bootstrap.Resamples, MinDeltaAvgL, MaxPPLRatio)
	fmt.Fprintf(w, "| method | trained on | Δ Avg.L [CI] | Δ Exp.L [CI] | seeds positive | PPL ratio | pass |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	names := make([]string, 0, len(a.RLvsSFT))
	for n := range a.RLvsSFT {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		m := a.RLvsSFT[n]
		fmt.Fprintf(w, "| %s | %s | %+.3f [%+.3f, %+.3f] | %+.3f [%+.3f, %+.3f] | %d/%d | %.3f | %v |\n",
			n, m.TrainOn, m.DeltaAvgL, m.CILow, m.CIHigh, m.DeltaExpL, m.ExpCILow, m.ExpCIHigh, m.SeedsPositive, m.Seeds, m.PPLRatio, m.Pass)
	}
	fmt.Fprintf(w, "\nAt least one method trained against the user agent passes: %v.\n\n", a.RLvsSFTPass)
	if f := a.Fidelity; f != nil {
		fmt.Fprintf(w, "Fidelity (%s): gain against the user agent %s, on the players %s; pass (≥ %.0f %% of the players' gain): %v.\n\n",
			f.Method, optional(f.GainUserAgent), optional(f.GainPlayers), 100*MinFidelity, f.Pass)
	}
	if c := a.ATGRPOvsGRPO; c != nil {
		fmt.Fprintf(w, "AT-GRPO − GRPO: Δ Avg.L %+.3f [%+.3f, %+.3f], Δ Exp.L %+.3f [%+.3f, %+.3f] (%d dialogues, %d players).\n\n",
			c.DeltaAvgL, c.CILow, c.CIHigh, c.DeltaExpL, c.ExpCILow, c.ExpCIHigh, c.Dialogues, c.Players)
	}
}

func optional(x *float64) string {
	if x == nil {
		return "–"
	}
	return fmt.Sprintf("%+.3f", *x)
}
