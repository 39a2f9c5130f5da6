package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/gateway/modelpool"
	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/rollout"
	"github.com/parleyhq/parley/schema"
)

// RolloutConfig sizes RunRollout.
type RolloutConfig struct {
	// Gateways is how many pools follow the rollout, each with its own
	// watcher, as separate gateway instances would.
	Gateways int `json:"gateways"`
	// Workers is how many request loops run against each gateway.
	Workers int `json:"workers"`
	// Swaps is how many canary-then-promote cycles run.
	Swaps int `json:"swaps"`
	// Steady is how long latency is measured before the first swap.
	Steady time.Duration `json:"steady"`
	// MaxTokens is the length of each request's greedy generation.
	MaxTokens int `json:"max_tokens"`
	// Model is the architecture of the versions (VocabSize is the
	// tokenizer's); three versions with different random weights are made.
	Model   inference.ModelConfig   `json:"model"`
	Backend inference.BackendConfig `json:"backend"`
	// Prefix is the Redis key prefix; WorkDir holds the registry.
	Prefix  string `json:"prefix"`
	WorkDir string `json:"-"`
}

// DefaultRolloutConfig is two gateways, two workers each, ten swaps of the
// default model.
func DefaultRolloutConfig() RolloutConfig {
	return RolloutConfig{Gateways: 2, Workers: 2, Swaps: 10, Steady: 3 * time.Second, MaxTokens: 8,
		Model: inference.DefaultModelConfig(), Backend: inference.DefaultBackendConfig(), Prefix: "parley-bench:"}
}

// Validate reports the first setting out of range.
func (c RolloutConfig) Validate() error {
	if c.Gateways < 1 || c.Workers < 1 || c.Swaps < 1 || c.MaxTokens < 1 || c.Steady <= 0 {
		return fmt.Errorf("rollout bench config: gateways %d, workers %d, swaps %d, max tokens %d and steady %v must be positive",
			c.Gateways, c.Workers, c.Swaps, c.MaxTokens, c.Steady)
	}
	if c.WorkDir == "" {
		return errors.New("rollout bench config: work dir is required")
	}
	return nil
}

// RolloutReport is what RunRollout measured; durations are in milliseconds.
type RolloutReport struct {
	Config RolloutConfig `json:"config"`
	// CanaryMS is from each canary change to every gateway serving it: the
	// background fetch, verification, load and warm-up.
	CanaryMS Summary `json:"canary_ms"`
	// PromoteMS is from each promote to every gateway serving it.
	PromoteMS Summary `json:"promote_ms"`
	// SteadyLatencyMS covers requests before the first swap; SwapLatencyMS
	// those that overlapped a canary load or a promote.
	SteadyLatencyMS Summary `json:"steady_latency_ms"`
	SwapLatencyMS   Summary `json:"swap_latency_ms"`
	Requests        int     `json:"requests"`
	Failed          int     `json:"failed"`
	FirstError      string  `json:"first_error,omitempty"`
}

// RunRollout measures hot swaps: it publishes three versions into a
// registry under WorkDir, starts Gateways pools that follow the rollout
// state in Redis through their own watchers, keeps Workers request loops
// busy on each, and makes Swaps canary (weight 50) then promote cycles.
// Each request takes the path of a gateway's: gateway.PoolRouter assigns
// the player's version, acquires its engine and generates through it.
func RunRollout(ctx context.Context, cfg RolloutConfig, rdb redis.UniversalClient, log *slog.Logger) (RolloutReport, error) {
	rep := RolloutReport{Config: cfg}
	if err := cfg.Validate(); err != nil {
		return rep, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	versions, store, err := rolloutRegistry(ctx, cfg)
	if err != nil {
		return rep, err
	}
	rcfg := rollout.DefaultConfig()
	rcfg.Prefix = cfg.Prefix
	rc, err := rollout.New(rdb, rcfg, log)
	if err != nil {
		return rep, err
	}
	deployment := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	if _, err := rc.Init(ctx, deployment, versions[0], "bench"); err != nil {
		return rep, err
	}

	ecfg := inference.DefaultEngineConfig()
	var pools []*modelpool.Pool[*inference.Engine]
	var bg sync.WaitGroup
	defer func() {
		cancel()
		bg.Wait()
		for _, p := range pools {
			p.Close()
		}
	}()
	for i := range cfg.Gateways {
		pcfg := modelpool.DefaultConfig()
		pcfg.WorkDir = filepath.Join(cfg.WorkDir, fmt.Sprintf("gw-%d", i))
		p, err := modelpool.New(pcfg, store, modelpool.InferenceFactory(cfg.Backend, ecfg, 4, log), log)
		if err != nil {
			return rep, err
		}
		pools = append(pools, p)
		bg.Go(func() { _ = p.Run(ctx) })
		bg.Go(func() { _ = rc.Watch(ctx, deployment, fmt.Sprintf("gw-%d", i), p.Apply) })
	}
	// awaitFleet waits until every pool serves gen and returns the time
	// since start (taken before the change was made).
	awaitFleet := func(gen int64, start time.Time) (time.Duration, error) {
		for _, p := range pools {
			err := p.Wait(ctx, func(s modelpool.Status) bool {
				return s.Serving.Generation >= gen && s.Serving.State != schema.PhasePaused || len(s.Failed) > 0
			})
			if err != nil {
				return 0, err
			}
			if st := p.Status(); len(st.Failed) > 0 {
				return 0, fmt.Errorf("generation %d refused: %v", gen, st.Failed)
			}
		}
		return time.Since(start), nil
	}
	if _, err := awaitFleet(1, time.Now()); err != nil {
		return rep, err
	}

	type sample struct {
		start, end time.Time
		err        error
	}
	var mu sync.Mutex
	var samples []sample
	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	for g, p := range pools {
		router := gateway.PoolRouter(p)
		for w := range cfg.Workers {
			load.Go(func() {
				for n := 0; loadCtx.Err() == nil; n++ {
					start := time.Now()
					err := rolloutRequest(loadCtx, router, fmt.Sprintf("p-%d-%d-%d", g, w, n), cfg.MaxTokens)
					if loadCtx.Err() != nil {
						return
					}
					mu.Lock()
					samples = append(samples, sample{start, time.Now(), err})
					mu.Unlock()
				}
			})
		}
	}

	select {
	case <-time.After(cfg.Steady):
	case <-ctx.Done():
	}
	swapsFrom := time.Now()
	type window struct{ from, to time.Time }
	var windows []window
	var canary, promote []time.Duration
	swapErr := func() error {
		for i := range cfg.Swaps {
			next := versions[(i+1)%len(versions)]
			from := time.Now()
			ch, err := rc.Canary(ctx, deployment, next, 50, "bench")
			if err != nil {
				return err
			}
			d, err := awaitFleet(ch.To.Generation, from)
			if err != nil {
				return err
			}
			canary = append(canary, d)
			windows = append(windows, window{from, time.Now()})
			from = time.Now()
			if ch, err = rc.Promote(ctx, deployment, "bench", "bench"); err != nil {
				return err
			}
			if d, err = awaitFleet(ch.To.Generation, from); err != nil {
				return err
			}
			promote = append(promote, d)
			windows = append(windows, window{from, time.Now()})
		}
		return nil
	}()
	stopLoad()
	load.Wait()
	if swapErr != nil {
		return rep, fmt.Errorf("rollout bench: %w", swapErr)
	}

	var steady, during []time.Duration
	for _, s := range samples {
		rep.Requests++
		if s.err != nil {
			rep.Failed++
			if rep.FirstError == "" {
				rep.FirstError = s.err.Error()
			}
			continue
		}
		d := s.end.Sub(s.start)
		if s.end.Before(swapsFrom) {
			steady = append(steady, d)
			continue
		}
		for _, w := range windows {
			if s.start.Before(w.to) && s.end.After(w.from) {
				during = append(during, d)
				break
			}
		}
	}
	rep.CanaryMS, rep.PromoteMS = summarize(canary), summarize(promote)
	rep.SteadyLatencyMS, rep.SwapLatencyMS = summarize(steady), summarize(during)
	return rep, nil
}

// rolloutRequest is one request of a new session of player, as the gateway
// serves it: assign, acquire the version's engine, generate, release.
func rolloutRequest(ctx context.Context, router gateway.Router, player string, maxTokens int) error {
	a, err := router.Assign(ctx, player)
	if err != nil {
		return err
	}
	gen, release, err := router.Acquire(ctx, a.PolicyVersion)
	if err != nil {
		return err
	}
	defer release()
	s, err := gen.Generate(ctx, gateway.GenerateRequest{Prompt: []int{1, 2, 3, 4}, MaxTokens: maxTokens, Stop: []int{}})
	if err != nil {
		return err
	}
	for _, ok := s.Next(); ok; _, ok = s.Next() {
	}
	_, err = s.Wait()
	return err
}

// rolloutRegistry publishes versions v1, v2 and v3 of cfg.Model (random
// weights, seeds 1–3) into a registry under cfg.WorkDir.
func rolloutRegistry(ctx context.Context, cfg RolloutConfig) ([]string, *registry.Local, error) {
	tok, err := inference.TrainTokenizer([]string{
		"Welcome, traveller! The inn has warm bread and cold ale.",
		"I have not seen the dragon since the winter. Ask the guard at the gate.",
	}, 300)
	if err != nil {
		return nil, nil, err
	}
	mcfg := cfg.Model
	mcfg.VocabSize = tok.VocabSize()
	store, err := registry.NewLocal(filepath.Join(cfg.WorkDir, "registry"))
	if err != nil {
		return nil, nil, err
	}
	versions := []string{"v1", "v2", "v3"}
	for i, v := range versions {
		if _, err := store.Manifest(ctx, "npc", v); err == nil {
			continue
		}
		m, err := inference.NewModel(mcfg, cfg.Backend, int64(i+1))
		if err != nil {
			return nil, nil, err
		}
		if err := publish(ctx, store, v, m, tok, filepath.Join(cfg.WorkDir, "build-"+v)); err != nil {
			return nil, nil, err
		}
	}
	return versions, store, nil
}
