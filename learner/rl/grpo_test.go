package rl

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/parleyhq/parley/inference"
)

// tinyModel is a real transformer small enough for unit tests.
func tinyModel(t testing.TB, seed int64) *inference.Model {
	t.Helper()
	c := inference.DefaultModelConfig()
	c.VocabSize, c.Dim, c.Layers, c.Heads, c.FFNDim, c.MaxSeq = 64, 32, 2, 2, 64, 64
	m, err := inference.NewModel(c, inference.DefaultBackendConfig(), seed)
	if err != nil {
		t.Fatalf("NewModel: %v", err)
	}
	return m
}

func sum(xs []float32) float64 {
	s := 0.0
	for _, x := range xs {
		s += float64(x)
	}
	return s
}

// twoGroupSamples is two groups of two responses to one prompt each, with
// advantages of both signs and two sizes.
func twoGroupSamples() []Sample {
	return []Sample{
		{Prompt: []int{1, 2, 3, 4}, Tokens: []int{5, 6, 7}, Advantage: 1},
		{Prompt: []int{1, 2, 3, 4}, Tokens: []int{8, 9, 10, 11}, Advantage: -1},
		{Prompt: []int{1, 2, 12}, Tokens: []int{20, 21}, Advantage: 0.5},
		{Prompt: []int{1, 2, 12}, Tokens: []int{30, 31, 32}, Advantage: -0.5},
	}
}

func TestUpdateMovesLogProbsWithTheAdvantage(t *testing.T) {
	samples := twoGroupSamples()
	for _, seqLevel := range []bool{false, true} {
		name := map[bool]string{false: "GRPO token ratio", true: "GSPO sequence ratio"}[seqLevel]
		t.Run(name, func(t *testing.T) {
			m := tinyModel(t, 3)
			cfg := DefaultUpdateConfig()
			cfg.Train.LearningRate = 3e-3
			cfg.SequenceLevel = seqLevel
			cfg.MiniBatch = 2 // two optimiser steps: the second one sees ratios ≠ 1
			u, err := NewUpdater(m, cfg)
			if err != nil {
				t.Fatal(err)
			}
			before, err := u.LogProbs(samples)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 1))
			for range 3 {
				st, err := u.Update(context.Background(), samples, rng)
				if err != nil {
					t.Fatal(err)
				}
				if st.GradSteps != 2 || st.Tokens != 12 {
					t.Errorf("Update stats = %+v; want 2 grad steps over 12 tokens", st)
				}
			}
			after, err := u.LogProbs(samples)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range samples {
				d := sum(after[i]) - sum(before[i])
				if (s.Advantage > 0) != (d > 0) {
					t.Errorf("sample %d (advantage %+g): log-prob moved %+.4f; want the advantage's sign", i, s.Advantage, d)
				}
			}
		})
	}
}

func TestUpdateKLStartsAtZeroAndGrows(t *testing.T) {
	m := tinyModel(t, 4)
	cfg := DefaultUpdateConfig()
	cfg.Train.LearningRate = 1e-2
	u, err := NewUpdater(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	samples := []Sample{
		{Prompt: []int{1, 2}, Tokens: []int{3, 4, 5}, Advantage: 1},
		{Prompt: []int{1, 2}, Tokens: []int{6, 7}, Advantage: -1},
	}
	rng := rand.New(rand.NewPCG(2, 2))
	first, err := u.Update(context.Background(), samples, rng)
	if err != nil {
		t.Fatal(err)
	}
	if first.KL > 1e-9 {
		t.Errorf("KL to the reference before any step = %g; want 0", first.KL)
	}
	second, err := u.Update(context.Background(), samples, rng)
	if err != nil {
		t.Fatal(err)
	}
	if second.KL <= 0 {
		t.Errorf("KL after a step = %g; want positive", second.KL)
	}
	if _, err := u.Update(context.Background(), nil, rng); err != ErrNoSamples {
		t.Errorf("Update(nil) error = %v; want ErrNoSamples", err)
	}
}

func TestPackTruncatesOldestPromptTokens(t *testing.T) {
	m := tinyModel(t, 5)
	u, err := NewUpdater(m, DefaultUpdateConfig())
	if err != nil {
		t.Fatal(err)
	}
	long := make([]int, 100)
	for i := range long {
		long[i] = 1 + i%50
	}
	p, err := u.pack([]Sample{{Prompt: long, Tokens: []int{7, 8, 9}}}, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.in.Shape().Dimensions; got[0] != 4 || got[1] != 64 {
		t.Errorf("packed shape = %v; want [4 64]: padded rows, the model's context", got)
	}
	if p.tokens != 3 {
		t.Errorf("masked tokens = %d; want 3", p.tokens)
	}
}

// TestSamplingLogProbsAtTheSamplingTemperature checks that the log-probs the
// update starts from are the sampler's: log softmax(z/T) of the model's
// logits z at the policy's temperature, recomputed here from the logits
// after each prefix, on both trainers; and that scoring at T leaves the
// model as it was.
func TestSamplingLogProbsAtTheSamplingTemperature(t *testing.T) {
	samples := twoGroupSamples()
	for _, kind := range []string{inference.TrainerNative, inference.TrainerGoMLX} {
		t.Run(kind, func(t *testing.T) {
			m := tinyModel(t, 6)
			cfg := DefaultUpdateConfig()
			cfg.Trainer, cfg.Temperature = kind, 0.7
			u, err := NewUpdater(m, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(u.Close)
			atOne, err := u.LogProbs(samples)
			if err != nil {
				t.Fatal(err)
			}
			got, err := u.SamplingLogProbs(samples)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range samples {
				for j, tok := range s.Tokens {
					prefix := append(append([]int(nil), s.Prompt...), s.Tokens[:j]...)
					z, err := m.LastLogits([][]int{prefix})
					if err != nil {
						t.Fatal(err)
					}
					want := logSoftmaxAt(z[0], tok, cfg.Temperature)
					if d := math.Abs(float64(got[i][j]) - want); d > 1e-4 {
						t.Errorf("sample %d token %d: log-prob at T=%g = %.6f; want %.6f from the logits", i, j, cfg.Temperature, got[i][j], want)
					}
					if one := logSoftmaxAt(z[0], tok, 1); math.Abs(float64(atOne[i][j])-one) > 1e-4 {
						t.Errorf("sample %d token %d: log-prob at T=1 = %.6f; want %.6f", i, j, atOne[i][j], one)
					}
				}
			}
			again, err := u.LogProbs(samples)
			if err != nil {
				t.Fatal(err)
			}
			for i := range again {
				for j := range again[i] {
					if math.Abs(float64(again[i][j]-atOne[i][j])) > 1e-6 {
						t.Fatalf("log-prob %d/%d at T=1 moved from %g to %g after scoring at T; want the model restored", i, j, atOne[i][j], again[i][j])
					}
				}
			}
		})
	}
}

// logSoftmaxAt is log softmax(z/T)[tok].
func logSoftmaxAt(z []float32, tok int, temp float64) float64 {
	hi := math.Inf(-1)
	for _, x := range z {
		hi = math.Max(hi, float64(x)/temp)
	}
	s := 0.0
	for _, x := range z {
		s += math.Exp(float64(x)/temp - hi)
	}
	return float64(z[tok])/temp - hi - math.Log(s)
}
