package rl

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// TestMatchLengthRecoversShift plays dialogues whose end logits are known,
// each player's own and not depending on the path, sampled at δ = 0 as Evaluate samples
// them, and asks for the length the same players would reach with their
// logits 0.6 higher or 0.4 lower, computed exactly: MatchLength finds the
// shift from the sampled dialogues alone.
func TestMatchLengthRecoversShift(t *testing.T) {
	const n, depth = 4000, 6
	rng := rand.New(rand.NewPCG(7, 11))
	logits := make([][]float64, n)
	ds := make([]Outcome, n)
	for i := range ds {
		logits[i] = make([]float64, depth)
		player := -2 + 1.2*rng.NormFloat64() // some players quit far sooner than others
		for k := range logits[i] {
			logits[i][k] = player + 0.3*rng.NormFloat64()
		}
		for k := range depth {
			p := hazardAt(logits[i][k], 0)
			ds[i].Hazards = append(ds[i].Hazards, p)
			ds[i].Length = k + 1
			if rng.Float64() < p {
				break
			}
		}
	}
	exact := func(delta float64) float64 {
		sum := 0.0
		for i := range logits {
			survive := 1.0
			for k := range depth {
				sum += survive
				survive *= 1 - hazardAt(logits[i][k], delta)
			}
		}
		return sum / n
	}
	if got, want := ShiftedLength(ds, depth, 0), exact(0); math.Abs(got-want) > 0.05 {
		t.Errorf("ShiftedLength at 0 = %v; want the players' exact expected length %v", got, want)
	}
	for _, shift := range []float64{0.6, -0.4} {
		target := exact(shift)
		got, err := MatchLength(ds, depth, target)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got-shift) > 0.1 {
			t.Errorf("MatchLength to %.3f exchanges (exact at δ %.1f; sampled at 0: %.3f) = δ %.3f", target, shift, ExpectedLength(ds, depth), got)
		}
	}
	if got, err := MatchLength(ds, depth, ExpectedLength(ds, depth)); err != nil || math.Abs(got) > 1e-6 {
		t.Errorf("MatchLength to the sampled length itself = %v, %v; want 0", got, err)
	}
	if _, err := MatchLength(ds, depth, depth+1); !errors.Is(err, ErrLengthOutOfReach) {
		t.Errorf("MatchLength to more exchanges than the depth allows: %v; want ErrLengthOutOfReach", err)
	}
}

// hazardAt is the hazard p = 2·σ(logit + δ), capped at 1.
func hazardAt(logit, delta float64) float64 {
	return min(2/(1+math.Exp(-logit-delta)), 1)
}
