package inference

import (
	"slices"
	"testing"
)

// TestOpenWeightsFineTuneParleyTokens gives an imported model (ChatML's
// tokens only) Parley's chat and decision tokens, growing its vocabulary
// when it has no spare rows and using the spare rows when it has: the new
// tokens encode as themselves, old text and logits stay as they were.
func TestOpenWeightsFineTuneParleyTokens(t *testing.T) {
	tok := byteTokenizer(t, "<|endoftext|>", "<|im_start|>", "<|im_end|>")
	for _, spare := range []int{0, 16} {
		cfg := ModelConfig{VocabSize: tok.VocabSize() + spare, Dim: 16, Layers: 1, Heads: 4, KVHeads: 2, FFNDim: 24,
			MaxSeq: 64, RopeBase: 1e6, NormEps: 1e-6, QKVBias: true, UntiedHead: true}
		m, err := NewModel(cfg, DefaultBackendConfig(), 5)
		if err != nil {
			t.Fatal(err)
		}
		m2, tok2, err := WithParleyTokens(m, tok)
		if err != nil {
			t.Fatal(err)
		}
		added := len(tokSpecials())
		if tok2.VocabSize() != tok.VocabSize()+added || m2.Config().VocabSize != max(cfg.VocabSize, tok2.VocabSize()) {
			t.Fatalf("spare %d: tokenizer %d, model vocab %d; want %d tokens", spare, tok2.VocabSize(), m2.Config().VocabSize, tok.VocabSize()+added)
		}
		for i, s := range tokSpecials() {
			if id, ok := tok2.TokenID(s); !ok || id != tok.VocabSize()+i || !slices.Equal(tok2.Encode(s), []int{id}) {
				t.Errorf("%s: id %d, %v; want %d", s, id, ok, tok.VocabSize()+i)
			}
		}
		text := "Hello <|im_end|> there"
		if !slices.Equal(tok2.Encode(text), tok.Encode(text)) {
			t.Errorf("old text encodes as %v; was %v", tok2.Encode(text), tok.Encode(text))
		}
		seq := tok.Encode(text)
		before, err := m.LastLogits([][]int{seq})
		if err != nil {
			t.Fatal(err)
		}
		after, err := m2.LastLogits([][]int{seq})
		if err != nil {
			t.Fatal(err)
		}
		if d := maxAbsDiff(after[0][:tok.VocabSize()], before[0][:tok.VocabSize()]); d > 1e-5 {
			t.Errorf("spare %d: old tokens' logits moved by %g", spare, d)
		}
		if again, tok3, err := WithParleyTokens(m2, tok2); err != nil || again != m2 || tok3 != tok2 {
			t.Errorf("a model with Parley's tokens was changed: %v", err)
		}
	}
}
