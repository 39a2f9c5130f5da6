package rl

import (
	"context"
	"fmt"
	"math"
)

// EvalResult summarises dialogues of a policy with an environment.
type EvalResult struct {
	Dialogues int `json:"dialogues"`
	// AvgL is the mean number of exchanges until termination or L;
	// AvgR the mean over dialogues of Σ_k r_k. The Std fields are their
	// standard deviations over dialogues.
	AvgL float64 `json:"avg_l"`
	StdL float64 `json:"std_l"`
	AvgR float64 `json:"avg_r"`
	StdR float64 `json:"std_r"`
	// NPCTurns are the policy's turns, for diversity metrics.
	NPCTurns []string `json:"-"`
}

// Evaluate plays each prompt once for up to depth exchanges, one sampled
// NPC turn per exchange, every dialogue of a depth in one batch.
func Evaluate(ctx context.Context, policy Policy, env Environment, prompts []Prompt, depth int, step int) (EvalResult, error) {
	type live struct {
		st     State
		length int
		ret    float64
	}
	ds := make([]*live, len(prompts))
	for i := range prompts {
		ds[i] = &live{st: State{Prompt: &prompts[i]}}
	}
	res := EvalResult{Dialogues: len(prompts)}
	active := ds
	for d := 1; d <= depth && len(active) > 0; d++ {
		states := make([]State, len(active))
		for i, x := range active {
			states[i] = x.st
		}
		gens, err := policy.GenerateBatch(ctx, states)
		if err != nil {
			return res, fmt.Errorf("evaluate depth %d: %w", d, err)
		}
		turns := make([]Turn, len(active))
		for i := range active {
			turns[i] = Turn{State: states[i], NPC: gens[i].Text}
			res.NPCTurns = append(res.NPCTurns, gens[i].Text)
		}
		replies, err := env.Respond(ctx, step, turns)
		if err != nil {
			return res, fmt.Errorf("evaluate depth %d: %w", d, err)
		}
		if len(gens) != len(active) || len(replies) != len(active) {
			return res, fmt.Errorf("evaluate depth %d: %w", d, ErrShortBatch)
		}
		next := active[:0:0]
		for i, x := range active {
			x.length = d
			if replies[i].Terminated {
				continue
			}
			x.ret += replies[i].Reward
			h := append(append([]Exchange(nil), x.st.History...), Exchange{NPC: gens[i].Text, User: replies[i].Text, Risk: replies[i].P})
			x.st = State{Prompt: x.st.Prompt, History: h}
			next = append(next, x)
		}
		active = next
	}
	ls := make([]float64, len(ds))
	rs := make([]float64, len(ds))
	for i, x := range ds {
		ls[i], rs[i] = float64(x.length), x.ret
	}
	res.AvgL, res.StdL = MeanStd(ls)
	res.AvgR, res.StdR = MeanStd(rs)
	return res, nil
}

// MeanStd returns the mean and the sample standard deviation (0 for fewer
// than two values).
func MeanStd(xs []float64) (mean, std float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	v := 0.0
	for _, x := range xs {
		v += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(v / float64(len(xs)-1))
}
