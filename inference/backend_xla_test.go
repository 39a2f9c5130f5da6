//go:build xla

package inference

import (
	"context"
	"os"
	"slices"
	"testing"
)

// TestXLAMatchesPureGo runs the same model on the pure-Go backend and on
// XLA with the PJRT plugin named by PARLEY_PJRT_PLUGIN (an accelerator's,
// e.g. JAX's CUDA plugin): logits, a training step and greedy generation
// on the GoMLX decoder must agree. Skipped without a plugin.
func TestXLAMatchesPureGo(t *testing.T) {
	plugin := os.Getenv("PARLEY_PJRT_PLUGIN")
	if plugin == "" {
		t.Skip("PARLEY_PJRT_PLUGIN names no PJRT plugin")
	}
	tok := tinyTokenizer(t)
	cfg := tinyConfig()
	cfg.VocabSize, cfg.MaxSeq = tok.VocabSize(), 64
	goM, err := NewModel(cfg, DefaultBackendConfig(), 5)
	if err != nil {
		t.Fatal(err)
	}
	xlaM, err := NewModel(cfg, BackendConfig{Name: "xla", PluginPath: plugin}, 5)
	if err != nil {
		t.Fatal(err)
	}
	seqs := [][]int{tok.Encode("Where is the dragon?"), tok.Encode("The guard watches the gate.")}
	logits := func(m *Model) [][]float32 {
		t.Helper()
		l, err := m.LastLogits(seqs)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	want, got := logits(goM), logits(xlaM)
	for i := range want {
		if d := maxAbsDiff(got[i], want[i]); d > 1e-3 {
			t.Errorf("sequence %d: XLA logits differ from pure Go by %g; want ≤ 1e-3", i, d)
		}
	}

	batch := Batch{Tokens: seqs}
	for _, m := range []*Model{goM, xlaM} {
		tr, err := NewTrainer(m, DefaultTrainConfig())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Step(batch); err != nil {
			t.Fatal(err)
		}
	}
	want, got = logits(goM), logits(xlaM)
	for i := range want {
		if d := maxAbsDiff(got[i], want[i]); d > 1e-3 {
			t.Errorf("after a training step, sequence %d: XLA logits differ from pure Go by %g; want ≤ 1e-3", i, d)
		}
	}

	generate := func(m *Model) []int {
		t.Helper()
		e := startEngine(t, m, tok, EngineConfig{MaxBatch: 2, QueueSize: 4, ScoreBatch: 2, PrefillBatch: 2, Decoder: DecoderGoMLX})
		s, err := e.Generate(context.Background(), greedy(seqs[0], 12))
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Wait()
		if err != nil {
			t.Fatal(err)
		}
		return res.Tokens
	}
	if g, w := generate(xlaM), generate(goM); !slices.Equal(g, w) {
		t.Errorf("greedy generation on XLA %v; pure Go %v", g, w)
	}
}
