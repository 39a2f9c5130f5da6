package rl

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/parleyhq/parley/simulator"
)

// MaxLengthShift bounds the shift MatchLength may return.
const MaxLengthShift = 4.0

// ErrLengthOutOfReach is MatchLength's error when no shift within
// ±MaxLengthShift meets the length asked for.
var ErrLengthOutOfReach = errors.New("no shift within reach meets the length")

// LengthMatch is what MatchSessions measured: Sessions logged sessions,
// counted up to Depth exchanges, lasted LoggedAvgL on average; their
// openings played against the user agent gave Sim; Shift is the offset
// under which those would last LoggedAvgL (0 when none would).
type LengthMatch struct {
	Sessions   int        `json:"sessions"`
	Depth      int        `json:"depth"`
	LoggedAvgL float64    `json:"logged_avg_l"`
	Sim        EvalResult `json:"sim"`
	Shift      float64    `json:"shift"`
}

// MatchSessions plays prompts, the openings of logged sessions that
// lasted lengths exchanges, with policy against the user agent env up to
// depth exchanges (Evaluate at step 0), and finds the shift of the user
// agent's end logit under which they would last as long as the sessions
// did, counted up to depth (MatchLength). The user agent's players, whose
// messages it writes itself there, may stay longer or leave sooner than
// the logged players, whose messages its calibration was fitted on.
func MatchSessions(ctx context.Context, policy Policy, env Environment, prompts []Prompt, lengths []int, depth int) (LengthMatch, error) {
	m := LengthMatch{Sessions: len(prompts), Depth: depth}
	if len(prompts) == 0 || len(lengths) != len(prompts) {
		return m, fmt.Errorf("match sessions: %d openings and %d lengths", len(prompts), len(lengths))
	}
	for _, l := range lengths {
		m.LoggedAvgL += float64(min(l, depth)) / float64(len(lengths))
	}
	var err error
	if m.Sim, err = Evaluate(ctx, policy, env, prompts, depth, 0); err != nil {
		return m, fmt.Errorf("match sessions: %w", err)
	}
	m.Shift, err = MatchLength(m.Sim.Outcomes, depth, m.LoggedAvgL)
	return m, err
}

// Summary says what the match measured and found.
func (m LengthMatch) Summary() string {
	return fmt.Sprintf("%d sessions up to %d exchanges: simulated %.2f (expected %.2f) against %.2f logged, offset %+.2f",
		m.Sessions, m.Depth, m.Sim.AvgL, m.Sim.ExpL, m.LoggedAvgL, m.Shift)
}

// MatchLength returns the shift δ of the user agent's end logit (an
// offset added to its calibration) under which the dialogues ds, played
// against it at δ = 0 (Evaluate at step 0), would last target exchanges
// on average up to depth. Their expected length under δ (ShiftedLength)
// falls as δ grows, and a bisection finds where it meets target. It fails
// with ErrLengthOutOfReach when no δ within ±MaxLengthShift comes within
// 0.01 exchanges of target.
func MatchLength(ds []Outcome, depth int, target float64) (float64, error) {
	lo, hi := -MaxLengthShift, MaxLengthShift
	if longest, shortest := ShiftedLength(ds, depth, lo), ShiftedLength(ds, depth, hi); target > longest+0.01 || target < shortest-0.01 {
		return 0, fmt.Errorf("match length: %.2f exchanges lies outside the %.2f to %.2f that shifts within ±%g give: %w", target, shortest, longest, MaxLengthShift, ErrLengthOutOfReach)
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
	return expectedLength(ds, nil, depth, delta)
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
