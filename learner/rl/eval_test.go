package rl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
)

func TestExpectedLengthHandComputed(t *testing.T) {
	tests := []struct {
		name  string
		ds    []Outcome
		depth int
		want  float64
	}{
		// S_1 = 1; h̄_1 = (.2+.4)/2 = .3, S_2 = .7; h̄_2 = .5 (only A reached
		// exchange 2), S_3 = .35; nobody reached 3: E = 1 + .7 + .35.
		{"product-limit", []Outcome{{Length: 2, Hazards: []float64{0.2, 0.5}}, {Length: 1, Hazards: []float64{0.4}}}, 3, 2.05},
		// One dialogue played to L = 3 with hazards .1, .2, .3:
		// 1 + .9 + .9·.8.
		{"survival product", []Outcome{{Length: 3, Hazards: []float64{0.1, 0.2, 0.3}}}, 3, 1 + 0.9 + 0.72},
		{"capped at depth", []Outcome{{Length: 3, Hazards: []float64{0.1, 0.2, 0.3}}}, 2, 1.9},
		{"no dialogues", nil, 4, 1},
	}
	for _, tc := range tests {
		if got := ExpectedLength(tc.ds, tc.depth); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: ExpectedLength = %.6f; want %.6f", tc.name, got, tc.want)
		}
	}
}

func TestEvaluateRecordsOutcomes(t *testing.T) {
	// Turns t1.. are answered with p = .25; every third one ends.
	env := scriptEnv{reply: func(t Turn) Reply {
		var n int
		fmt.Sscanf(t.NPC, "t%d", &n)
		return Reply{Text: "u", P: 0.25, Reward: 0.75, Terminated: n%3 == 0}
	}}
	prompts := []Prompt{{ID: "a", PlayerID: "pa"}, {ID: "b", PlayerID: "pb"}}
	res, err := Evaluate(context.Background(), &countingPolicy{}, env, prompts, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Depth 1: t1 (a), t2 (b); depth 2: t3 (a ends), t4 (b); depth 3: t5 (b);
	// depth 4: t6 (b ends).
	want := []Outcome{{Player: "pa", Length: 2, Hazards: []float64{0.25, 0.25}}, {Player: "pb", Length: 4, Hazards: []float64{0.25, 0.25, 0.25, 0.25}}}
	if got := fmt.Sprint(res.Outcomes); got != fmt.Sprint(want) {
		t.Errorf("Outcomes = %s; want %s", got, fmt.Sprint(want))
	}
	if want := 1 + 0.75 + 0.75*0.75 + 0.75*0.75*0.75; math.Abs(res.ExpL-want) > 1e-12 || res.AvgL != 3 {
		t.Errorf("ExpL %.4f, AvgL %.2f; want %.4f, 3", res.ExpL, res.AvgL, want)
	}
}

// TestCompareKnownAnswer builds 400 players of two dialogues each whose
// paired difference is +1 for half the players and 0 for the others: the
// mean is 0.5 and, the players being the unit, the bootstrap's 95 %
// interval is about 0.5 ± 1.96·0.5/√400 = [0.451, 0.549] (over dialogues
// it would be √2 narrower).
func TestCompareKnownAnswer(t *testing.T) {
	var arm, base []Outcome
	for p := range 400 {
		for k := range 2 {
			b := 1 + (p+k)%4
			base = append(base, Outcome{Player: fmt.Sprint("p", p), Length: b})
			arm = append(arm, Outcome{Player: fmt.Sprint("p", p), Length: b + p%2})
		}
	}
	c, err := Compare([][]Outcome{arm}, [][]Outcome{base}, 6, DefaultBootstrapConfig())
	if err != nil {
		t.Fatal(err)
	}
	if c.DeltaAvgL != 0.5 || c.Dialogues != 800 || c.Players != 400 {
		t.Errorf("delta %g over %d dialogues of %d players; want 0.5, 800, 400", c.DeltaAvgL, c.Dialogues, c.Players)
	}
	if math.Abs(c.CILow-0.451) > 0.012 || math.Abs(c.CIHigh-0.549) > 0.012 {
		t.Errorf("CI [%.3f, %.3f]; want about [0.451, 0.549]", c.CILow, c.CIHigh)
	}
	// Identical arms: every difference is zero.
	z, err := Compare([][]Outcome{base, base}, [][]Outcome{base, base}, 6, DefaultBootstrapConfig())
	if err != nil {
		t.Fatal(err)
	}
	if z.DeltaAvgL != 0 || z.CILow != 0 || z.CIHigh != 0 || z.DeltaExpL != 0 || z.ExpCILow != 0 || z.ExpCIHigh != 0 {
		t.Errorf("identical arms: %+v; want all zero", z)
	}
	if _, err := Compare([][]Outcome{arm}, [][]Outcome{base[:10]}, 6, DefaultBootstrapConfig()); !errors.Is(err, ErrUnpaired) {
		t.Errorf("Compare of 800 with 10 dialogues: error %v; want ErrUnpaired", err)
	}
}

// TestCompareExpectedLength checks the expected-length difference: an arm
// whose first hazard is .2 against a base at .6, one exchange deep
// beyond, gives (1 + .8) − (1 + .4) = .4 on every resample.
func TestCompareExpectedLength(t *testing.T) {
	var arm, base []Outcome
	for p := range 50 {
		arm = append(arm, Outcome{Player: fmt.Sprint(p), Length: 1, Hazards: []float64{0.2}})
		base = append(base, Outcome{Player: fmt.Sprint(p), Length: 1, Hazards: []float64{0.6}})
	}
	c, err := Compare([][]Outcome{arm}, [][]Outcome{base}, 2, DefaultBootstrapConfig())
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(c.DeltaExpL-0.4) > 1e-12 || math.Abs(c.ExpCILow-0.4) > 1e-12 || math.Abs(c.ExpCIHigh-0.4) > 1e-12 {
		t.Errorf("expected-length delta %g [%g, %g]; want 0.4 [0.4, 0.4]", c.DeltaExpL, c.ExpCILow, c.ExpCIHigh)
	}
}
