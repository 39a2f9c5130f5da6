package rl

import (
	"fmt"
	"math"

	"github.com/parleyhq/parley/simulator"
)

// MaxLengthShift bounds the shift MatchLength may return.
const MaxLengthShift = 4.0

// MatchLength returns the shift δ of the user agent's end logit (an
// offset added to its calibration) under which the dialogues ds, played
// against it at δ = 0 (Evaluate at step 0), would last target exchanges
// on average up to depth. Their expected length under δ (ShiftedLength)
// falls as δ grows, and a bisection finds where it meets target. It fails
// when no δ within ±MaxLengthShift comes within 0.01 exchanges of target.
func MatchLength(ds []Outcome, depth int, target float64) (float64, error) {
	lo, hi := -MaxLengthShift, MaxLengthShift
	if longest, shortest := ShiftedLength(ds, depth, lo), ShiftedLength(ds, depth, hi); target > longest+0.01 || target < shortest-0.01 {
		return 0, fmt.Errorf("match length: %.2f exchanges lies outside the %.2f to %.2f that shifts within ±%g reach", target, shortest, longest, MaxLengthShift)
	}
	for range 60 {
		mid := (lo + hi) / 2
		if ShiftedLength(ds, depth, mid) > target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2, nil
}

// ShiftedLength is ExpectedLength of ds had the user agent's end logit
// been δ higher: each hazard p = 2·P_T (simulator.EndProbability at α 1)
// becomes 2·σ(logit P_T + δ), and each dialogue counts at exchange k by
// its likelihood ratio of reaching k under δ. The NPC's and the user
// agent's turns do not depend on δ, only which dialogues live to see
// them, so the dialogues played at δ = 0 stand in for those at any δ
// (importance sampling). At δ = 0 it is ExpectedLength.
func ShiftedLength(ds []Outcome, depth int, delta float64) float64 {
	weight := make([]float64, len(ds))
	for i := range weight {
		weight[i] = 1
	}
	survive, e := 1.0, 0.0
	for k := range depth {
		e += survive
		sum, total := 0.0, 0.0
		for i, d := range ds {
			if len(d.Hazards) <= k || weight[i] == 0 {
				continue
			}
			p := d.Hazards[k]
			q := shiftHazard(p, delta)
			sum += weight[i] * q
			total += weight[i]
			if p < 1 {
				weight[i] *= (1 - q) / (1 - p)
			} else {
				weight[i] = 0 // ended surely at δ = 0: nothing past k to weigh
			}
		}
		if total == 0 {
			break
		}
		survive *= 1 - sum/total
	}
	return e
}

// shiftHazard moves the hazard p = EndProbability(P_T, 1) to the one of
// logit P_T + δ; a capped p (P_T ≥ ½) is read as P_T = ½.
func shiftHazard(p, delta float64) float64 {
	if delta == 0 {
		return p
	}
	pt := min(max(p/2, 1e-12), 0.5)
	return simulator.EndProbability(1/(1+math.Exp(-math.Log(pt/(1-pt))-delta)), 1)
}
