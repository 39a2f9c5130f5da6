package rl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/parleyhq/parley/rollout/abtest"
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
	// ExpL is the expected length estimated from the hazards
	// (ExpectedLength of Outcomes), beside the sampled AvgL.
	ExpL float64 `json:"exp_l"`
	// Outcomes are the dialogues in prompt order, for paired comparisons
	// (Compare) of two policies on the same prompts.
	Outcomes []Outcome `json:"-"`
	// NPCTurns are the policy's turns, for diversity metrics.
	NPCTurns []string `json:"-"`
}

// Outcome is one evaluated dialogue: its player, its sampled length and
// the termination probability p the user acted on after each of its NPC
// turns (Hazards[k−1] after turn k, one per exchange played).
type Outcome struct {
	Player  string    `json:"player"`
	Length  int       `json:"l"`
	Hazards []float64 `json:"h"`
}

// ExpectedLength estimates the expected number of exchanges of dialogues
// capped at depth from their hazards, by the survival product:
//
//	E[L] = Σ_{k=1}^{depth} S_k,   S_1 = 1,   S_{k+1} = S_k·(1 − h̄_k),
//
// where h̄_k is the mean hazard after turn k over the dialogues that reached
// exchange k (the product-limit estimate of P(reach k+1 | reach k)). Every
// dialogue contributes its hazard at each exchange it played, not only its
// 0/1 ending, so the estimate varies far less than the sampled mean length.
func ExpectedLength(ds []Outcome, depth int) float64 {
	return expectedLength(ds, nil, depth, 0)
}

// expectedLength is ShiftedLength over ds[idx] (every dialogue when idx
// is nil), each index counted as often as it appears.
func expectedLength(ds []Outcome, idx []int, depth int, delta float64) float64 {
	n := len(ds)
	if idx != nil {
		n = len(idx)
	}
	at := func(i int) Outcome {
		if idx != nil {
			return ds[idx[i]]
		}
		return ds[i]
	}
	weight := make([]float64, n)
	for i := range weight {
		weight[i] = 1
	}
	survive, e := 1.0, 0.0
	for k := range depth {
		e += survive
		sum, total := 0.0, 0.0
		for i := range n {
			h := at(i).Hazards
			if len(h) <= k || weight[i] == 0 {
				continue
			}
			p := h[k]
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

// Evaluate plays each prompt once for up to depth exchanges, one sampled
// NPC turn per exchange, every dialogue of a depth in one batch.
func Evaluate(ctx context.Context, policy Policy, env Environment, prompts []Prompt, depth int, step int) (EvalResult, error) {
	type live struct {
		st      State
		length  int
		ret     float64
		hazards []float64
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
			x.hazards = append(x.hazards, replies[i].P)
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
	res.Outcomes = make([]Outcome, len(ds))
	for i, x := range ds {
		ls[i], rs[i] = float64(x.length), x.ret
		res.Outcomes[i] = Outcome{Player: prompts[i].PlayerID, Length: x.length, Hazards: x.hazards}
	}
	res.AvgL, res.StdL = MeanStd(ls)
	res.AvgR, res.StdR = MeanStd(rs)
	res.ExpL = ExpectedLength(res.Outcomes, depth)
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

// BootstrapConfig sizes a percentile bootstrap.
type BootstrapConfig struct {
	Resamples int     `json:"resamples"`
	Level     float64 `json:"level"`
	Seed      uint64  `json:"seed"`
}

// DefaultBootstrapConfig is 2,000 resamples for a 95 % interval.
func DefaultBootstrapConfig() BootstrapConfig {
	return BootstrapConfig{Resamples: 2000, Level: 0.95, Seed: 1}
}

// Validate reports the first bad field.
func (c BootstrapConfig) Validate() error {
	if c.Resamples < 1 || c.Level <= 0 || c.Level >= 1 {
		return fmt.Errorf("bootstrap config: %d resamples, level %g: want at least one and a level in (0, 1)", c.Resamples, c.Level)
	}
	return nil
}

// ClusterBootstrap is the percentile bootstrap interval of stat over units
// grouped in clusters (clusters[i] is unit i's): each resample draws as
// many clusters as there are, with replacement, and passes stat the units
// of the drawn clusters (a unit appears once per draw of its cluster).
// Units of one cluster (a player's dialogues) are correlated, clusters are
// not, so the interval is taken over clusters.
func ClusterBootstrap(clusters []string, stat func(units []int) float64, cfg BootstrapConfig) (low, high float64, err error) {
	if err := cfg.Validate(); err != nil {
		return 0, 0, err
	}
	if len(clusters) == 0 {
		return 0, 0, errors.New("bootstrap: no units")
	}
	var names []string
	members := map[string][]int{}
	for i, c := range clusters {
		if _, ok := members[c]; !ok {
			names = append(names, c)
		}
		members[c] = append(members[c], i)
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xb007))
	stats := make([]float64, cfg.Resamples)
	var units []int
	for r := range stats {
		units = units[:0]
		for range names {
			units = append(units, members[names[rng.IntN(len(names))]]...)
		}
		stats[r] = stat(units)
	}
	tail := 100 * (1 - cfg.Level) / 2
	return abtest.Percentile(stats, tail), abtest.Percentile(stats, 100-tail), nil
}

// Comparison is an arm against a base on the same held-out dialogues
// (arm − base): the mean paired difference of the sampled lengths and the
// difference of the expected lengths (ExpectedLength), each with a
// percentile bootstrap interval over players.
type Comparison struct {
	DeltaAvgL float64 `json:"delta_avg_l"`
	CILow     float64 `json:"ci_low"`
	CIHigh    float64 `json:"ci_high"`
	DeltaExpL float64 `json:"delta_exp_l"`
	ExpCILow  float64 `json:"exp_ci_low"`
	ExpCIHigh float64 `json:"exp_ci_high"`
	// Dialogues counts the pairs, Players the clusters resampled.
	Dialogues int `json:"dialogues"`
	Players   int `json:"players"`
}

// ErrUnpaired is returned by Compare for evaluations that did not play the
// same dialogues.
var ErrUnpaired = errors.New("rl: evaluations are not paired")

// Compare pairs arm[s] with base[s] dialogue by dialogue for every run s
// (a seed: both evaluated on the same prompts, in the same order, with the
// same sampling seeds) and returns arm − base averaged over the runs, with
// intervals from a bootstrap over the players (ClusterBootstrap: a drawn
// player brings its dialogues of every run). depth is the evaluation's L.
func Compare(arm, base [][]Outcome, depth int, cfg BootstrapConfig) (Comparison, error) {
	if len(arm) == 0 || len(arm) != len(base) {
		return Comparison{}, fmt.Errorf("compare %d runs with %d: %w", len(arm), len(base), ErrUnpaired)
	}
	var clusters []string
	var run, pos []int // unit → its run and its dialogue in the run
	for s := range arm {
		if len(arm[s]) == 0 || len(arm[s]) != len(base[s]) {
			return Comparison{}, fmt.Errorf("compare run %d: %d dialogues with %d: %w", s, len(arm[s]), len(base[s]), ErrUnpaired)
		}
		for i, o := range arm[s] {
			if o.Player != base[s][i].Player {
				return Comparison{}, fmt.Errorf("compare run %d dialogue %d: player %q with %q: %w", s, i, o.Player, base[s][i].Player, ErrUnpaired)
			}
			clusters = append(clusters, o.Player)
			run, pos = append(run, s), append(pos, i)
		}
	}
	// split gives each run's dialogues among units, as indexes.
	split := func(units []int) [][]int {
		out := make([][]int, len(arm))
		for _, u := range units {
			out[run[u]] = append(out[run[u]], pos[u])
		}
		return out
	}
	avgL := func(units []int) float64 {
		d := 0.0
		for _, u := range units {
			d += float64(arm[run[u]][pos[u]].Length - base[run[u]][pos[u]].Length)
		}
		return d / float64(max(len(units), 1))
	}
	expL := func(units []int) float64 {
		d, n := 0.0, 0
		for s, idx := range split(units) {
			if len(idx) == 0 {
				continue
			}
			d += expectedLength(arm[s], idx, depth, 0) - expectedLength(base[s], idx, depth, 0)
			n++
		}
		return d / float64(max(n, 1))
	}
	all := make([]int, len(clusters))
	for i := range all {
		all[i] = i
	}
	c := Comparison{DeltaAvgL: avgL(all), DeltaExpL: expL(all), Dialogues: len(all)}
	players := map[string]bool{}
	for _, p := range clusters {
		players[p] = true
	}
	c.Players = len(players)
	var err error
	if c.CILow, c.CIHigh, err = ClusterBootstrap(clusters, avgL, cfg); err != nil {
		return c, fmt.Errorf("compare: %w", err)
	}
	if c.ExpCILow, c.ExpCIHigh, err = ClusterBootstrap(clusters, expL, cfg); err != nil {
		return c, fmt.Errorf("compare: %w", err)
	}
	return c, nil
}
