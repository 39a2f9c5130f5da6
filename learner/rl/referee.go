package rl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"gonum.org/v1/gonum/stat"
)

// The referee gate measures how faithfully a user agent ranks and predicts
// the players' decision to end a conversation: on sibling groups (several
// NPC turns sampled from the serving policy in one context) the user
// agent's end probability p is set against the players' hidden hazard, and
// dialogues of the same policy against the user agent and against the
// players are compared by their length.

// RefereeConfig sizes the referee's measurement.
type RefereeConfig struct {
	// Groups sibling groups of Siblings candidate NPC turns each are
	// sampled. Group g starts from prompts[g mod len(prompts)] and has
	// g mod (MaxContext+1) exchanges of the policy with the players as its
	// context (fewer when the player ends the conversation first).
	Groups     int `json:"groups"`
	Siblings   int `json:"siblings"`
	MaxContext int `json:"max_context"`
	// Dialogues of the first prompts are played for up to Depth exchanges
	// against the players and against the user agent for Avg.L.
	Dialogues int `json:"dialogues"`
	Depth     int `json:"depth"`
	// Resamples is the number of bootstrap resamples of the groups behind
	// τ's 95 % confidence interval.
	Resamples int `json:"resamples"`
	// Parallel is how many groups the user agent judges at once.
	Parallel int    `json:"parallel"`
	Seed     uint64 `json:"seed"`
}

// DefaultRefereeConfig is the production measurement: 300 groups of 8
// siblings in contexts of 0 to 3 exchanges, 300 dialogues of up to 6
// exchanges, 1,000 bootstrap resamples.
func DefaultRefereeConfig() RefereeConfig {
	return RefereeConfig{Groups: 300, Siblings: 8, MaxContext: 3, Dialogues: 300, Depth: 6, Resamples: 1000, Parallel: 8, Seed: 1}
}

// Validate reports the first bad field.
func (c RefereeConfig) Validate() error {
	if c.Groups < 1 || c.Siblings < 2 || c.MaxContext < 0 || c.Dialogues < 1 || c.Depth < 1 || c.Resamples < 1 || c.Parallel < 1 {
		return fmt.Errorf("referee config: groups %d (≥1), siblings %d (≥2), max context %d (≥0), dialogues %d, depth %d, resamples %d and parallel %d (≥1) out of range",
			c.Groups, c.Siblings, c.MaxContext, c.Dialogues, c.Depth, c.Resamples, c.Parallel)
	}
	return nil
}

// RefereeThresholds is the referee gate's rule (issue 15's acceptance).
type RefereeThresholds struct {
	// The mean within-group Kendall τ-b must reach MinKendallTau and its
	// CI's lower end must lie above MinKendallTauCILow.
	MinKendallTau      float64 `json:"min_kendall_tau"`
	MinKendallTauCILow float64 `json:"min_kendall_tau_ci_low"`
	// The turn-level Pearson correlation must reach MinPearson.
	MinPearson float64 `json:"min_pearson"`
	// Simulated/real Avg.L must lie within [MinSimRealAvgL, MaxSimRealAvgL].
	MinSimRealAvgL float64 `json:"min_sim_real_avg_l"`
	MaxSimRealAvgL float64 `json:"max_sim_real_avg_l"`
	// Tolerance is how far τ and Pearson may fall below the current user
	// agent's, and how much further from 1 the Avg.L ratio may move, before
	// the new one counts as worse.
	Tolerance float64 `json:"tolerance"`
}

// DefaultRefereeThresholds are the production rule: τ ≥ 0.30 with CI low
// > 0.20, Pearson ≥ 0.6, simulated/real Avg.L within [0.9, 1.1], and
// nothing more than 0.02 worse than the current user agent.
func DefaultRefereeThresholds() RefereeThresholds {
	return RefereeThresholds{MinKendallTau: 0.30, MinKendallTauCILow: 0.20, MinPearson: 0.6,
		MinSimRealAvgL: 0.9, MaxSimRealAvgL: 1.1, Tolerance: 0.02}
}

// Validate reports thresholds that no report could meet.
func (t RefereeThresholds) Validate() error {
	if t.MinSimRealAvgL > t.MaxSimRealAvgL || t.Tolerance < 0 {
		return fmt.Errorf("referee thresholds: Avg.L ratio range [%g, %g] empty or tolerance %g negative", t.MinSimRealAvgL, t.MaxSimRealAvgL, t.Tolerance)
	}
	return nil
}

// RefereeReport is the referee's measurement of one user agent. A
// statistic the data cannot define (no group whose turns both sides rank,
// a constant series, no real dialogue) is 0.
type RefereeReport struct {
	// KendallTau is the mean over groups of Kendall's τ-b between the user
	// agent's p and the hidden hazard of the siblings; the CI is the
	// bootstrap percentile 95 % interval over groups.
	KendallTau       float64 `json:"kendall_tau"`
	KendallTauCILow  float64 `json:"kendall_tau_ci_low"`
	KendallTauCIHigh float64 `json:"kendall_tau_ci_high"`
	// Pearson is the correlation of p and the hidden hazard over every
	// sibling turn. It splits into PearsonWithin, the correlation of their
	// deviations from their group's mean (how well the agent tells one NPC
	// turn from its siblings), and PearsonBetween, that of the groups'
	// means (how well it reads the context and the player); the gate reads
	// Pearson alone.
	Pearson        float64 `json:"pearson"`
	PearsonWithin  float64 `json:"pearson_within"`
	PearsonBetween float64 `json:"pearson_between"`
	// HazardWithinShare is the share of the hidden hazard's variance that
	// lies within groups: how much the siblings differ for the players.
	// Near 0, no user agent can rank them and τ-b says nothing of it; a τ-b
	// near 0 beside a large share is an agent that cannot tell them apart.
	// It depends on the sample alone, not on the agent judged.
	HazardWithinShare float64 `json:"hazard_within_share"`
	// SimRealAvgL is SimAvgL/RealAvgL: the mean exchange length of the
	// policy's dialogues against the user agent over that against the
	// players, from the same openings. SimRealExpL is the same ratio of
	// expected lengths (ExpectedLength of each side's hazards), which
	// leaves out the noise of the termination draws; it is reported, and
	// the gate reads SimRealAvgL.
	SimRealAvgL float64 `json:"sim_real_avg_l"`
	SimAvgL     float64 `json:"sim_avg_l"`
	RealAvgL    float64 `json:"real_avg_l"`
	SimRealExpL float64 `json:"sim_real_exp_l"`
	SimExpL     float64 `json:"sim_exp_l"`
	RealExpL    float64 `json:"real_exp_l"`
	// Groups were sampled; RankedGroups of them have a defined τ-b (at
	// least two distinct values on each side) and make up KendallTau.
	Groups       int `json:"groups"`
	RankedGroups int `json:"ranked_groups"`
	Turns        int `json:"turns"`
	Dialogues    int `json:"dialogues"`
}

// Pass applies th to r and, when prev (the current user agent's report on
// the same sample) is given, requires r to be no worse than prev. reason
// lists every failed condition, or the values that passed.
func (r RefereeReport) Pass(prev *RefereeReport, th RefereeThresholds) (ok bool, reason string) {
	var fails []string
	failIf := func(bad bool, format string, args ...any) {
		if bad {
			fails = append(fails, fmt.Sprintf(format, args...))
		}
	}
	failIf(r.KendallTau < th.MinKendallTau, "τ %.3f < %.2f", r.KendallTau, th.MinKendallTau)
	failIf(r.KendallTauCILow <= th.MinKendallTauCILow, "τ CI low %.3f ≤ %.2f", r.KendallTauCILow, th.MinKendallTauCILow)
	failIf(r.Pearson < th.MinPearson, "Pearson %.3f < %.2f", r.Pearson, th.MinPearson)
	failIf(r.SimRealAvgL < th.MinSimRealAvgL || r.SimRealAvgL > th.MaxSimRealAvgL,
		"sim/real Avg.L %.3f outside [%.2f, %.2f]", r.SimRealAvgL, th.MinSimRealAvgL, th.MaxSimRealAvgL)
	if prev != nil {
		failIf(r.KendallTau < prev.KendallTau-th.Tolerance, "τ fell from %.3f to %.3f", prev.KendallTau, r.KendallTau)
		failIf(r.Pearson < prev.Pearson-th.Tolerance, "Pearson fell from %.3f to %.3f", prev.Pearson, r.Pearson)
		failIf(math.Abs(r.SimRealAvgL-1) > math.Abs(prev.SimRealAvgL-1)+th.Tolerance,
			"sim/real Avg.L moved from %.3f to %.3f", prev.SimRealAvgL, r.SimRealAvgL)
	}
	if len(fails) > 0 {
		return false, "referee: " + strings.Join(fails, "; ")
	}
	return true, fmt.Sprintf("referee: τ %.3f [%.3f, %.3f], Pearson %.3f, sim/real Avg.L %.3f (Exp.L %.3f)",
		r.KendallTau, r.KendallTauCILow, r.KendallTauCIHigh, r.Pearson, r.SimRealAvgL, r.SimRealExpL)
}

// EndScorer is an Environment that can give the termination probability
// of turns without answering them (no termination draw, no reply), such as
// UserAgentEnv. The judge needs p alone and uses it when it can.
type EndScorer interface {
	EndProbabilities(ctx context.Context, step int, turns []Turn) ([]float64, error)
}

// EndProbabilities is env's p for every turn at step 0: its EndScorer's
// when it has one (no replies generated), else the P of its replies.
func EndProbabilities(ctx context.Context, env Environment, turns []Turn) ([]float64, error) {
	if s, ok := env.(EndScorer); ok {
		ps, err := s.EndProbabilities(ctx, 0, turns)
		if err == nil && len(ps) != len(turns) {
			err = ErrShortBatch
		}
		return ps, err
	}
	replies, err := env.Respond(ctx, 0, turns)
	if err != nil {
		return nil, err
	}
	if len(replies) != len(turns) {
		return nil, ErrShortBatch
	}
	ps := make([]float64, len(replies))
	for i, r := range replies {
		ps[i] = r.P
	}
	return ps, nil
}

// SiblingGroup is one context and the candidate NPC turns sampled in it,
// with the players' hidden hazard after each.
type SiblingGroup struct {
	State   State     `json:"-"`
	Turns   []string  `json:"turns"`
	Hazards []float64 `json:"hazards"`
}

// RefereeSample is what the referee judges user agents on: the sibling
// groups and the openings of the Avg.L dialogues with their real length,
// sampled and expected. Judging several user agents on one sample pairs
// their reports.
type RefereeSample struct {
	Groups   []SiblingGroup
	Openings []Prompt
	RealAvgL float64
	RealExpL float64
	cfg      RefereeConfig
}

// SampleReferee plays the groups' contexts and samples their siblings with
// policy against players (an environment whose Reply.P is the hidden
// hazard, such as PlayerEnv), and plays the Avg.L dialogues against the
// players. The prompts name the players and carry the user agent's demos.
func SampleReferee(ctx context.Context, cfg RefereeConfig, policy Policy, players Environment, prompts []Prompt) (*RefereeSample, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(prompts) == 0 {
		return nil, errors.New("sample referee: no prompts")
	}
	states, err := contexts(ctx, cfg, policy, players, prompts)
	if err != nil {
		return nil, fmt.Errorf("sample referee: %w", err)
	}
	batch := make([]State, 0, len(states)*cfg.Siblings)
	for _, st := range states {
		for range cfg.Siblings {
			batch = append(batch, st)
		}
	}
	gens, err := policy.GenerateBatch(ctx, batch)
	if err != nil {
		return nil, fmt.Errorf("sample referee: siblings: %w", err)
	}
	turns := make([]Turn, len(batch))
	for i := range batch {
		turns[i] = Turn{State: batch[i], NPC: gens[i].Text}
	}
	replies, err := players.Respond(ctx, 0, turns)
	if err != nil {
		return nil, fmt.Errorf("sample referee: hazards: %w", err)
	}
	if len(gens) != len(batch) || len(replies) != len(batch) {
		return nil, fmt.Errorf("sample referee: siblings: %w", ErrShortBatch)
	}
	s := &RefereeSample{Groups: make([]SiblingGroup, len(states)), cfg: cfg}
	for g, st := range states {
		grp := SiblingGroup{State: st}
		for i := g * cfg.Siblings; i < (g+1)*cfg.Siblings; i++ {
			grp.Turns = append(grp.Turns, turns[i].NPC)
			grp.Hazards = append(grp.Hazards, replies[i].P)
		}
		s.Groups[g] = grp
	}
	s.Openings = prompts[:min(cfg.Dialogues, len(prompts))]
	real, err := Evaluate(ctx, policy, players, s.Openings, cfg.Depth, 0)
	if err != nil {
		return nil, fmt.Errorf("sample referee: real dialogues: %w", err)
	}
	s.RealAvgL, s.RealExpL = real.AvgL, real.ExpL
	return s, nil
}

// contexts plays each group's context: its prompt and up to its number of
// exchanges of policy with the players, level by level in one batch.
func contexts(ctx context.Context, cfg RefereeConfig, policy Policy, players Environment, prompts []Prompt) ([]State, error) {
	states := make([]State, cfg.Groups)
	for g := range states {
		states[g] = State{Prompt: &prompts[g%len(prompts)]}
	}
	for d := 1; d <= cfg.MaxContext; d++ {
		var live []int
		for g := range states {
			if g%(cfg.MaxContext+1) >= d && len(states[g].History) == d-1 {
				live = append(live, g)
			}
		}
		if len(live) == 0 {
			break
		}
		batch := make([]State, len(live))
		for i, g := range live {
			batch[i] = states[g]
		}
		gens, err := policy.GenerateBatch(ctx, batch)
		if err != nil {
			return nil, fmt.Errorf("context depth %d: %w", d, err)
		}
		turns := make([]Turn, len(live))
		for i := range live {
			turns[i] = Turn{State: batch[i], NPC: gens[i].Text}
		}
		replies, err := players.Respond(ctx, 0, turns)
		if err != nil {
			return nil, fmt.Errorf("context depth %d: %w", d, err)
		}
		if len(gens) != len(live) || len(replies) != len(live) {
			return nil, fmt.Errorf("context depth %d: %w", d, ErrShortBatch)
		}
		for i, g := range live {
			if replies[i].Terminated {
				continue
			}
			h := append(slices.Clip(states[g].History), Exchange{NPC: gens[i].Text, User: replies[i].Text})
			states[g] = State{Prompt: states[g].Prompt, History: h}
		}
	}
	return states, nil
}

// Judge measures the user agent ua (an environment whose Reply.P is its
// end probability, such as UserAgentEnv) on the sample, and plays the
// Avg.L dialogues of policy against it. Siblings and context turns are
// scored for p alone where ua is an EndScorer. Past NPC turns of a context carry
// ua's own p as their risk, as they would in a rollout against it.
func (s *RefereeSample) Judge(ctx context.Context, policy Policy, ua Environment) (RefereeReport, error) {
	rep := RefereeReport{Groups: len(s.Groups), Dialogues: len(s.Openings)}
	states, err := s.riskedContexts(ctx, ua)
	if err != nil {
		return rep, fmt.Errorf("judge: %w", err)
	}
	ps := make([][]float64, len(s.Groups))
	err = forEachParallel(ctx, len(s.Groups), s.cfg.Parallel, func(g int) error {
		grp := s.Groups[g]
		turns := make([]Turn, len(grp.Turns))
		for i, t := range grp.Turns {
			turns[i] = Turn{State: states[g], NPC: t}
		}
		p, err := EndProbabilities(ctx, ua, turns)
		if err != nil {
			return fmt.Errorf("group %d: %w", g, err)
		}
		ps[g] = p
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("judge: %w", err)
	}
	hs := s.hazards()
	var taus []float64
	for g := range hs {
		if tau, ok := KendallTauB(ps[g], hs[g]); ok {
			taus = append(taus, tau)
		}
	}
	allP, devP, meanP := splitGroups(ps)
	allH, devH, meanH := splitGroups(hs)
	rep.Turns, rep.RankedGroups = len(allP), len(taus)
	if len(taus) > 0 {
		rep.KendallTau = stat.Mean(taus, nil)
		// Groups are independent: each is its own cluster.
		groups := make([]string, len(taus))
		for i := range groups {
			groups[i] = strconv.Itoa(i)
		}
		mean := func(units []int) float64 {
			sum := 0.0
			for _, u := range units {
				sum += taus[u]
			}
			return sum / float64(len(units))
		}
		var err error
		rep.KendallTauCILow, rep.KendallTauCIHigh, err = ClusterBootstrap(groups, mean,
			BootstrapConfig{Resamples: s.cfg.Resamples, Level: 0.95, Seed: s.cfg.Seed})
		if err != nil {
			return rep, fmt.Errorf("judge: %w", err)
		}
	}
	rep.Pearson, rep.PearsonWithin, rep.PearsonBetween = correlation(allP, allH), correlation(devP, devH), correlation(meanP, meanH)
	rep.HazardWithinShare = withinShare(allH, devH)
	sim, err := Evaluate(ctx, policy, ua, s.Openings, s.cfg.Depth, 0)
	if err != nil {
		return rep, fmt.Errorf("judge: simulated dialogues: %w", err)
	}
	rep.SimAvgL, rep.RealAvgL = sim.AvgL, s.RealAvgL
	if s.RealAvgL > 0 {
		rep.SimRealAvgL = sim.AvgL / s.RealAvgL
	}
	rep.SimExpL, rep.RealExpL = sim.ExpL, s.RealExpL
	if s.RealExpL > 0 {
		rep.SimRealExpL = sim.ExpL / s.RealExpL
	}
	return rep, nil
}

// HazardWithinShare is the share of the hidden hazard's variance over
// every sibling turn that lies within the groups (RefereeReport).
func (s *RefereeSample) HazardWithinShare() float64 {
	all, dev, _ := splitGroups(s.hazards())
	return withinShare(all, dev)
}

// hazards are the groups' hidden hazards, group by group.
func (s *RefereeSample) hazards() [][]float64 {
	hs := make([][]float64, len(s.Groups))
	for g, grp := range s.Groups {
		hs[g] = grp.Hazards
	}
	return hs
}

// splitGroups returns every value of the groups, each one's deviation from
// its group's mean, and the group means.
func splitGroups(groups [][]float64) (all, dev, means []float64) {
	for _, g := range groups {
		m := stat.Mean(g, nil)
		means = append(means, m)
		for _, v := range g {
			all, dev = append(all, v), append(dev, v-m)
		}
	}
	return all, dev, means
}

// withinShare is the share of all's variance that dev, the deviations
// from the group means, keeps; 0 when all does not vary.
func withinShare(all, dev []float64) float64 {
	if v := stat.Variance(all, nil); v > 0 {
		return stat.Variance(dev, nil) / v
	}
	return 0
}

// riskedContexts copies the groups' contexts with each past NPC turn's
// risk set to ua's p after it, judged level by level.
func (s *RefereeSample) riskedContexts(ctx context.Context, ua Environment) ([]State, error) {
	states := make([]State, len(s.Groups))
	for g, grp := range s.Groups {
		states[g] = State{Prompt: grp.State.Prompt, History: slices.Clone(grp.State.History)}
	}
	for d := 1; d <= s.cfg.MaxContext; d++ {
		var at []int
		var turns []Turn
		for g, st := range states {
			if len(st.History) >= d {
				at = append(at, g)
				turns = append(turns, Turn{State: State{Prompt: st.Prompt, History: st.History[:d-1]}, NPC: st.History[d-1].NPC})
			}
		}
		if len(turns) == 0 {
			break
		}
		ps, err := EndProbabilities(ctx, ua, turns)
		if err != nil {
			return nil, fmt.Errorf("context risks at depth %d: %w", d, err)
		}
		for i, g := range at {
			states[g].History[d-1].Risk = ps[i]
		}
	}
	return states, nil
}

// correlation is Pearson's r of x and y, or 0 where it is undefined.
func correlation(x, y []float64) float64 {
	if r := stat.Correlation(x, y, nil); !math.IsNaN(r) {
		return r
	}
	return 0
}

// forEachParallel runs f(0..n-1) with at most parallel calls at once and
// returns the first error; after an error no new call starts.
func forEachParallel(ctx context.Context, n, parallel int, f func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(i); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// KendallTauB is Kendall's τ-b of x and y, which corrects for ties:
// (C − D) / √((n₀ − n₁)(n₀ − n₂)) with C and D the concordant and
// discordant pairs, n₀ = n(n−1)/2, and n₁, n₂ the pairs tied in x and in
// y. ok is false when it is undefined: fewer than two pairs, lengths that
// differ, or either series without two distinct values.
func KendallTauB(x, y []float64) (tau float64, ok bool) {
	n := len(x)
	if n != len(y) || n < 2 {
		return 0, false
	}
	var concordant, discordant, tiedX, tiedY int
	for i := range n {
		for j := i + 1; j < n; j++ {
			dx, dy := cmpFloat(x[i], x[j]), cmpFloat(y[i], y[j])
			switch {
			case dx == 0 && dy == 0:
				tiedX++
				tiedY++
			case dx == 0:
				tiedX++
			case dy == 0:
				tiedY++
			case dx == dy:
				concordant++
			default:
				discordant++
			}
		}
	}
	n0 := n * (n - 1) / 2
	if tiedX == n0 || tiedY == n0 {
		return 0, false
	}
	return float64(concordant-discordant) / math.Sqrt(float64(n0-tiedX)*float64(n0-tiedY)), true
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
