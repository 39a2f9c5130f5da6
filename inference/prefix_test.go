package inference

import (
	"context"
	"slices"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestPrefillFromKeptSequence keeps a decoded sequence and prefills prompts
// that extend it, repeat it and leave it part way: the CPU decoder copies
// the shared positions instead of running them, and its logits, then and
// in the decode steps after, match the GoMLX decoder's, which runs every
// prompt whole.
func TestPrefillFromKeptSequence(t *testing.T) {
	m := newTinyModel(t, 5)
	p := newDecoderPair(t, m)
	cpu := p.cpu.(*cpuDecoder)
	cpu.prefixes = newPrefixStore(1 << 20)
	p.resize([]int{-1, -1, -1, -1}, 4, 64)
	v := m.Config().VocabSize

	prompt := repeatedText(36) // a key tile and a part of one
	logits := p.prefill([]int{0}, [][]int{prompt})
	if p.reused != 0 {
		t.Fatalf("first prefill reused %d positions; want 0", p.reused)
	}
	seq := slices.Clone(prompt)
	toks, pos, active := make([]int32, 4), make([]int32, 4), []bool{true, false, false, false}
	for range 6 {
		next := argmax(logits[:v])
		toks[0], pos[0] = int32(next), int32(len(seq))
		seq = append(seq, next)
		logits = p.step(toks, pos, active)
	}
	cpu.keep(0, seq) // the prompt and the six tokens fed

	longer := append(slices.Clone(seq), 7, 3, 19)
	diverging := append(slices.Clone(seq[:30]), 8, 8)
	p.prefill([]int{1, 2, 3}, [][]int{longer, seq, diverging})
	if want := len(seq) + len(seq) - 1 + 30; p.reused != want {
		t.Fatalf("prefill of an extension, a repeat and a divergence reused %d positions; want %d", p.reused, want)
	}
	// Decode on from each: the copied positions are attended to as if run.
	toks, pos, active = []int32{0, 9, 4, 11}, []int32{0, int32(len(longer)), int32(len(seq)), int32(len(diverging))}, []bool{false, true, true, true}
	for range 3 {
		p.step(toks, pos, active)
		for r := 1; r < 4; r++ {
			pos[r]++
		}
	}
}

// TestPrefixStoreDropsStaleWeights changes the model's weights with a
// training step after a sequence was kept: the next prefill must run the
// whole prompt with the new weights.
func TestPrefixStoreDropsStaleWeights(t *testing.T) {
	m := newTinyModel(t, 9)
	p := newDecoderPair(t, m)
	p.cpu.(*cpuDecoder).prefixes = newPrefixStore(1 << 20)
	p.resize([]int{-1, -1}, 2, 64)
	prompt := repeatedText(30)
	p.prefill([]int{0}, [][]int{prompt})
	p.cpu.keep(0, prompt)
	trainOneStep(t, m)
	p.prefill([]int{1}, [][]int{append(slices.Clone(prompt), 4, 4)}) // compares with gomlx
	if p.reused != 0 {
		t.Fatalf("prefill after a training step reused %d positions; want 0", p.reused)
	}
}

// TestPrefixStoreBudget checks what the store keeps: an entry whose tokens
// begin a newer one gives way to it, a sequence already kept is not kept
// twice (nor copied), and beyond the budget the least recently matched goes
// first.
func TestPrefixStoreBudget(t *testing.T) {
	copies := 0
	kv := func() (k, v [][]float32) {
		copies++
		return [][]float32{make([]float32, 100)}, [][]float32{make([]float32, 100)}
	}
	k, v := kv()
	copies = 0
	size := (&prefixEntry{toks: []int{1}, k: k, v: v}).size() // 808 bytes for one token
	s := newPrefixStore(3*size + 50)
	keep := func(toks ...int) { s.keep(toks, kv) }
	keep(1, 2)
	keep(1, 2, 3) // extends the first
	keep(1, 2)    // begins the second
	if len(s.entries) != 1 || len(s.entries[0].toks) != 3 {
		t.Fatalf("entries %v; want only [1 2 3]", tokensOf(s))
	}
	if copies != 2 {
		t.Fatalf("%d copies of keys and values for 3 sequences, one already kept; want 2", copies)
	}
	keep(5)
	keep(6)
	if e, n := s.match([]int{1, 2, 3, 4}); e == nil || n != 3 {
		t.Fatalf("match of [1 2 3 4]: %d positions; want 3", n)
	}
	keep(7) // over budget: [5] was matched least recently
	if got := tokensOf(s); !slices.EqualFunc(got, [][]int{{1, 2, 3}, {6}, {7}}, slices.Equal) {
		t.Fatalf("entries %v; want [[1 2 3] [6] [7]]", got)
	}
	if s.bytes > s.max {
		t.Fatalf("store holds %d bytes; budget %d", s.bytes, s.max)
	}
	if e, n := s.match([]int{1, 2, 3}); e == nil || n != 2 {
		t.Fatalf("match of a kept sequence: %d positions; want all but the last, 2", n)
	}
	if e, _ := s.match([]int{9, 9}); e != nil {
		t.Fatal("match of unrelated tokens found an entry")
	}
}

func tokensOf(s *prefixStore) [][]int {
	var out [][]int
	for _, e := range s.entries {
		out = append(out, e.toks)
	}
	return out
}

// TestEngineReusesConversation plays a conversation turn by turn, each
// prompt the last one plus the reply and a new line, on an engine that
// keeps sequences and on one that does not: the greedy replies must be the
// same, and the keeping engine must count the reused prompt tokens.
func TestEngineReusesConversation(t *testing.T) {
	m, tok := tinyChatModel(t, 256)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	const replyTokens = 8
	var prompts []int // each turn's prompt length
	play := func(cfg EngineConfig) [][]int {
		e := startEngine(t, m, tok, cfg)
		prompt := tok.Encode("The blacksmith sharpens the sword. The guard watches the gate. Welcome")
		prompts = prompts[:0]
		var replies [][]int
		for _, line := range []string{" bread", " The guard", " Ask the dragon"} {
			prompts = append(prompts, len(prompt))
			s, err := e.Generate(context.Background(), greedy(prompt, replyTokens))
			if err != nil {
				t.Fatal(err)
			}
			res, err := s.Wait()
			if err != nil {
				t.Fatal(err)
			}
			replies = append(replies, res.Tokens)
			prompt = slices.Concat(prompt, res.Tokens, tok.Encode(line))
		}
		return replies
	}
	cfg := EngineConfig{MaxBatch: 4, QueueSize: 8, ScoreBatch: 4}
	plain := play(cfg)
	cfg.PrefixCacheMB, cfg.Meter = 1, mp.Meter("prefix-test")
	kept := play(cfg)
	if !slices.EqualFunc(plain, kept, slices.Equal) {
		t.Fatalf("replies with kept sequences %v; without %v", kept, plain)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var reused int64
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if s, ok := mt.Data.(metricdata.Sum[int64]); ok && mt.Name == "parley.inference.prompt_tokens_reused" {
				for _, dp := range s.DataPoints {
					reused += dp.Value
				}
			}
		}
	}
	// Turns 2 and 3 reuse the previous prompt and all but the last reply
	// token, which was sampled but never fed.
	if want := int64(prompts[0] + prompts[1] + 2*(replyTokens-1)); reused != want {
		t.Fatalf("prompt_tokens_reused = %d; want %d (prompts of %v tokens)", reused, want, prompts)
	}
}
