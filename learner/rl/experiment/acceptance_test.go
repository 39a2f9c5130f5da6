package experiment

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/parleyhq/parley/learner/rl"
)

// syntheticResults has two seeds of SFT only, GRPO (+1 exchange on every
// held-out dialogue), AT-GRPO (+0.5: every other dialogue) against the user
// agent and AT-GRPO on the players (+1), 100 players of two dialogues.
func syntheticResults() *Results {
	p := TinyProfile()
	p.Methods = []rl.Algorithm{rl.GRPO, rl.ATGRPO}
	p.Ablations = false
	res := &Results{Profile: p, Seeds: 2, TrainOn: TrainOnUserAgent, Variants: Variants(p)}
	held := func(gain func(i int) int) []rl.Outcome {
		var out []rl.Outcome
		for i := range 200 {
			out = append(out, rl.Outcome{Player: fmt.Sprint("p", i/2), Length: 1 + i%2 + gain(i), Hazards: []float64{0.3}})
		}
		return out
	}
	for seed := 1; seed <= 2; seed++ {
		res.Rows = append(res.Rows,
			Row{Variant: VariantSFT, Seed: seed, PPL: 4, HeldOut: held(func(int) int { return 0 })},
			Row{Variant: VariantGRPO, Seed: seed, PPL: 4.2, TrainOn: TrainOnUserAgent, HeldOut: held(func(int) int { return 1 })},
			Row{Variant: VariantATGRPO, Seed: seed, PPL: 4.8, TrainOn: TrainOnUserAgent, HeldOut: held(func(i int) int { return i % 2 })},
			Row{Variant: VariantOracle, Seed: seed, PPL: 4, TrainOn: TrainOnPlayers, HeldOut: held(func(int) int { return 1 })},
		)
	}
	return res
}

func TestAcceptanceJSON(t *testing.T) {
	res := syntheticResults()
	res.Acceptance = Accept(res)
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Acceptance map[string]json.RawMessage `json:"acceptance"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"referee", "rl_vs_sft", "rl_vs_sft_pass", "fidelity", "at_grpo_vs_grpo"} {
		if _, ok := doc.Acceptance[k]; !ok {
			t.Errorf("acceptance has no %q: %s", k, b)
		}
	}
	if got := string(doc.Acceptance["referee"]); got != "null" {
		t.Errorf("referee = %s; want null (the gate is not measured)", got)
	}
	var methods map[string]map[string]any
	if err := json.Unmarshal(doc.Acceptance["rl_vs_sft"], &methods); err != nil {
		t.Fatal(err)
	}
	grpo := methods[VariantGRPO]
	for _, k := range []string{"delta_avg_l", "ci_low", "ci_high", "seeds_positive", "seeds", "ppl_ratio", "delta_exp_l", "delta_pass", "ci_pass", "seeds_pass", "ppl_pass", "pass"} {
		if _, ok := grpo[k]; !ok {
			t.Errorf("rl_vs_sft.GRPO has no %q: %v", k, grpo)
		}
	}
	var fid map[string]any
	if err := json.Unmarshal(doc.Acceptance["fidelity"], &fid); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"gain_user_agent", "gain_players"} {
		if _, ok := fid[k]; !ok {
			t.Errorf("fidelity has no %q: %v", k, fid)
		}
	}
}

func TestAcceptanceVerdicts(t *testing.T) {
	a := Accept(syntheticResults())
	g := a.RLvsSFT[VariantGRPO]
	if g.DeltaAvgL != 1 || g.CILow != 1 || g.Seeds != 2 || g.SeedsPositive != 2 || math.Abs(g.PPLRatio-1.05) > 1e-12 || !g.Pass {
		t.Errorf("GRPO: %+v; want Δ 1, CI low 1, 2/2 seeds, PPL ratio 1.05, pass", g)
	}
	at := a.RLvsSFT[VariantATGRPO]
	if at.DeltaAvgL != 0.5 || at.PPLPass || at.Pass || !at.DeltaPass || !at.CIPass {
		t.Errorf("AT-GRPO: %+v; want Δ 0.5 passing, PPL ratio 1.2 failing, no pass", at)
	}
	if !a.RLvsSFTPass {
		t.Error("rl_vs_sft_pass false; want true (GRPO passes against the user agent)")
	}
	if o := a.RLvsSFT[VariantOracle]; o.TrainOn != TrainOnPlayers {
		t.Errorf("oracle trained on %q; want %q", o.TrainOn, TrainOnPlayers)
	}
	f := a.Fidelity
	if f == nil || f.GainUserAgent == nil || f.GainPlayers == nil || *f.GainUserAgent != 0.5 || *f.GainPlayers != 1 || !f.Pass {
		t.Errorf("fidelity %+v; want 0.5 against 1, pass (half the players' gain)", f)
	}
	if c := a.ATGRPOvsGRPO; c == nil || c.DeltaAvgL != -0.5 || c.CIHigh >= 0 {
		t.Errorf("AT-GRPO − GRPO = %+v; want −0.5 with CI below 0", c)
	}
	md := Markdown(&Results{Profile: TinyProfile(), Acceptance: a})
	if !strings.Contains(md, "## Acceptance") || !strings.Contains(md, "| GRPO | user-agent | +1.000") {
		t.Errorf("Markdown lacks the acceptance table:\n%s", md)
	}
}
