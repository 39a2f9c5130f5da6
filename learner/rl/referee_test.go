package rl

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/parleyhq/parley/simulator"
)

func TestKendallTauB(t *testing.T) {
	tests := []struct {
		name string
		x, y []float64
		want float64
		ok   bool
	}{
		{"same order", []float64{1, 2, 3, 4}, []float64{10, 20, 30, 40}, 1, true},
		{"reversed", []float64{1, 2, 3, 4}, []float64{4, 3, 2, 1}, -1, true},
		// C = 2, D = 1 of 3 pairs.
		{"one swap", []float64{1, 2, 3}, []float64{1, 3, 2}, 1.0 / 3, true},
		// One pair tied in x, another in y: C = 4, D = 0, (6−1)(6−1) = 25.
		{"ties on each side", []float64{1, 1, 2, 3}, []float64{1, 2, 2, 3}, 0.8, true},
		// The pair tied on both sides counts in n₁ and n₂: −2/√(2·2).
		{"pair tied on both sides", []float64{1, 1, 2}, []float64{5, 5, 1}, -1, true},
		// SciPy's kendalltau documentation example: C = 2, D = 6, n₁ = 2, n₂ = 1, −4/√72.
		{"scipy example", []float64{12, 2, 1, 12, 2}, []float64{1, 4, 7, 1, 0}, -4 / math.Sqrt(72), true},
		{"x constant", []float64{2, 2, 2}, []float64{1, 2, 3}, 0, false},
		{"y constant", []float64{1, 2, 3}, []float64{0.5, 0.5, 0.5}, 0, false},
		{"one value", []float64{1}, []float64{1}, 0, false},
		{"lengths differ", []float64{1, 2}, []float64{1, 2, 3}, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := KendallTauB(tc.x, tc.y)
			if ok != tc.ok || math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("KendallTauB(%v, %v) = %v, %v; want %v, %v", tc.x, tc.y, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestRefereeReportPass(t *testing.T) {
	good := RefereeReport{KendallTau: 0.35, KendallTauCILow: 0.25, KendallTauCIHigh: 0.45, Pearson: 0.7, SimRealAvgL: 1.02, Groups: 300, RankedGroups: 280}
	with := func(f func(*RefereeReport)) RefereeReport { r := good; f(&r); return r }
	th := DefaultRefereeThresholds()
	tests := []struct {
		name string
		r    RefereeReport
		prev *RefereeReport
		want bool
		why  string
	}{
		{"passes without a current agent", good, nil, true, "τ 0.350"},
		{"τ too low", with(func(r *RefereeReport) { r.KendallTau = 0.29 }), nil, false, "τ 0.290 < 0.30"},
		{"CI low on the line", with(func(r *RefereeReport) { r.KendallTauCILow = 0.20 }), nil, false, "CI low"},
		{"Pearson too low", with(func(r *RefereeReport) { r.Pearson = 0.59 }), nil, false, "Pearson 0.590"},
		{"simulated players quit early", with(func(r *RefereeReport) { r.SimRealAvgL = 0.74 }), nil, false, "sim/real Avg.L 0.740"},
		{"simulated players stay long", with(func(r *RefereeReport) { r.SimRealAvgL = 1.11 }), nil, false, "outside"},
		{"no ranked group", with(func(r *RefereeReport) { r.RankedGroups, r.KendallTau, r.KendallTauCILow = 0, 0, 0 }), nil, false, "τ 0.000 < 0.30"},
		{"better than the current", good, &RefereeReport{KendallTau: 0.31, Pearson: 0.6, SimRealAvgL: 0.95}, true, ""},
		{"within tolerance of the current", good, &RefereeReport{KendallTau: 0.365, Pearson: 0.71, SimRealAvgL: 1.01}, true, ""},
		{"τ fell", good, &RefereeReport{KendallTau: 0.40, Pearson: 0.7, SimRealAvgL: 1.0}, false, "τ fell from 0.400 to 0.350"},
		{"Pearson fell", good, &RefereeReport{KendallTau: 0.35, Pearson: 0.75, SimRealAvgL: 1.0}, false, "Pearson fell"},
		{"Avg.L ratio moved away from 1", with(func(r *RefereeReport) { r.SimRealAvgL = 0.93 }), &RefereeReport{KendallTau: 0.35, Pearson: 0.7, SimRealAvgL: 0.98}, false, "moved from 0.980 to 0.930"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := tc.r.Pass(tc.prev, th)
			if ok != tc.want || !strings.Contains(why, tc.why) {
				t.Errorf("Pass = %v (%s); want %v with %q", ok, why, tc.want, tc.why)
			}
		})
	}
	loose := RefereeThresholds{MinKendallTau: -1, MinKendallTauCILow: -2, MinPearson: -1, MinSimRealAvgL: 0, MaxSimRealAvgL: 100, Tolerance: 1}
	if ok, why := with(func(r *RefereeReport) { r.KendallTau, r.KendallTauCILow, r.Pearson = 0.05, -0.1, 0.1 }).Pass(&good, loose); !ok {
		t.Errorf("loose thresholds refused: %s", why)
	}
}

// scriptedEnv answers every turn with the P its text names ("p=0.25"),
// never terminating unless terminate is set; it records the risks of the
// histories it saw.
type scriptedEnv struct {
	terminate bool
	mu        sync.Mutex
	risks     map[string][]float64 // NPC turn judged → risks of its history
}

func (e *scriptedEnv) Respond(_ context.Context, _ int, turns []Turn) ([]Reply, error) {
	out := make([]Reply, len(turns))
	for i, t := range turns {
		var p float64
		if _, err := fmt.Sscanf(t.NPC[strings.Index(t.NPC, "p=")+2:], "%g", &p); err != nil {
			return nil, err
		}
		out[i] = Reply{Text: "go on", P: p, Reward: 1 - p, Terminated: e.terminate}
		var rs []float64
		for _, x := range t.State.History {
			rs = append(rs, x.Risk)
		}
		e.mu.Lock()
		if e.risks == nil {
			e.risks = map[string][]float64{}
		}
		e.risks[t.NPC] = rs
		e.mu.Unlock()
	}
	return out, nil
}

// tablePolicy writes the i-th turn of a batch as turns[i mod len(turns)].
type tablePolicy struct{ turns []string }

func (p tablePolicy) GenerateBatch(_ context.Context, states []State) ([]Generation, error) {
	out := make([]Generation, len(states))
	for i := range states {
		out[i] = Generation{Text: p.turns[i%len(p.turns)]}
	}
	return out, nil
}

// TestJudgeHandComputed judges one group of four siblings whose hazards
// and user-agent probabilities are set by hand, players who never leave
// and a user agent that ends every dialogue after its first turn.
func TestJudgeHandComputed(t *testing.T) {
	ctx := context.Background()
	cfg := RefereeConfig{Groups: 1, Siblings: 4, MaxContext: 0, Dialogues: 2, Depth: 4, Resamples: 100, Parallel: 2, Seed: 1}
	prompts := []Prompt{{ID: "a", Opening: "hi"}, {ID: "b", Opening: "hello"}}
	hazards := tablePolicy{[]string{"players p=0.1", "players p=0.2", "players p=0.2", "players p=0.4"}}
	s, err := SampleReferee(ctx, cfg, hazards, &scriptedEnv{}, prompts)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Groups[0].Hazards; fmt.Sprint(got) != "[0.1 0.2 0.2 0.4]" || s.RealAvgL != 4 {
		t.Fatalf("sample: hazards %v, real Avg.L %v; want [0.1 0.2 0.2 0.4] and 4", got, s.RealAvgL)
	}
	// The user agent sees the same turns; its p comes from a second table
	// through the turn text, so rewrite the sample's turns.
	uaP := []string{"0.3", "0.3", "0.5", "0.6"}
	for i := range s.Groups[0].Turns {
		s.Groups[0].Turns[i] = "ua p=" + uaP[i]
	}
	rep, err := s.Judge(ctx, tablePolicy{[]string{"ua p=0.5"}}, &scriptedEnv{terminate: true})
	if err != nil {
		t.Fatal(err)
	}
	// τ-b: C = 4, D = 0, one pair tied on each side: 4/√(5·5); one group,
	// so the CI is τ itself. Pearson: Σdxdy = 0.0475, Σdx² = 0.0475,
	// Σdy² = 0.0675.
	for _, v := range []struct {
		name      string
		got, want float64
	}{
		{"kendall_tau", rep.KendallTau, 0.8}, {"kendall_tau_ci_low", rep.KendallTauCILow, 0.8},
		{"kendall_tau_ci_high", rep.KendallTauCIHigh, 0.8}, {"pearson", rep.Pearson, math.Sqrt(0.0475 / 0.0675)},
		// One group: the deviations are the series less their means, and
		// the group means are one point.
		{"pearson_within", rep.PearsonWithin, math.Sqrt(0.0475 / 0.0675)}, {"pearson_between", rep.PearsonBetween, 0},
		{"hazard_within_share", rep.HazardWithinShare, 1},
		{"sim_real_avg_l", rep.SimRealAvgL, 0.25}, {"sim_avg_l", rep.SimAvgL, 1}, {"real_avg_l", rep.RealAvgL, 4},
		// Expected lengths: the players' two dialogues get the turns "p=0.1"
		// and "p=0.2" at every exchange, so h̄ is 0.15 over four; the user
		// agent's p is 0.5 after the first turn, which ends both.
		{"real_exp_l", rep.RealExpL, 1 + 0.85 + 0.85*0.85 + 0.85*0.85*0.85}, {"sim_exp_l", rep.SimExpL, 1.5},
		{"sim_real_exp_l", rep.SimRealExpL, 1.5 / (1 + 0.85 + 0.85*0.85 + 0.85*0.85*0.85)},
	} {
		if math.Abs(v.got-v.want) > 1e-12 {
			t.Errorf("%s = %v; want %v", v.name, v.got, v.want)
		}
	}
	if rep.Groups != 1 || rep.RankedGroups != 1 || rep.Turns != 4 || rep.Dialogues != 2 {
		t.Errorf("counts: %d groups, %d ranked, %d turns, %d dialogues; want 1, 1, 4, 2", rep.Groups, rep.RankedGroups, rep.Turns, rep.Dialogues)
	}
}

// TestJudgeSplitsPearson judges two groups whose siblings the user agent
// ranks backwards in one and rightly in the other, while it rates the
// riskier group lower: Pearson within groups 0, between them −1. The
// hazards 0.1, 0.3 | 0.5, 0.7 vary 0.04 of 0.2 (sums of squares) within
// the groups.
func TestJudgeSplitsPearson(t *testing.T) {
	ctx := context.Background()
	cfg := RefereeConfig{Groups: 2, Siblings: 2, MaxContext: 0, Dialogues: 1, Depth: 1, Resamples: 10, Parallel: 1, Seed: 1}
	s, err := SampleReferee(ctx, cfg, tablePolicy{[]string{"p=0.1", "p=0.3", "p=0.5", "p=0.7"}}, &scriptedEnv{}, []Prompt{{ID: "a", Opening: "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	s.Groups[0].Turns = []string{"ua p=0.4", "ua p=0.2"}
	s.Groups[1].Turns = []string{"ua p=0.1", "ua p=0.3"}
	rep, err := s.Judge(ctx, tablePolicy{[]string{"p=0.1"}}, &scriptedEnv{})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(rep.PearsonWithin) > 1e-12 || math.Abs(rep.PearsonBetween+1) > 1e-12 {
		t.Errorf("Pearson within %v, between %v; want 0 and -1", rep.PearsonWithin, rep.PearsonBetween)
	}
	if math.Abs(rep.HazardWithinShare-0.2) > 1e-12 {
		t.Errorf("hazard within share %v; want 0.2", rep.HazardWithinShare)
	}
}

// TestJudgeShowsTheUserAgentsOwnRisks checks that a context's past NPC
// turns carry the judged user agent's p, never the players' hidden hazard.
func TestJudgeShowsTheUserAgentsOwnRisks(t *testing.T) {
	ctx := context.Background()
	cfg := RefereeConfig{Groups: 2, Siblings: 2, MaxContext: 1, Dialogues: 1, Depth: 1, Resamples: 10, Parallel: 1, Seed: 1}
	// Group 1 gets one exchange of context: the policy's first turn, which
	// the players rate 0.9 and the user agent (same text) also 0.9, so
	// rewrite it after sampling to a text the user agent rates 0.05.
	s, err := SampleReferee(ctx, cfg, tablePolicy{[]string{"x p=0.9", "y p=0.1"}}, &scriptedEnv{}, []Prompt{{ID: "a", Opening: "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(s.Groups[1].State.History); n != 1 {
		t.Fatalf("group 1 has %d exchanges of context; want 1", n)
	}
	s.Groups[1].State.History[0].NPC = "context p=0.05"
	s.Groups[1].Turns = []string{"sib0 p=0.2", "sib1 p=0.3"}
	ua := &scriptedEnv{}
	if _, err := s.Judge(ctx, tablePolicy{[]string{"eval p=0.1"}}, ua); err != nil {
		t.Fatal(err)
	}
	for _, turn := range s.Groups[1].Turns {
		if got := ua.risks[turn]; len(got) != 1 || got[0] != 0.05 {
			t.Errorf("the user agent judged %q after risks %v; want [0.05], its own p of the context turn", turn, got)
		}
	}
	if r := s.Groups[1].State.History[0].Risk; r != 0 {
		t.Errorf("judging wrote risk %v into the shared sample", r)
	}
}

// scriptedPolicy answers each state with a scripted NPC of the quality
// that the state's index in its batch picks, so siblings differ in quality.
type scriptedPolicy struct{ npcs []*simulator.ScriptedNPC }

func (p scriptedPolicy) GenerateBatch(_ context.Context, states []State) ([]Generation, error) {
	out := make([]Generation, len(states))
	for i, st := range states {
		last := st.Prompt.Opening
		if n := len(st.History); n > 0 {
			last = st.History[n-1].User
		}
		text, _ := p.npcs[i%len(p.npcs)].Reply(last)
		out[i] = Generation{Text: text}
	}
	return out, nil
}

// scriptedPlayers is a population of size players (seed), a policy of the
// scripted NPCs of every quality, and one opening prompt per player with
// sampling seeds from seedBase.
func scriptedPlayers(t *testing.T, size int, seed, seedBase uint64) (*simulator.Population, scriptedPolicy, []Prompt) {
	t.Helper()
	pcfg := simulator.DefaultPopulationConfig()
	pcfg.Size = size
	pop, err := simulator.NewPopulation(pcfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	var pol scriptedPolicy
	for i, q := range simulator.Qualities() {
		npc, err := simulator.NewScriptedNPC(pop, q, simulator.DefaultScriptConfig(), uint64(i)+1)
		if err != nil {
			t.Fatal(err)
		}
		pol.npcs = append(pol.npcs, npc)
	}
	var prompts []Prompt
	for i, p := range pop.Players() {
		prompts = append(prompts, PlayerPrompt(p, seedBase+uint64(i), "", ""))
	}
	return pop, pol, prompts
}

// TestRefereeOfThePlayersThemselves judges the players by themselves: a
// user agent that is the hidden hazard ranks every group perfectly.
func TestRefereeOfThePlayersThemselves(t *testing.T) {
	ctx := context.Background()
	pop, pol, prompts := scriptedPlayers(t, 30, 5, 100)
	cfg := RefereeConfig{Groups: 40, Siblings: 8, MaxContext: 3, Dialogues: 30, Depth: 6, Resamples: 200, Parallel: 4, Seed: 1}
	players := NewPlayerEnv(pop)
	s, err := SampleReferee(ctx, cfg, pol, players, prompts)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Judge(ctx, pol, players)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("players judged by themselves: %+v", rep)
	if rep.RankedGroups < cfg.Groups/2 || rep.KendallTau != 1 || rep.KendallTauCILow != 1 || math.Abs(rep.Pearson-1) > 1e-9 {
		t.Errorf("report %+v; want τ 1 with its CI, Pearson 1, most groups ranked", rep)
	}
	if rep.RealAvgL < 1 || rep.SimRealAvgL < 0.7 || rep.SimRealAvgL > 1.3 {
		t.Errorf("real Avg.L %.2f, sim/real %.2f; want dialogues and a ratio near 1", rep.RealAvgL, rep.SimRealAvgL)
	}
	if ok, why := rep.Pass(nil, DefaultRefereeThresholds()); !ok && !strings.Contains(why, "sim/real") {
		t.Errorf("the players themselves fail the gate: %s", why)
	}
}
