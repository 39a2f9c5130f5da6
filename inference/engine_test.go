package inference

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
)

// startEngine creates an engine over a tiny model and runs it until the
// test ends.
func startEngine(t *testing.T, m *Model, tok *Tokenizer, cfg EngineConfig) *Engine {
	t.Helper()
	e, err := NewEngine(m, tok, cfg, nil)
	if err != nil {
		t.Fatalf("NewEngine: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v; want nil", err)
		}
		_ = e.Close()
	})
	return e
}

func tinyChatModel(t *testing.T, maxSeq int) (*Model, *Tokenizer) {
	t.Helper()
	tok := tinyTokenizer(t)
	cfg := tinyConfig()
	cfg.VocabSize = tok.VocabSize()
	cfg.MaxSeq = maxSeq
	m, err := NewModel(cfg, DefaultBackendConfig(), 11)
	if err != nil {
		t.Fatal(err)
	}
	return m, tok
}

func greedy(prompt []int, n int) Request {
	return Request{Prompt: prompt, MaxTokens: n, Temperature: 0, Stop: []int{}}
}

// TestEngineBatchingMatchesSequential runs requests of different lengths
// that join and leave the batch and checks each greedy output against the
// same request served alone, and the first against naive full recompute.
func TestEngineBatchingMatchesSequential(t *testing.T) {
	m, tok := tinyChatModel(t, 128)
	prompts := []string{
		"Welcome, traveller!",
		"The guard",
		"I have not seen the dragon since the winter. Ask",
		"bread",
		"The blacksmith sharpens the sword. The guard watches the gate. Welcome",
		"Ask the",
	}
	reqs := make([]Request, len(prompts))
	for i, p := range prompts {
		reqs[i] = greedy(tok.Encode(p), 6+5*i)
	}

	alone := startEngine(t, m, tok, EngineConfig{MaxBatch: 1, QueueSize: 8, ScoreBatch: 4, PrefillBatch: 4})
	want := make([][]int, len(reqs))
	for i, r := range reqs {
		s, err := alone.Generate(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Wait()
		if err != nil {
			t.Fatal(err)
		}
		want[i] = res.Tokens
	}

	// Naive reference for the first request: full recompute per token.
	seq := slices.Clone(reqs[0].Prompt)
	var naive []int
	for range reqs[0].MaxTokens {
		l, err := m.LastLogits([][]int{seq})
		if err != nil {
			t.Fatal(err)
		}
		id := argmax(l[0])
		naive = append(naive, id)
		seq = append(seq, id)
	}
	if !slices.Equal(want[0], naive) {
		t.Fatalf("KV-cache greedy = %v; naive full recompute = %v", want[0], naive)
	}

	batched := startEngine(t, m, tok, EngineConfig{MaxBatch: 4, QueueSize: 8, ScoreBatch: 4, PrefillBatch: 4})
	streams := make([]*Stream, len(reqs))
	var err error
	// The first three start together; the rest join once the first token
	// of the first is out, and more than MaxBatch are in flight.
	for i := range 3 {
		if streams[i], err = batched.Generate(context.Background(), reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	<-streams[0].Tokens()
	for i := 3; i < len(reqs); i++ {
		if streams[i], err = batched.Generate(context.Background(), reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range streams {
		res, err := s.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Tokens, want[i]) {
			t.Errorf("request %d batched = %v; alone = %v", i, res.Tokens, want[i])
		}
		if res.FinishReason != FinishLength || res.PromptTokens != len(reqs[i].Prompt) {
			t.Errorf("request %d: finish %q, prompt tokens %d; want length, %d", i, res.FinishReason, res.PromptTokens, len(reqs[i].Prompt))
		}
		if res.Text != tok.Decode(res.Tokens) {
			t.Errorf("request %d: text %q; want %q", i, res.Text, tok.Decode(res.Tokens))
		}
	}
}

func TestEngineSeededSamplingReproducible(t *testing.T) {
	m, tok := tinyChatModel(t, 64)
	e := startEngine(t, m, tok, DefaultEngineConfig())
	run := func(seed uint64) []int {
		t.Helper()
		r := DefaultSampling()
		r.Prompt, r.MaxTokens, r.Temperature, r.TopP, r.Seed, r.Stop = tok.Encode("The guard"), 24, 1, 0.95, seed, []int{}
		s, err := e.Generate(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		var streamed []int
		for tk := range s.Tokens() {
			streamed = append(streamed, tk.ID)
		}
		res, err := s.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(streamed, res.Tokens) {
			t.Fatalf("streamed %v; result %v", streamed, res.Tokens)
		}
		return res.Tokens
	}
	a, b, c := run(42), run(42), run(43)
	if !slices.Equal(a, b) {
		t.Errorf("seed 42 twice: %v then %v; want equal", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 42 and 43 both gave %v; want different samples", a)
	}
}

func TestEngineCancellationFreesSlot(t *testing.T) {
	// A budget far longer than the cancel takes to arrive, even on a loaded
	// machine (a 256-token budget was once used up before it did).
	const budget = 4000
	m, tok := tinyChatModel(t, budget+64)
	e := startEngine(t, m, tok, EngineConfig{MaxBatch: 1, QueueSize: 4, ScoreBatch: 4, PrefillBatch: 4})
	ctx, cancel := context.WithCancel(context.Background())
	long, err := e.Generate(ctx, greedy(tok.Encode("The guard"), budget))
	if err != nil {
		t.Fatal(err)
	}
	<-long.Tokens()
	cancel()
	res, err := long.Wait()
	if !errors.Is(err, context.Canceled) || res.FinishReason != FinishCancelled {
		t.Fatalf("cancelled generation: finish %q, err %v; want cancelled, context.Canceled", res.FinishReason, err)
	}
	if len(res.Tokens) >= budget/2 {
		t.Errorf("cancelled generation produced %d of %d tokens; want it stopped soon after cancel", len(res.Tokens), budget)
	}
	// The only slot is free again: a new request completes.
	next, err := e.Generate(context.Background(), greedy(tok.Encode("Welcome"), 3))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := next.Wait(); err != nil || len(res.Tokens) != 3 {
		t.Fatalf("request after cancel: %d tokens, err %v; want 3, nil", len(res.Tokens), err)
	}
}

func TestEngineQueueFull(t *testing.T) {
	m, tok := tinyChatModel(t, 64)
	e, err := NewEngine(m, tok, EngineConfig{MaxBatch: 1, QueueSize: 2, ScoreBatch: 1, PrefillBatch: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Run is not started, so requests stay queued.
	var queued []*Stream
	for i := range 3 {
		s, err := e.Generate(context.Background(), greedy(tok.Encode("hi"), 2))
		switch {
		case i < 2 && err != nil:
			t.Fatalf("Generate #%d = %v; want queued", i, err)
		case i == 2 && !errors.Is(err, ErrQueueFull):
			t.Fatalf("Generate #%d = %v; want ErrQueueFull", i, err)
		}
		if s != nil {
			queued = append(queued, s)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for i, s := range queued {
		if _, err := s.Wait(); !errors.Is(err, ErrClosed) {
			t.Errorf("queued #%d after Close: %v; want ErrClosed", i, err)
		}
	}
	if _, err := e.Generate(context.Background(), greedy(tok.Encode("hi"), 2)); !errors.Is(err, ErrClosed) {
		t.Errorf("Generate after Close = %v; want ErrClosed", err)
	}
}

func TestEngineStopToken(t *testing.T) {
	m, tok := tinyChatModel(t, 64)
	e := startEngine(t, m, tok, DefaultEngineConfig())
	prompt := tok.Encode("Welcome, traveller!")
	gen := func(r Request) Result {
		t.Helper()
		s, err := e.Generate(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Wait()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	free := gen(greedy(prompt, 8))
	stopAt := slices.Index(free.Tokens, free.Tokens[3])
	r := greedy(prompt, 8)
	r.Stop = []int{free.Tokens[3]}
	got := gen(r)
	if got.FinishReason != FinishStop || !slices.Equal(got.Tokens, free.Tokens[:stopAt]) {
		t.Errorf("with stop %d: %v (%s); want %v (stop)", free.Tokens[3], got.Tokens, got.FinishReason, free.Tokens[:stopAt])
	}
}

// TestEngineScore checks Score against the model's full forward pass on
// each decoder, with continuations that share all but their last token
// (scored in one pass on the CPU decoder), an empty one and a repeat.
func TestEngineScore(t *testing.T) {
	m, tok := tinyChatModel(t, 64)
	prompt := tok.Encode("<|user|>Where is the dragon?<|end|><|npc|>")
	conts := [][]int{tok.Encode("Ask the guard."), {}, tok.Encode("[Terminate]"), tok.Encode("[Continue]"),
		tok.Encode("The inn"), tok.Encode("Ask the guard."), append(tok.Encode("Ask the guard"), tok.Encode("!")...)}
	for _, decoder := range []string{DecoderCPU, DecoderGoMLX} {
		e := startEngine(t, m, tok, EngineConfig{MaxBatch: 2, QueueSize: 2, ScoreBatch: 2, PrefillBatch: 4, Decoder: decoder})
		for range 2 { // the second call reuses the CPU scorer's state
			got, err := e.Score(context.Background(), prompt, conts)
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range conts {
				if len(got[i]) != len(c) {
					t.Fatalf("%s: continuation %d: %d log-probs; want %d", decoder, i, len(got[i]), len(c))
				}
				seq := slices.Clone(prompt)
				for j, id := range c {
					l, err := m.LastLogits([][]int{seq})
					if err != nil {
						t.Fatal(err)
					}
					want := logSoftmaxAt(l[0], id)
					if d := math.Abs(float64(got[i][j] - want)); d > 1e-4 {
						t.Errorf("%s: continuation %d token %d: log p = %g; want %g", decoder, i, j, got[i][j], want)
					}
					seq = append(seq, id)
				}
			}
		}
		long := make([]int, m.Config().MaxSeq)
		if _, err := e.Score(context.Background(), prompt, [][]int{long}); !errors.Is(err, ErrTooLong) {
			t.Errorf("%s: a continuation past the context: %v; want ErrTooLong", decoder, err)
		}
		if _, err := e.Score(context.Background(), prompt, [][]int{{m.Config().VocabSize}}); err == nil {
			t.Errorf("%s: a token id outside the vocabulary scored without an error", decoder)
		}
	}
}

// TestEngineConcurrentClients hammers Generate from several goroutines.
func TestEngineConcurrentClients(t *testing.T) {
	m, tok := tinyChatModel(t, 64)
	e := startEngine(t, m, tok, EngineConfig{MaxBatch: 4, QueueSize: 64, ScoreBatch: 4, PrefillBatch: 4})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := DefaultSampling()
			r.Prompt, r.MaxTokens, r.Seed = tok.Encode(fmt.Sprintf("guard %d", i)), 5+i%4, uint64(i+1)
			s, err := e.Generate(context.Background(), r)
			if err != nil {
				errs <- err
				return
			}
			if _, err := s.Wait(); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestEngineStopsAtContextLength(t *testing.T) {
	m, tok := tinyChatModel(t, 64)
	e := startEngine(t, m, tok, DefaultEngineConfig())
	prompt := make([]int, 62)
	for i := range prompt {
		prompt[i] = 10 + i
	}
	s, err := e.Generate(context.Background(), greedy(prompt, 10))
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if res.FinishReason != FinishLength || len(res.Tokens) != 2 {
		t.Errorf("62-token prompt in a 64-token context: %d tokens (%s); want 2 (length)", len(res.Tokens), res.FinishReason)
	}
	if _, err := e.Generate(context.Background(), greedy(make([]int, 64), 1)); !errors.Is(err, ErrTooLong) {
		t.Errorf("64-token prompt: %v; want ErrTooLong", err)
	}
}
