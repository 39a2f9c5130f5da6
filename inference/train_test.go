package inference

import (
	"testing"
)

// tinyConfig is a model small enough for the package's tests on 2 cores.
func tinyConfig() ModelConfig {
	c := DefaultModelConfig()
	c.VocabSize, c.Dim, c.Layers, c.Heads, c.FFNDim, c.MaxSeq = 64, 32, 2, 2, 64, 64
	return c
}

func newTinyModel(t testing.TB, seed int64) *Model {
	t.Helper()
	m, err := NewModel(tinyConfig(), DefaultBackendConfig(), seed)
	if err != nil {
		t.Fatalf("NewModel: %v", err)
	}
	return m
}

func TestModelConfigParams(t *testing.T) {
	for _, c := range []ModelConfig{DefaultModelConfig(), tinyConfig()} {
		_, sh := weightShapes(c)
		n := 0
		for _, d := range sh {
			p := 1
			for _, x := range d {
				p *= x
			}
			n += p
		}
		if got := c.Params(); got != n {
			t.Errorf("Params() = %d; want %d", got, n)
		}
	}
	if p := DefaultModelConfig().Params(); p < 1_000_000 || p > 5_000_000 {
		t.Errorf("default model has %d params; want 1M..5M", p)
	}
}

func TestModelConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*ModelConfig)
		ok   bool
	}{
		{"default", func(*ModelConfig) {}, true},
		{"heads do not divide dim", func(c *ModelConfig) { c.Heads = 3 }, false},
		{"odd head dim", func(c *ModelConfig) { c.Dim, c.Heads = 12, 4 }, false},
		{"no vocab", func(c *ModelConfig) { c.VocabSize = 0 }, false},
		{"no layers", func(c *ModelConfig) { c.Layers = 0 }, false},
	}
	for _, tc := range tests {
		c := DefaultModelConfig()
		tc.edit(&c)
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v; want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// repeatedText is a short periodic token sequence: a model that learns it
// predicts most tokens with certainty.
func repeatedText(n int) []int {
	phrase := []int{5, 17, 9, 33, 2, 41, 9, 12, 60, 7, 17, 3}
	out := make([]int, n)
	for i := range out {
		out[i] = phrase[i%len(phrase)]
	}
	return out
}

func TestTrainerLowersLoss(t *testing.T) {
	m := newTinyModel(t, 1)
	cfg := DefaultTrainConfig()
	cfg.LearningRate = 3e-3
	cfg.WarmupSteps = 10
	tr, err := NewTrainer(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	text := repeatedText(400)
	batch := func(step int) Batch {
		var b Batch
		for i := range 4 {
			off := (step*7 + i*13) % (len(text) - 33)
			b.Tokens = append(b.Tokens, text[off:off+33])
		}
		return b
	}
	first, err := tr.Step(batch(0))
	if err != nil {
		t.Fatal(err)
	}
	steps := 150
	if testing.Short() {
		steps = 80
	}
	var last float32
	for s := 1; s < steps; s++ {
		if last, err = tr.Step(batch(s)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("loss %.3f -> %.3f after %d steps", first, last, steps)
	if last > first/3 {
		t.Errorf("loss after %d steps = %.3f; want below a third of the first %.3f", steps, last, first)
	}
}

func TestTrainerWeightsZeroMeansNoLoss(t *testing.T) {
	m := newTinyModel(t, 2)
	tr, err := NewTrainer(m, DefaultTrainConfig())
	if err != nil {
		t.Fatal(err)
	}
	toks := [][]int{{1, 2, 3, 4}}
	l, err := tr.Step(Batch{Tokens: toks, Weights: [][]float32{{0, 0, 0, 0}}})
	if err != nil {
		t.Fatal(err)
	}
	if l != 0 {
		t.Errorf("loss with all-zero weights = %g; want 0", l)
	}
}
