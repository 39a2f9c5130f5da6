package inference

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
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

// TestCustomLossWithFrozenReference trains with a custom loss that uses a
// CloneWeights reference, as the RL learner does: the reference stays put
// while the live weights move, and the KL term starts at zero.
func TestCustomLossWithFrozenReference(t *testing.T) {
	m := newTinyModel(t, 4)
	ref, err := m.CloneWeights("ref")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(m, DefaultTrainConfig())
	if err != nil {
		t.Fatal(err)
	}
	seq := [][]int{repeatedText(17)}
	before, err := m.LastLogits(seq)
	if err != nil {
		t.Fatal(err)
	}
	in, tg, w, err := nextTokenTensors(Batch{Tokens: seq}, m.Config().MaxSeq)
	if err != nil {
		t.Fatal(err)
	}
	// Loss: next-token NLL plus the k3 KL estimate against the reference;
	// the step's returned loss is the value before the update.
	loss := func(ctx *context.Context, x []*graph.Node) *graph.Node {
		lp := m.TokenLogProbs(ctx, x[0], x[1])
		lpRef := graph.StopGradient(m.TokenLogProbs(ref, x[0], x[1]))
		d := graph.Sub(lpRef, lp)
		k3 := graph.Sub(graph.Sub(graph.Exp(d), d), graph.OnesLike(d))
		return graph.Add(NextTokenLoss(lp, x[2]), graph.ReduceAllMean(k3))
	}
	lps, err := m.SequenceLogProbs(seq)
	if err != nil {
		t.Fatal(err)
	}
	var nll float64
	for _, lp := range lps[0] {
		nll -= float64(lp) / float64(len(lps[0]))
	}
	first, err := tr.StepWith("nll+kl", loss, in, tg, w)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if _, err := tr.StepWith("nll+kl", loss, in, tg, w); err != nil {
			t.Fatal(err)
		}
	}
	after, err := m.LastLogits(seq)
	if err != nil {
		t.Fatal(err)
	}
	if maxAbsDiff(after[0], before[0]) < 1e-3 {
		t.Error("live weights did not move after 21 steps")
	}
	// Evaluate the reference through a graph on its scope: unchanged.
	e, err := context.NewExec(m.Backend(), m.Context(), func(ctx *context.Context, tokens *graph.Node) *graph.Node {
		return m.Logits(ref, tokens)
	})
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := padBatch(seq, m.Config().MaxSeq)
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.Exec(tok)
	if err != nil {
		t.Fatal(err)
	}
	flat := tensors.MustCopyFlatData[float32](out[0])
	v := m.Config().VocabSize
	last := len(seq[0]) - 1
	refLast := flat[last*v : (last+1)*v]
	if d := maxAbsDiff(refLast, before[0]); d > 1e-5 {
		t.Errorf("reference logits moved by %g; want frozen", d)
	}
	if math.Abs(float64(first)-nll) > 1e-4 {
		t.Errorf("first loss = %g; want the NLL %g (the KL term is 0 at the start)", first, nll)
	}
}

func TestModelCloneIsIndependent(t *testing.T) {
	m := newTinyModel(t, 5)
	c, err := m.Clone()
	if err != nil {
		t.Fatal(err)
	}
	seq := [][]int{repeatedText(20)}
	want, err := m.LastLogits(seq)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(m, DefaultTrainConfig())
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := tr.Step(Batch{Tokens: seq}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.LastLogits(seq)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(got[0], want[0]); d != 0 {
		t.Errorf("clone's logits moved by %g while the original trained; want unchanged", d)
	}
}
