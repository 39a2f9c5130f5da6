package rl

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
)

// tinyRun is a run small enough for the default test suite.
func tinyRun(a Algorithm) Config {
	c := DefaultConfig()
	c.Tree.W, c.Tree.Width, c.Tree.Depth = 4, 2, 3
	c.Batch, c.Workers, c.Steps = 2, 2, 1
	c.Update.Train.LearningRate = 1e-4
	c.Update.MiniBatch = 32
	return c.WithAlgorithm(a)
}

// TestOnTheRealEngine shares one small trained model and its engine
// between the tests that need them.
func TestOnTheRealEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a small model")
	}
	f := newFixture(t, 10)
	t.Run("every algorithm takes a step", func(t *testing.T) { testEveryAlgorithm(t, f) })
	t.Run("user agent siblings share one draw", func(t *testing.T) { testUserAgentSharedDraw(t, f) })
	t.Run("user agent end probabilities without replies", func(t *testing.T) { testEndProbabilitiesWithoutReplies(t, f) })
	// Last: it trains the model hard.
	t.Run("policy samples the updated weights", func(t *testing.T) { testPolicySamplesTheUpdatedWeights(t, f) })
}

func testEveryAlgorithm(t *testing.T, f *fixture) {
	pool := f.prompts(false, 8, 1)
	ctx := context.Background()
	for _, a := range Algorithms() {
		t.Run(string(a), func(t *testing.T) {
			cfg := tinyRun(a)
			pc := DefaultPolicyConfig()
			pc.Sampling.MaxTokens = 12
			pol, err := NewModelPolicy(f.engine, f.tok, f.model.Config().MaxSeq, pc)
			if err != nil {
				t.Fatal(err)
			}
			up, err := NewUpdater(f.model, cfg.Update)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := NewTrainer(cfg, pol, NewPlayerEnv(f.pop), up, nil)
			if err != nil {
				t.Fatal(err)
			}
			st, trees, err := tr.Step(ctx, pool)
			if err != nil {
				t.Fatal(err)
			}
			bound := float64(cfg.Tree.NodesWithoutTerminations())
			if st.Nodes < float64(cfg.Tree.W) || st.Nodes > bound {
				t.Errorf("%s: %.1f nodes per tree; want between W=%d and %g", a, st.Nodes, cfg.Tree.W, bound)
			}
			if st.Reward < 0 || st.Reward > 1 || st.KL < 0 {
				t.Errorf("%s: reward %g, KL %g; want reward in [0,1], KL ≥ 0", a, st.Reward, st.KL)
			}
			for _, tree := range trees {
				for _, g := range tree.Groups {
					for _, n := range g.Nodes {
						if len(n.Gen.Tokens) == 0 || len(n.Gen.Prompt) == 0 {
							t.Fatalf("%s: group node without tokens", a)
						}
					}
				}
			}
			t.Logf("%s: %.0f nodes/tree, reward %.3f, depth %.1f, %.2fs (rollout %.2fs, update %.2fs)",
				a, st.Nodes, st.Reward, st.Depth, st.Seconds, st.Rollout, st.Update)
		})
	}
}

// testPolicySamplesTheUpdatedWeights checks that the engine serving the
// policy sees the updater's steps: after training its greedy turn down, the
// policy's greedy turn changes.
func testPolicySamplesTheUpdatedWeights(t *testing.T, f *fixture) {
	pc := DefaultPolicyConfig()
	pc.Sampling.Temperature, pc.Sampling.MaxTokens = 0, 8
	pol, err := NewModelPolicy(f.engine, f.tok, f.model.Config().MaxSeq, pc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultUpdateConfig()
	cfg.Train.LearningRate, cfg.Beta = 1e-2, 0
	up, err := NewUpdater(f.model, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st := []State{{Prompt: &f.prompts(false, 1, 1)[0]}}
	before, err := pol.GenerateBatch(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	s := []Sample{{Prompt: before[0].Prompt, Tokens: before[0].Tokens, Advantage: -1}}
	for range 5 {
		if _, err := up.Update(ctx, s, rand.New(rand.NewPCG(1, 1))); err != nil {
			t.Fatal(err)
		}
	}
	after, err := pol.GenerateBatch(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(before[0].Tokens, after[0].Tokens) {
		t.Errorf("greedy turn %v unchanged after training it down; want the engine to serve the new weights", after[0].Tokens)
	}
}
