package abtest

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/parleyhq/parley/schema"
)

// TestPercentile checks the interpolated definition (numpy's default) at
// the points the benches report, on 1..10 given out of order.
func TestPercentile(t *testing.T) {
	for _, c := range []struct {
		q, want float64
	}{{0, 1}, {10, 1.9}, {50, 5.5}, {95, 9.55}, {99, 9.91}, {100, 10}} {
		xs := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
		if got := Percentile(xs, c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Percentile(1..10, %v) = %v; want %v", c.q, got, c.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil, 50) = %v; want 0", got)
	}
	if got := Percentile([]float64{7}, 99); got != 7 {
		t.Errorf("Percentile([7], 99) = %v; want 7", got)
	}
}

// tinyPlayers is PLAYERS of testdata/player_level.py: (arm, turns of each
// ended session, pre-exposure exchange length).
var tinyPlayers = []struct {
	arm   string
	turns []int
	pre   float64
}{
	{"stable", []int{3, 5}, 4}, {"stable", []int{2}, 2}, {"stable", []int{6, 4, 8}, 7}, {"stable", []int{1, 3}, 1},
	{"canary", []int{7}, 5}, {"canary", []int{4, 6}, 3}, {"canary", []int{9, 5, 7}, 8},
}

// tinySessions are tinyPlayers' sessions, player i's session k ending at
// minute 10i + k.
func tinySessions(withPre bool) ([]Session, map[string]float64) {
	var out []Session
	pre := map[string]float64{}
	for i, p := range tinyPlayers {
		id := fmt.Sprintf("p%d", i)
		if withPre {
			pre[id] = p.pre
		}
		for k, n := range p.turns {
			end := t0.Add(time.Duration(10*i+k) * time.Minute)
			out = append(out, Session{SessionID: fmt.Sprintf("%s-%d", id, k), PlayerID: id, ExperimentID: "e1", Arm: p.arm,
				Started: end.Add(-time.Minute), Ended: end, Turns: n, Reason: schema.EndPlayerEnded})
		}
	}
	return out, pre
}

func near(t *testing.T, name string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-12*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %.17g; want %.17g", name, got, want)
	}
}

// TestDeltaMethodAndCUPED checks the player-level ratio, its delta-method
// variance, CUPED's θ and the adjusted difference against
// testdata/player_level.py, which computes them from their definitions
// over players (not from running sums).
func TestDeltaMethodAndCUPED(t *testing.T) {
	sessions, pre := tinySessions(true)
	tally := Fold(sessions, pre, 0)
	// stable: players=4 ratio=4.0 delta_var=1.1666666666666667
	// canary: players=3 ratio=6.333333333333333 delta_var=0.4814814814814814
	s, c := tally.Stable.Turns, tally.Canary.Turns
	if s.N != 4 || c.N != 3 {
		t.Fatalf("players = %d stable, %d canary; want 4, 3", s.N, c.N)
	}
	near(t, "stable ratio", s.Mean(), 4.0)
	near(t, "stable delta var", s.Var(), 1.1666666666666667)
	near(t, "canary ratio", c.Mean(), 6.333333333333333)
	near(t, "canary delta var", c.Var(), 0.4814814814814814)
	// cuped: theta=0.6732673267326732 diff=1.099009900990099 var=0.21902899860943192 reduction=0.8671060008437155
	near(t, "CUPED θ", CUPEDTheta(s, c), 0.6732673267326732)
	cfg := Config{Alpha: 0.05, MixtureSD: 0.5, SeqMinPlayers: 3, GuardrailAlpha: 0.02}
	r := Judge(State{}, "e1", tally, cfg, t0.Add(time.Hour))
	near(t, "adjusted diff", r.AvgL.Diff, 1.099009900990099)
	near(t, "variance reduction", r.AvgL.VarianceReduction, 0.8671060008437155)
	// msprt: tau=0.2977873542058022 loglambda=0.6246276050314608 p=0.535460794300927 lo=-1.094617412046106 hi=3.2926372140263043
	near(t, "τ", r.AvgL.Seq.Tau, 0.2977873542058022)
	near(t, "log Λ", r.AvgL.Seq.LogLambda, 0.6246276050314608)
	near(t, "p", r.AvgL.Seq.P, 0.535460794300927)
	near(t, "lo", r.AvgL.Seq.Lo, -1.094617412046106)
	near(t, "hi", r.AvgL.Seq.Hi, 3.2926372140263043)

	// Without covariates the difference is the plain ratio difference.
	plain, _ := tinySessions(false)
	r, err := Update(State{}, "e1", plain, nil, cfg, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	near(t, "unadjusted diff", r.AvgL.Diff, 6.333333333333333-4.0)
	if r.AvgL.CUPEDTheta != 0 || r.AvgL.VarianceReduction != 0 {
		t.Errorf("θ %v, reduction %v without covariates; want 0, 0", r.AvgL.CUPEDTheta, r.AvgL.VarianceReduction)
	}
}

// TestRatioRemoveUndoesAdd: the incremental update leaves the sums exact.
func TestRatioRemoveUndoesAdd(t *testing.T) {
	var a, b ArmTally
	p := Player{Arm: schema.ArmStable, Sessions: 2, Turns: 9, Errors: 1, Exchanges: 9, Refused: 1}
	a.Add(Player{Arm: schema.ArmStable, Sessions: 1, Turns: 4, Exchanges: 4})
	b.Add(Player{Arm: schema.ArmStable, Sessions: 1, Turns: 4, Exchanges: 4})
	a.Add(Player{Arm: schema.ArmStable, Sessions: 1, Turns: 5, Exchanges: 5})
	a.Remove(Player{Arm: schema.ArmStable, Sessions: 1, Turns: 5, Exchanges: 5})
	a.Add(p)
	b.Add(p)
	if a.Players != 2 || !reflect.DeepEqual(a, b) {
		t.Errorf("after add, remove, add = %+v; want %+v", a, b)
	}
}

func TestSRM(t *testing.T) {
	// player_level.py: 9,000 stable and 1,200 canary players against a 10 %
	// canary share: chi2=35.294117647058826 p=2.8348699304881607e-09
	s := SRMTest(9000, 1200, 0.1)
	near(t, "χ²", s.ChiSq, 35.294117647058826)
	if math.Abs(s.P-2.8348699304881607e-09) > 1e-20 {
		t.Errorf("p = %g; want 2.8348699304881607e-09", s.P)
	}
	if !s.Checked || !s.Failed || s.SequentialP >= SRMSequentialAlpha {
		t.Errorf("SRM = %+v; want checked and failed", s)
	}
	// 9,000 and 1,000 is exactly the share; 9,000 and 1,100 is p 0.0028.
	if s := SRMTest(9000, 1000, 0.1); s.ChiSq != 0 || s.P != 1 || s.Failed {
		t.Errorf("exact share: %+v; want χ² 0, p 1, not failed", s)
	}
	if s := SRMTest(9000, 1100, 0.1); s.Failed || math.Abs(s.P-0.0028347490802593913) > 1e-15 {
		t.Errorf("9,000 / 1,100: %+v; want p 0.0028 and not failed", s)
	}
	if s := SRMTest(10, 5, 0); s.Checked || s.Failed {
		t.Errorf("no share: %+v; want unchecked", s)
	}
}

// TestSequentialState: τ is frozen at the first look, the p-value is the
// running minimum and the CI the running intersection, so a later look
// with weaker evidence (a late event, a restart) changes neither; an empty
// intersection never says Better.
func TestSequentialState(t *testing.T) {
	const alpha = 0.05
	var s Sequential
	if s = s.Look(1, 0, 0.5, alpha); s.Looks != 0 {
		t.Fatalf("a look without variance was taken: %+v", s)
	}
	s = s.Look(1.0, 0.04, 0.5, alpha)
	first := s
	// By hand: Λ = √(0.04/0.29)·exp(0.25·1/(2·0.04·0.29)) = e^{10.7758…−0.9905…}.
	near(t, "log Λ", s.LogLambda, 0.5*math.Log(0.04/0.29)+0.25/(2*0.04*0.29))
	near(t, "p", s.P, math.Exp(-s.LogLambda))
	hw := math.Sqrt(0.04 * 0.29 / 0.25 * (2*math.Log(20) + math.Log(0.29/0.04)))
	near(t, "lo", s.Lo, 1-hw)
	near(t, "hi", s.Hi, 1+hw)
	if !s.Better || s.Worse || s.Empty {
		t.Errorf("first look %+v; want better", s)
	}
	// A weaker second look with a different τ offered: τ, p and the CI's
	// bounds stay.
	s = s.Look(0.2, 0.05, 3, alpha)
	if s.Tau != 0.5 || s.P != first.P || s.Lo != first.Lo || s.Looks != 2 {
		t.Errorf("second look %+v; want τ 0.5, p %v and lo %v kept", s, first.P, first.Lo)
	}
	near(t, "hi after the second look", s.Hi, math.Min(first.Hi, 0.2+math.Sqrt(0.05*0.3/0.25*(2*math.Log(20)+math.Log(0.3/0.05)))))
	// A look far below empties the intersection: no longer Better.
	s = s.Look(-3, 0.01, 0, alpha)
	if !s.Empty || s.Better {
		t.Errorf("after a contradicting look %+v; want empty and not better", s)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Sequential
	if err := json.Unmarshal(b, &back); err != nil || back != s {
		t.Errorf("JSON round trip = %+v, %v; want %+v", back, err, s)
	}
}

// TestUpdateContinuesFromState: a report's State carries the tests to the
// next Update; a late event that weakens the evidence does not raise the
// reported p-value, and a state of another experiment is not reused.
func TestUpdateContinuesFromState(t *testing.T) {
	cfg := fixtureConfig()
	sessions := fixtureSessions()
	now := t0.Add(time.Hour)
	r1, err := Update(State{}, "e1", sessions, nil, cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(r1.State)
	var stored State
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatal(err)
	}
	late := append(slices.Clone(sessions), Session{SessionID: "late", PlayerID: "late", ExperimentID: "e1",
		Arm: schema.ArmCanary, Started: t0, Ended: t0, Turns: 1, Reason: schema.EndPlayerEnded})
	r2, err := Update(stored, "e1", late, nil, cfg, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if r2.AvgL.Seq.Looks != 2 || r2.AvgL.Seq.P != r1.AvgL.Seq.P || r2.AvgL.Seq.Tau != r1.AvgL.Seq.Tau || r2.AvgL.Seq.Lo < r1.AvgL.Seq.Lo {
		t.Errorf("after a late weak event: %+v; want 2 looks, p %v and τ %v kept, lo not lower than %v",
			r2.AvgL.Seq, r1.AvgL.Seq.P, r1.AvgL.Seq.Tau, r1.AvgL.Seq.Lo)
	}
	r3, err := Update(stored, "e2", late, nil, cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	if r3.AvgL.Seq.Looks != 1 || r3.State.ExperimentID != "e2" {
		t.Errorf("another experiment's state was continued: %+v", r3.AvgL.Seq)
	}
}
