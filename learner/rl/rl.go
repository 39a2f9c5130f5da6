package rl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Algorithm names an RL method; all run on the same Trainer.
type Algorithm string

// Algorithms.
const (
	ATGRPO  Algorithm = "at-grpo"
	GRPO    Algorithm = "grpo"
	GSPO    Algorithm = "gspo"
	TreeRPO Algorithm = "treerpo"
)

// Algorithms lists every algorithm in report order.
func Algorithms() []Algorithm { return []Algorithm{GRPO, GSPO, TreeRPO, ATGRPO} }

// Config configures an RL run.
type Config struct {
	Algorithm Algorithm    `json:"algorithm"`
	Tree      TreeConfig   `json:"tree"`
	Update    UpdateConfig `json:"update"`
	// Batch is the number of trees (prompts) per step; Steps the run length.
	Batch int `json:"batch"`
	Steps int `json:"steps"`
	// Lambda is λ of the dynamic threshold α = 1 + λ·floor(step/10);
	// DynamicThreshold off keeps α = 1.
	Lambda           float64 `json:"lambda"`
	DynamicThreshold bool    `json:"dynamic_threshold"`
	// StyleDemos off hides the players' earlier dialogues from the user
	// agent.
	StyleDemos bool `json:"style_demos"`
	// Workers is the number of trees grown at once (their generation
	// requests share the engine's batches).
	Workers int    `json:"workers"`
	Seed    uint64 `json:"seed"`
}

// DefaultConfig returns the paper's AT-GRPO run: W=8, w=2, γ=2, ω=0.3,
// L=10, β=0.01, ε=0.2, λ=0.02, 32 trees per step, 100 steps, lr 1e-5.
func DefaultConfig() Config {
	return Config{
		Algorithm:        ATGRPO,
		Tree:             DefaultTreeConfig(),
		Update:           DefaultUpdateConfig(),
		Batch:            32,
		Steps:            100,
		Lambda:           0.02,
		DynamicThreshold: true,
		StyleDemos:       true,
		Workers:          32,
		Seed:             1,
	}
}

// WithAlgorithm returns c set up for algorithm a on the same budget:
// GRPO and GSPO grow chains (GSPO with sequence-level ratios), TreeRPO a
// full W-ary tree of depth 4 (the paper's L for TreeRPO), AT-GRPO the
// adaptive tree.
func (c Config) WithAlgorithm(a Algorithm) Config {
	c.Algorithm = a
	c.Update.SequenceLevel = a == GSPO
	switch a {
	case GRPO, GSPO:
		c.Tree.Shape = ShapeChain
	case TreeRPO:
		c.Tree.Shape = ShapeFull
		c.Tree.Depth = min(c.Tree.Depth, 4)
	case ATGRPO:
		c.Tree.Shape = ShapeAdaptive
	}
	return c
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	switch c.Algorithm {
	case ATGRPO, GRPO, GSPO, TreeRPO:
	default:
		return fmt.Errorf("rl config: algorithm %q unknown", c.Algorithm)
	}
	if c.Batch < 1 || c.Steps < 0 || c.Workers < 1 {
		return fmt.Errorf("rl config: batch %d, steps %d, workers %d out of range", c.Batch, c.Steps, c.Workers)
	}
	if c.Lambda < 0 {
		return fmt.Errorf("rl config: lambda %g is negative", c.Lambda)
	}
	if err := c.Tree.Validate(); err != nil {
		return fmt.Errorf("rl config: %w", err)
	}
	if err := c.Update.Validate(); err != nil {
		return fmt.Errorf("rl config: %w", err)
	}
	return nil
}

// EnvStep is the step whose dynamic threshold the environment applies at
// (0-based) training step: the step itself, or 0 (α = 1) when the
// threshold is off.
func (c Config) EnvStep(step int) int {
	if !c.DynamicThreshold {
		return 0
	}
	return step
}

// Alpha is the dynamic threshold at (0-based) step, 1 + λ·floor(step/10),
// or 1 when the threshold is off. The user agent computes it itself from
// EnvStep with its own λ; keep the two λ equal.
func (c Config) Alpha(step int) float64 {
	return 1 + c.Lambda*math.Floor(float64(c.EnvStep(step))/10)
}

// StepStats describe one RL step.
type StepStats struct {
	Step  int     `json:"step"`
	Alpha float64 `json:"alpha"`
	Trees int     `json:"trees"`
	// Nodes is the mean number of nodes per tree; GroupNodes the mean
	// number of trained (group) nodes per tree.
	Nodes      float64 `json:"nodes"`
	GroupNodes float64 `json:"group_nodes"`
	// Reward is the mean training reward 1 − P of the group nodes; Depth the
	// mean number of groups per tree (how deep the main trajectory went).
	Reward float64 `json:"reward"`
	Depth  float64 `json:"depth"`
	Loss   float64 `json:"loss"`
	KL     float64 `json:"kl"`
	// Seconds is the step's wall time; Rollout and Update its parts.
	Seconds float64 `json:"seconds"`
	Rollout float64 `json:"rollout_seconds"`
	Update  float64 `json:"update_seconds"`
}

// Trainer runs RL steps: grow a batch of trees with the policy against the
// environment, turn the group nodes into samples with their advantages,
// and update the policy.
type Trainer struct {
	cfg     Config
	builder *Builder
	updater *Updater
	logger  *slog.Logger
	rng     *rand.Rand
	step    int
}

// NewTrainer wires a run. The updater must update the model that policy
// samples from.
func NewTrainer(cfg Config, policy Policy, env Environment, updater *Updater, logger *slog.Logger) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b, err := NewBuilder(cfg.Tree, policy, env)
	if err != nil {
		return nil, err
	}
	if updater == nil {
		return nil, errors.New("new rl trainer: updater is required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Trainer{cfg: cfg, builder: b, updater: updater, logger: logger, rng: rand.New(rand.NewPCG(cfg.Seed, 0xa7))}, nil
}

// Config returns the run's configuration.
func (t *Trainer) Config() Config { return t.cfg }

// Steps is the number of steps taken.
func (t *Trainer) Steps() int { return t.step }

// Step takes one RL step on a batch drawn from pool (without replacement
// within the step, cycling when the pool is smaller than the batch).
func (t *Trainer) Step(ctx context.Context, pool []Prompt) (StepStats, []*Tree, error) {
	if len(pool) == 0 {
		return StepStats{}, nil, errors.New("rl step: empty prompt pool")
	}
	start := time.Now()
	st := StepStats{Step: t.step, Alpha: t.cfg.Alpha(t.step), Trees: t.cfg.Batch}
	prompts := make([]*Prompt, t.cfg.Batch)
	perm := t.rng.Perm(len(pool))
	for i := range prompts {
		p := pool[perm[i%len(pool)]]
		if !t.cfg.StyleDemos {
			p.Demos = nil
		}
		prompts[i] = &p
	}
	trees, err := t.grow(ctx, prompts, t.cfg.EnvStep(t.step))
	if err != nil {
		return st, nil, fmt.Errorf("rl step %d: %w", t.step, err)
	}
	st.Rollout = time.Since(start).Seconds()
	var samples []Sample
	rewardSum := 0.0
	for _, tr := range trees {
		st.Nodes += float64(tr.Nodes)
		st.Depth += float64(len(tr.Groups))
		for _, g := range tr.Groups {
			for j, n := range g.Nodes {
				rewardSum += n.Reply.Reward
				st.GroupNodes++
				if len(n.Gen.Tokens) == 0 {
					continue
				}
				samples = append(samples, Sample{Prompt: n.Gen.Prompt, Tokens: n.Gen.Tokens, Advantage: g.Advantages[j]})
			}
		}
	}
	if st.GroupNodes > 0 {
		st.Reward = rewardSum / st.GroupNodes
	}
	n := float64(len(trees))
	st.Nodes, st.GroupNodes, st.Depth = st.Nodes/n, st.GroupNodes/n, st.Depth/n
	us := time.Now()
	ust, err := t.updater.Update(ctx, samples, t.rng)
	if err != nil {
		return st, trees, fmt.Errorf("rl step %d: %w", t.step, err)
	}
	st.Update = time.Since(us).Seconds()
	st.Loss, st.KL = ust.Loss, ust.KL
	st.Seconds = time.Since(start).Seconds()
	t.step++
	t.logger.Info("rl step", "algorithm", t.cfg.Algorithm, "step", st.Step, "alpha", st.Alpha,
		"nodes", st.Nodes, "reward", st.Reward, "depth", st.Depth, "loss", st.Loss, "kl", st.KL,
		"seconds", st.Seconds)
	return st, trees, nil
}

// grow builds one tree per prompt, Workers at a time.
func (t *Trainer) grow(ctx context.Context, prompts []*Prompt, envStep int) ([]*Tree, error) {
	trees := make([]*Tree, len(prompts))
	errs := make([]error, len(prompts))
	seeds := make([]uint64, len(prompts))
	for i := range seeds {
		seeds[i] = t.rng.Uint64()
	}
	sem := make(chan struct{}, t.cfg.Workers)
	var wg sync.WaitGroup
	for i, p := range prompts {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			trees[i], errs[i] = t.builder.Build(ctx, p, envStep, rand.New(rand.NewPCG(seeds[i], uint64(i))))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return trees, nil
}
