package inference

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
)

// headDim32Config has the default model's head size, which the attention
// kernel handles specially.
func headDim32Config() ModelConfig {
	c := tinyConfig()
	c.Dim, c.Heads = 64, 2
	return c
}

// oddConfig has sizes that are not multiples of the kernels' blocks.
func oddConfig() ModelConfig {
	c := DefaultModelConfig()
	c.VocabSize, c.Dim, c.Layers, c.Heads, c.FFNDim, c.MaxSeq = 67, 30, 3, 3, 43, 64
	return c
}

// qwenLikeConfig has Qwen2.5's features (3:1 grouped-query attention,
// q/k/v biases, tied) with heads of 32, which the attention kernel handles
// specially, and head dim ≠ dim / heads; gqaTestConfig covers the untied
// head and llama3 rope scaling at odd sizes.
func qwenLikeConfig() ModelConfig {
	c := tinyConfig()
	c.Dim, c.Heads, c.KVHeads, c.HeadSize, c.QKVBias = 48, 6, 2, 32, true
	return c
}

// forEachDecodeKernel runs f with the decoder's 32-wide AVX-512 kernels
// and again without them (AVX2, or plain Go under purego), when this CPU
// and build have them; once otherwise.
func forEachDecodeKernel(t *testing.T, f func(t *testing.T)) {
	if _, ok := wideKernel(); !ok {
		t.Run("16-wide", f)
		return
	}
	t.Run("32-wide", f)
	t.Run("16-wide", func(t *testing.T) {
		decodeWide = false
		defer func() { decodeWide = true }()
		f(t)
	})
}

func TestMatmulMatchesNaive(t *testing.T) {
	forEachDecodeKernel(t, testMatmulMatchesNaive)
}

func testMatmulMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ n, in, out, o0, o1 int }{
		{1, 1, 1, 0, 1}, {1, 7, 5, 0, 5}, {2, 8, 4, 0, 4}, {3, 13, 9, 2, 9},
		{5, 30, 67, 0, 67}, {33, 17, 11, 4, 10}, {70, 9, 6, 0, 6},
		// Multiples of 16 outputs go through the panels, six rows at a time.
		{6, 8, 16, 0, 16}, {7, 5, 32, 0, 32}, {13, 33, 48, 16, 48}, {32, 128, 64, 0, 64}, {1, 12, 32, 16, 32},
		{11, 20, 32, 0, 32}, {8, 64, 48, 16, 32}, {17, 3, 16, 0, 16},
		// Multiples of 32 go through 32-wide panels where the CPU has
		// AVX-512: one row streams them, twelve go through the 12×32
		// micro-kernel, eight through the 8×32 one, the rest one at a time.
		{1, 128, 96, 32, 96}, {2, 7, 64, 0, 64}, {12, 33, 64, 0, 64}, {32, 128, 128, 32, 96}, {27, 5, 32, 0, 32},
		{8, 1, 32, 0, 32}, {16, 64, 64, 0, 64}, {19, 9, 96, 32, 96}, {10, 40, 32, 0, 32},
	} {
		for _, add := range []bool{false, true} {
			t.Run(fmt.Sprintf("%dx%dx%d[%d:%d]add=%v", tc.n, tc.in, tc.out, tc.o0, tc.o1, add), func(t *testing.T) {
				x, w := randSlice(rng, tc.n*tc.in), randSlice(rng, tc.out*tc.in)
				y0 := randSlice(rng, tc.n*tc.out)
				want := slices.Clone(y0)
				for b := range tc.n {
					for o := tc.o0; o < tc.o1; o++ {
						s := float32(0)
						for i := range tc.in {
							s += x[b*tc.in+i] * w[o*tc.in+i]
						}
						if add {
							want[b*tc.out+o] += s
						} else {
							want[b*tc.out+o] = s
						}
					}
				}
				rows := slices.Clone(y0)
				matmulRows(rows, x, w, tc.n, tc.in, tc.out, tc.o0, tc.o1, add)
				m := newCPUMatrix(w, tc.out, tc.in)
				results := map[string][]float32{"matmulRows": rows}
				// A range of a panelled matrix must be whole panels.
				if m.width == 0 || (tc.o0%m.width == 0 && tc.o1%m.width == 0) {
					viaMatrix := slices.Clone(y0)
					m.mulRange(viaMatrix, x, tc.n, tc.o0, tc.o1, add)
					results["cpuMatrix.mulRange"] = viaMatrix
				}
				for name, got := range results {
					if d := maxAbsDiff(got, want); d > 1e-4 {
						t.Fatalf("%s: max |got - want| = %g (panels %d wide)", name, d, m.width)
					}
				}
			})
		}
	}
}

// newRandomModel has normal weights of the given std and norms around 1:
// larger than NewModel's, so logits and attention are far from uniform and
// a wrong detail in the math shows.
func newRandomModel(cfg ModelConfig, std float64, seed uint64) (*Model, error) {
	rng := rand.New(rand.NewPCG(seed, 11))
	names, sh := weightShapes(cfg)
	vals := map[string][]float32{}
	for _, name := range names {
		n := 1
		for _, d := range sh[name] {
			n *= d
		}
		v := randSlice(rng, n)
		for i := range v {
			if len(sh[name]) == 1 {
				v[i] = 1 + 0.2*v[i]
			} else {
				v[i] *= float32(std)
			}
		}
		vals[name] = v
	}
	return newModelWithWeights(cfg, DefaultBackendConfig(), vals)
}

// TestDot4x2MatchesGo checks the kernel matmulRows uses (AVX2 FMA on CPUs
// that have it) against the plain-Go one for every length up to 70, so
// each accumulator, lane and tail is exercised.
func TestDot4x2MatchesGo(t *testing.T) {
	t.Logf("AVX2 FMA kernel in use: %v", hasAVX2FMA)
	rng := rand.New(rand.NewPCG(7, 8))
	for n := 1; n <= 70; n++ {
		v := make([][]float32, 6)
		for i := range v {
			v[i] = randSlice(rng, n)
		}
		got := make([]float32, 8)
		want := make([]float32, 8)
		got[0], got[1], got[2], got[3], got[4], got[5], got[6], got[7] = dot4x2(v[0], v[1], v[2], v[3], v[4], v[5])
		want[0], want[1], want[2], want[3], want[4], want[5], want[6], want[7] = dot4x2Go(v[0], v[1], v[2], v[3], v[4], v[5])
		if d := maxAbsDiff(got, want); d > 1e-4 {
			t.Fatalf("n=%d: dot4x2 = %v; plain Go = %v", n, got, want)
		}
		g1, g2, g3, g4 := dot4x1(v[0], v[1], v[2], v[3], v[4])
		if d := maxAbsDiff([]float32{g1, g2, g3, g4}, want[:4]); d > 1e-4 {
			t.Fatalf("n=%d: dot4x1 = %v; plain Go = %v", n, []float32{g1, g2, g3, g4}, want[:4])
		}
	}
}

// TestGemv32MatchesGo checks gemv32 (AVX-512 on CPUs that have it)
// against the plain-Go one for every length up to 70 and a few panel
// counts, so each accumulator and the tail are exercised.
func TestGemv32MatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for in := 1; in <= 70; in++ {
		for _, panels := range []int{1, 3} {
			w, x, y := randSlice(rng, panels*in*32), randSlice(rng, in), randSlice(rng, panels*32)
			got, want := slices.Clone(y), slices.Clone(y)
			gemv32(w, x, in, panels, got)
			gemv32Go(w, x, in, panels, want)
			if d := maxAbsDiff(got, want); d > 1e-4 {
				t.Fatalf("in=%d panels=%d: gemv32 differs from plain Go by %g", in, panels, d)
			}
		}
	}
}

// TestQKScoresMatchesNaive covers whole tiles of positions and partial
// ones of every size, odd head sizes, and a slot exactly as long as the
// positions read; no score past the positions is written.
func TestQKScoresMatchesNaive(t *testing.T) {
	forEachDecodeKernel(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(11, 12))
		cases := []struct{ hd, length, n int }{{1, 1, 1}, {32, 128, 65}, {10, 40, 33}, {7, 16, 16}, {32, 96, 96}, {3, 50, 17}, {5, 200, 190}, {2, 64, 64}, {4, 130, 129}, {64, 100, 47}}
		for r := 1; r < kvTile; r++ {
			cases = append(cases, struct{ hd, length, n int }{5 + r%2, kvTile + r, kvTile + r})
		}
		for _, tc := range cases {
			q, kt := randSlice(rng, tc.hd), randSlice(rng, cacheSlot(tc.length, tc.hd))
			spare := make([]float32, (tc.n+31)/32*32)
			for i := range spare {
				spare[i] = -7
			}
			got := spare[:tc.n]
			qkScores(got, q, kt, nil)
			for i, v := range spare[tc.n:] {
				if v != -7 {
					t.Fatalf("hd=%d length=%d n=%d: wrote %g at %d, past the positions", tc.hd, tc.length, tc.n, v, tc.n+i)
				}
			}
			for j := range tc.n {
				var want float32
				for d, x := range q {
					want += x * kt[keyAt(j, tc.hd)+d*kvTile]
				}
				if d := math.Abs(float64(got[j] - want)); d > 1e-4 {
					t.Fatalf("hd=%d length=%d n=%d: score %d = %g; want %g", tc.hd, tc.length, tc.n, j, got[j], want)
				}
			}
		}
	})
}

func TestAxpy32MatchesGo(t *testing.T) {
	forEachDecodeKernel(t, testAxpy32MatchesGo)
}

func testAxpy32MatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, tc := range []struct{ n, stride int }{{1, 32}, {2, 48}, {3, 32}, {7, 40}, {32, 64}, {65, 33}} {
		a, b := randSlice(rng, tc.n), randSlice(rng, (tc.n-1)*tc.stride+32)
		got, want := make([]float32, 32), make([]float32, 32)
		axpy32(got, a, b, tc.stride)
		for d, x := range a {
			for i := range want {
				want[i] += x * b[d*tc.stride+i]
			}
		}
		if d := maxAbsDiff(got, want); d > 1e-4 {
			t.Fatalf("n=%d stride=%d: axpy32 = %v; want %v", tc.n, tc.stride, got, want)
		}
	}
}

func TestExpfMatchesMathExp(t *testing.T) {
	worst := 0.0
	for i := -200000; i <= 200000; i++ {
		x := float32(i) * 4.4e-4 // -88 to 88
		got, want := float64(expf(x)), math.Exp(float64(x))
		if want < 1.2e-38 { // below the smallest normal, expf gives 0
			if got != 0 && math.Abs(got-want) > 1e-38 {
				t.Fatalf("expf(%g) = %g; want %g", x, got, want)
			}
			continue
		}
		worst = max(worst, math.Abs(got-want)/want)
	}
	if worst > 3e-7 {
		t.Fatalf("expf relative error up to %g; want < 3e-7", worst)
	}
	for _, x := range []float32{0, -1e9, 100, float32(math.Inf(-1))} {
		if got, want := expf(x), float32(math.Exp(float64(x))); got != want {
			t.Errorf("expf(%g) = %g; want %g", x, got, want)
		}
	}
	if got := expf(float32(math.NaN())); got == got {
		t.Errorf("expf(NaN) = %g; want NaN", got)
	}
}

func randSlice(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}

func TestCPUPoolRunsEveryIndexOnce(t *testing.T) {
	for _, helpers := range []int{0, 1, 3} {
		p := newCPUPool(helpers)
		for _, tc := range []struct{ n, grain int }{{1, 1}, {10, 3}, {100, 1}, {1000, 64}, {7, 100}} {
			hits := make([]atomic.Int32, tc.n)
			for range 20 {
				p.run(tc.n, tc.grain, func(lo, hi int) {
					for i := lo; i < hi; i++ {
						hits[i].Add(1)
					}
				})
			}
			for i := range hits {
				if got := hits[i].Load(); got != 20 {
					t.Fatalf("helpers %d, n %d, grain %d: index %d ran %d times; want 20", helpers, tc.n, tc.grain, i, got)
				}
			}
		}
		p.close()
	}
}

// decoderPair drives the GoMLX and the CPU decoder through the same calls
// and fails the test when their logits differ.
type decoderPair struct {
	t        *testing.T
	v        int
	ref, cpu decoder
	// worst is the largest difference seen, scale the largest |logit|.
	worst, scale float64
	// reused is the positions the CPU decoder's last prefill copied from
	// kept sequences.
	reused int
}

const parityTol = 1e-4

func newDecoderPair(t *testing.T, m *Model) *decoderPair {
	p := &decoderPair{t: t, v: m.Config().VocabSize, ref: newGomlxDecoder(m), cpu: newCPUDecoder(m)}
	t.Cleanup(func() {
		p.ref.close()
		p.cpu.close()
		t.Logf("max |cpu - gomlx| = %.3g over logits up to %.3g", p.worst, p.scale)
	})
	return p
}

func (p *decoderPair) resize(src []int, rows, length int) {
	p.t.Helper()
	if err := p.ref.resize(src, rows, length); err != nil {
		p.t.Fatalf("gomlx resize: %v", err)
	}
	if err := p.cpu.resize(src, rows, length); err != nil {
		p.t.Fatalf("cpu resize: %v", err)
	}
	r1, l1 := p.ref.dims()
	r2, l2 := p.cpu.dims()
	if r1 != r2 || l1 != l2 {
		p.t.Fatalf("dims: cpu %d×%d; gomlx %d×%d", r2, l2, r1, l1)
	}
}

// compare checks the logits of the rows that matter.
func (p *decoderPair) compare(what string, want, got []float32, rows []int) {
	p.t.Helper()
	if len(got) != len(want) {
		p.t.Fatalf("%s: cpu gave %d logits; gomlx %d", what, len(got), len(want))
	}
	for _, r := range rows {
		w, g := want[r*p.v:(r+1)*p.v], got[r*p.v:(r+1)*p.v]
		d := maxAbsDiff(g, w)
		p.worst = max(p.worst, d)
		for _, x := range w {
			p.scale = max(p.scale, math.Abs(float64(x)))
		}
		if d > parityTol {
			p.t.Fatalf("%s: row %d: max |cpu - gomlx| = %g; want < %g", what, r, d, parityTol)
		}
	}
}

func (p *decoderPair) prefill(rows []int, prompts [][]int) []float32 {
	p.t.Helper()
	want, _, err := p.ref.prefill(rows, prompts)
	if err != nil {
		p.t.Fatalf("gomlx prefill: %v", err)
	}
	got, reused, err := p.cpu.prefill(rows, prompts)
	p.reused = reused
	if err != nil {
		p.t.Fatalf("cpu prefill: %v", err)
	}
	idx := make([]int, len(rows))
	for i := range idx {
		idx[i] = i
	}
	p.compare(fmt.Sprintf("prefill into rows %v", rows), want, got, idx)
	return got
}

func (p *decoderPair) step(tokens, pos []int32, active []bool) []float32 {
	p.t.Helper()
	want, err := p.ref.step(tokens, pos, active)
	if err != nil {
		p.t.Fatalf("gomlx step: %v", err)
	}
	got, err := p.cpu.step(tokens, pos, active)
	if err != nil {
		p.t.Fatalf("cpu step: %v", err)
	}
	var rows []int
	for r, a := range active {
		if a {
			rows = append(rows, r)
		}
	}
	p.compare(fmt.Sprintf("step of rows %v at %v", rows, pos), want, got, rows)
	return got
}

// TestCPUDecoderMatchesGoMLX runs both decoders through prefills of random
// prompts in several batch compositions, decode steps with rows joining and
// leaving, and cache re-layouts, and compares every logit.
func TestCPUDecoderMatchesGoMLX(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  ModelConfig
		std  float64
	}{
		{"tiny", tinyConfig(), 0},
		{"odd sizes", oddConfig(), 0},
		{"sharp weights", tinyConfig(), 0.25},
		{"odd sizes sharp weights", oddConfig(), 0.2},
		{"head dim 32 sharp weights", headDim32Config(), 0.15},
		{"open weights sharp weights", gqaTestConfig(), 0.25},
		{"grouped heads of 32 sharp weights", qwenLikeConfig(), 0.15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewModel(tc.cfg, DefaultBackendConfig(), 7)
			if tc.std > 0 {
				m, err = newRandomModel(tc.cfg, tc.std, 7)
			}
			if err != nil {
				t.Fatal(err)
			}
			forEachDecodeKernel(t, func(t *testing.T) {
				runDecoderParity(t, m, rand.New(rand.NewPCG(3, 4)))
			})
		})
	}
}

func runDecoderParity(t *testing.T, m *Model, rng *rand.Rand) {
	V := m.Config().VocabSize
	p := newDecoderPair(t, m)
	randPrompt := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = rng.IntN(V)
		}
		return s
	}
	// seqs[r] is the sequence in cache row r (nil: free row).
	seqs := make([][]int, 4)
	p.resize([]int{-1, -1, -1, -1}, 4, 32)
	admit := func(rows []int, lens []int) {
		t.Helper()
		prompts := make([][]int, len(rows))
		for i, n := range lens {
			prompts[i] = randPrompt(n)
		}
		logits := p.prefill(rows, prompts)
		for i, r := range rows {
			seqs[r] = append(prompts[i], argmax(logits[i*V:(i+1)*V]))
		}
	}
	steps := func(n int) {
		t.Helper()
		for range n {
			rows := len(seqs)
			toks, pos, active := make([]int32, rows), make([]int32, rows), make([]bool, rows)
			for r, s := range seqs {
				if s != nil {
					toks[r], pos[r], active[r] = int32(s[len(s)-1]), int32(len(s)-1), true
				}
			}
			logits := p.step(toks, pos, active)
			for r, s := range seqs {
				if s != nil {
					seqs[r] = append(s, argmax(logits[r*V:(r+1)*V]))
				}
			}
		}
	}
	// A single prompt, then a batch of prompts of different lengths given
	// out of row order into the free rows.
	admit([]int{1}, []int{9})
	steps(3)
	admit([]int{3, 0}, []int{1, 17})
	steps(4)
	// Row 1 leaves; a new prompt reuses it while the others decode on.
	seqs[1] = nil
	admit([]int{1}, []int{5})
	steps(2)
	// The batch grows: rows move and the cache gets longer.
	p.resize([]int{3, 1, -1, 0, -1, -1, -1, -1}, 8, 64)
	seqs = [][]int{seqs[3], seqs[1], nil, seqs[0], nil, nil, nil, nil}
	admit([]int{6, 2, 4, 7}, []int{2, 30, 11, 1})
	steps(5)
	// Rows leave and the cache shrinks to fewer rows and a length that is
	// not a multiple of the kernels' 32 positions.
	p.resize([]int{2, 6, 3, 1}, 4, 50)
	seqs = [][]int{seqs[2], seqs[6], seqs[3], seqs[1]}
	seqs[1] = nil
	steps(6)
}

// TestCPUDecoderSplitStepMatchesGoMLX checks the decode steps that forward
// splits into parts of whole rows, one per core (five rows in two parts of
// three and two): a full batch, then one with inactive rows, each part's logits in
// its rows, against GoMLX.
func TestCPUDecoderSplitStepMatchesGoMLX(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  ModelConfig
	}{
		{"odd sizes", oddConfig()},
		{"grouped heads of 32", qwenLikeConfig()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := newRandomModel(tc.cfg, 0.2, 7)
			if err != nil {
				t.Fatal(err)
			}
			forEachDecodeKernel(t, func(t *testing.T) {
				p := newDecoderPair(t, m)
				cpu := p.cpu.(*cpuDecoder)
				// A helper even where GOMAXPROCS is 1, so the step splits.
				cpu.pool = newCPUPool(1)
				rng := rand.New(rand.NewPCG(5, 6))
				const rows = 5
				src, ids, prompts := make([]int, rows), make([]int, rows), make([][]int, rows)
				for r := range rows {
					src[r], ids[r], prompts[r] = -1, r, make([]int, 1+rng.IntN(20))
					for i := range prompts[r] {
						prompts[r][i] = rng.IntN(tc.cfg.VocabSize)
					}
				}
				p.resize(src, rows, 40)
				p.prefill(ids, prompts)
				toks, pos, active := make([]int32, rows), make([]int32, rows), make([]bool, rows)
				for r := range rows {
					toks[r], pos[r], active[r] = int32(rng.IntN(tc.cfg.VocabSize)), int32(len(prompts[r])), true
				}
				for step := range 4 {
					if step == 2 {
						active[3], active[rows-1] = false, false
					}
					cpu.unsplit = 0 // split whatever the last step took
					logits := p.step(toks, pos, active)
					for r := range rows {
						if active[r] {
							toks[r], pos[r] = int32(argmax(logits[r*tc.cfg.VocabSize:(r+1)*tc.cfg.VocabSize])), pos[r]+1
						}
					}
				}
			})
		})
	}
}

// TestCPUDecoderFollowsTraining checks that the CPU decoder decodes with the
// model's current weights after a Trainer changed them in place, as the
// GoMLX decoder does (RL samples from the policy it is training).
func TestCPUDecoderFollowsTraining(t *testing.T) {
	m := newTinyModel(t, 9)
	p := newDecoderPair(t, m)
	p.resize([]int{-1, -1}, 2, 32)
	prompt := repeatedText(10)
	before := p.prefill([]int{0}, [][]int{prompt})
	trainOneStep(t, m)
	after := p.prefill([]int{1}, [][]int{prompt}) // compares with gomlx
	if d := maxAbsDiff(before, after); d < 1e-3 {
		t.Fatalf("logits moved by %g after a training step; want a visible change", d)
	}
}

// trainOneStep changes m's weights in place with one GoMLX training step.
func trainOneStep(t *testing.T, m *Model) {
	t.Helper()
	tc := DefaultTrainConfig()
	tc.LearningRate = 1e-2
	tr, err := NewTrainer(m, tc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Step(Batch{Tokens: [][]int{repeatedText(20)}}); err != nil {
		t.Fatal(err)
	}
}

// TestEngineDecodersAgree serves the same requests, joining and leaving a
// running batch, with each decoder: greedy outputs must be identical, and a
// seeded sampled generation reproducible and the same on both.
func TestEngineDecodersAgree(t *testing.T) {
	m, tok := tinyChatModel(t, 128)
	prompts := []string{
		"Welcome, traveller!",
		"The guard",
		"I have not seen the dragon since the winter. Ask",
		"bread",
		"The blacksmith sharpens the sword. The guard watches the gate. Welcome",
	}
	run := func(decoder string) [][]int {
		t.Helper()
		e := startEngine(t, m, tok, EngineConfig{MaxBatch: 4, QueueSize: 16, ScoreBatch: 4, PrefillBatch: 2, Decoder: decoder})
		var streams []*Stream
		for i, p := range prompts {
			r := greedy(tok.Encode(p), 8+4*i)
			if i == 3 {
				r = DefaultSampling()
				r.Prompt, r.MaxTokens, r.Seed, r.Stop = tok.Encode(p), 20, 42, []int{}
			}
			s, err := e.Generate(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			streams = append(streams, s)
			if i == 1 {
				<-s.Tokens() // the rest join a running batch
			}
		}
		out := make([][]int, len(streams))
		for i, s := range streams {
			res, err := s.Wait()
			if err != nil {
				t.Fatalf("%s decoder, request %d: %v", decoder, i, err)
			}
			out[i] = res.Tokens
		}
		return out
	}
	want := run(DecoderGoMLX)
	for _, attempt := range []string{"first", "second"} {
		got := run(DecoderCPU)
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Errorf("%s cpu run: request %d = %v; gomlx decoder = %v", attempt, i, got[i], want[i])
			}
		}
	}
}

func TestEngineConfigDecoder(t *testing.T) {
	for _, tc := range []struct {
		decoder string
		ok      bool
	}{{"", true}, {DecoderCPU, true}, {DecoderGoMLX, true}, {"gpu", false}} {
		c := DefaultEngineConfig()
		c.Decoder = tc.decoder
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(decoder %q) = %v; want ok %v", tc.decoder, err, tc.ok)
		}
	}
	m := newTinyModel(t, 1)
	if got := m.DefaultDecoder(); got != DecoderCPU {
		t.Errorf("DefaultDecoder() on the go backend = %q; want %q", got, DecoderCPU)
	}
}

// BenchmarkQKScores scores one head (hd 32) at every length from 33 to 64,
// a whole tile and a partial one of each size, with qkScores and with
// plain Go: go test -run - -bench QKScores -count 3 ./inference
func BenchmarkQKScores(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const hd, length = 32, 64
	q, kt := randSlice(rng, hd), randSlice(rng, cacheSlot(length, hd))
	scores := make([]float32, length)
	for _, k := range []struct {
		name   string
		scores func(scores, q, kt, next []float32)
	}{{"kernel", qkScores}, {"go", qkScoresGo}} {
		b.Run(k.name, func(b *testing.B) {
			for b.Loop() {
				for n := kvTile + 1; n <= length; n++ {
					k.scores(scores[:n], q, kt, nil)
				}
			}
		})
	}
}
