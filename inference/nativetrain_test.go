package inference

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// TestNativeGemmMatchesNaive checks every micro-kernel this CPU runs, with A
// read in rows and in columns and B packed from rows and from columns, on
// sizes around the kernels' blocks.
func TestNativeGemmMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pool := newCPUPool(2)
	defer pool.close()
	defer func(k microKernel) { trainKernel = k }(trainKernel)
	for _, kern := range trainKernels {
		trainKernel = kern
		for _, tc := range []struct{ m, k, n int }{
			{1, 1, 1}, {5, 7, 3}, {6, 16, 16}, {12, 32, 32}, {7, 17, 33}, {13, 300, 20}, {96, 64, 64},
			{100, 33, 130}, {200, 129, 97}, {31, 600, 45},
		} {
			a, bm := randSlice(rng, tc.m*tc.k), randSlice(rng, tc.k*tc.n)
			at, bt := naiveTranspose(a, tc.m, tc.k), naiveTranspose(bm, tc.k, tc.n)
			var rows, cols packedMatrix
			rows.packRows(pool, bm, tc.k, tc.n, tc.n)
			cols.packCols(pool, bt, tc.n, tc.k, tc.k)
			for _, add := range []bool{false, true} {
				c0 := randSlice(rng, tc.m*tc.n)
				want := slices.Clone(c0)
				for i := range tc.m {
					for j := range tc.n {
						var s float64
						for l := range tc.k {
							s += float64(a[i*tc.k+l]) * float64(bm[l*tc.n+j])
						}
						if add {
							want[i*tc.n+j] += float32(s)
						} else {
							want[i*tc.n+j] = float32(s)
						}
					}
				}
				for _, left := range []leftOperand{{data: a, ld: tc.k}, {data: at, ld: tc.m, trans: true}} {
					for name, p := range map[string]*packedMatrix{"rows": &rows, "cols": &cols} {
						got := slices.Clone(c0)
						gemm(pool, got, tc.n, left, tc.m, p, add)
						if d := maxAbsDiff(got, want); d > 1e-4*math.Sqrt(float64(tc.k)) {
							t.Errorf("kernel %s, %dx%dx%d add=%v, A transposed %v, B packed from %s: max diff %g",
								kern.name, tc.m, tc.k, tc.n, add, left.trans, name, d)
						}
					}
				}
			}
		}
	}
}

func TestNativeExpAffineMatchesExpf(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 7, 8, 9, 31, 64, 100} {
		for _, ab := range [][2]float32{{1, 0}, {1, -3}, {-1, 0}, {0.17, 2}, {40, 0}} {
			src := randSlice(rng, n)
			src[0] = -100 / ab[0] // below expf's range: 0
			dst := make([]float32, n)
			sum := expAffine(dst, src, ab[0], ab[1])
			var want float64
			for i, x := range src {
				e := expf(ab[0]*x + ab[1])
				want += float64(e)
				if d := math.Abs(float64(dst[i]-e)) / math.Max(float64(e), 1e-30); d > 1e-6 && e > 1e-37 {
					t.Errorf("n=%d a=%g b=%g: e^%g = %g; expf %g", n, ab[0], ab[1], ab[0]*x+ab[1], dst[i], e)
				}
			}
			if math.Abs(float64(sum)-want) > 1e-5*want {
				t.Errorf("n=%d a=%g b=%g: sum %g; want %g", n, ab[0], ab[1], sum, want)
			}
		}
	}
}

func naiveTranspose(a []float32, rows, cols int) []float32 {
	t := make([]float32, len(a))
	for r := range rows {
		for c := range cols {
			t[c*rows+r] = a[r*cols+c]
		}
	}
	return t
}

// randomModel has random weights larger than NewModel's, and norms away from
// 1, so every gradient is far from zero.
func randomModel(t testing.TB, c ModelConfig, seed uint64) *Model {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	names, sh := weightShapes(c)
	vals := map[string][]float32{}
	for _, name := range names {
		n := 1
		for _, d := range sh[name] {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			if len(sh[name]) == 1 {
				v[i] = 1 + 0.3*float32(rng.NormFloat64())
			} else {
				v[i] = 0.15 * float32(rng.NormFloat64())
			}
		}
		vals[name] = v
	}
	m, err := newModelWithWeights(c, DefaultBackendConfig(), vals)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// gomlxWeightedLoss returns GoMLX's −Σ w·logp for the sequences and per-log-
// prob weights and its gradient with respect to every weight, by name.
func gomlxWeightedLoss(t testing.TB, m *Model, seqs [][]int, w [][]float32) (float32, map[string][]float32) {
	t.Helper()
	b := Batch{Tokens: seqs}
	for i, s := range seqs {
		b.Weights = append(b.Weights, append([]float32{0}, w[i]...))
		if len(w[i]) != len(s)-1 {
			t.Fatalf("weights %d for %d tokens", len(w[i]), len(s))
		}
	}
	in, tg, wt, err := nextTokenTensors(b, m.cfg.MaxSeq)
	if err != nil {
		t.Fatal(err)
	}
	e, err := context.NewExec(m.Backend(), m.Context(), func(ctx *context.Context, in, tg, wt *graph.Node) []*graph.Node {
		loss := graph.Neg(graph.ReduceAllSum(graph.Mul(m.TokenLogProbs(ctx, in, tg), wt)))
		var nodes []*graph.Node
		for _, name := range m.names {
			scope, vname := weightScope(name)
			nodes = append(nodes, ctx.GetVariableByScopeAndName(scope, vname).ValueGraph(in.Graph()))
		}
		return append([]*graph.Node{loss}, graph.Gradient(loss, nodes...)...)
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.Exec(in, tg, wt)
	if err != nil {
		t.Fatal(err)
	}
	grads := map[string][]float32{}
	for i, name := range m.names {
		grads[name] = tensors.MustCopyFlatData[float32](out[i+1])
	}
	return tensors.ToScalar[float32](out[0]), grads
}

// nativeWeightedLoss is gomlxWeightedLoss on the native trainer.
func nativeWeightedLoss(t testing.TB, tr *NativeTrainer, seqs [][]int, w [][]float32) (float32, map[string][]float32) {
	t.Helper()
	if err := tr.begin(seqs); err != nil {
		t.Fatal(err)
	}
	tr.forward(nil, true)
	flat := make([]float32, 0, tr.a.n)
	for _, r := range w {
		flat = append(flat, r...)
	}
	var loss float64
	for k, lp := range tr.a.logp {
		loss -= float64(flat[k]) * float64(lp)
	}
	tr.backward(flat)
	grads := map[string][]float32{}
	for _, nw := range tr.weights {
		grads[nw.name] = tr.grads[nw.off : nw.off+nw.size]
	}
	return float32(loss), grads
}

// relMaxErr is max|got − want| / max|want|.
func relMaxErr(got, want []float32) float64 {
	top := 0.0
	for _, v := range want {
		top = math.Max(top, math.Abs(float64(v)))
	}
	return maxAbsDiff(got, want) / math.Max(top, 1e-30)
}

// TestNativeGradientsMatchGoMLX checks every weight's gradient of a weighted
// log-prob loss against GoMLX's autodiff of the same loss, on sizes that are
// and are not multiples of the kernels' blocks, with sequences of different
// lengths (GoMLX pads them, the native trainer packs them), zero weights (a
// loss mask) and negative ones (an RL advantage).
func TestNativeGradientsMatchGoMLX(t *testing.T) {
	configs := map[string]ModelConfig{
		"tiny":        tinyConfig(),
		"odd":         oddConfig(),
		"headdim32":   headDim32Config(),
		"one-head":    {VocabSize: 37, Dim: 16, Layers: 2, Heads: 1, FFNDim: 24, MaxSeq: 64, RopeBase: 10000, NormEps: 1e-5},
		"wide-vocab":  {VocabSize: 300, Dim: 48, Layers: 1, Heads: 4, FFNDim: 100, MaxSeq: 64, RopeBase: 500, NormEps: 1e-6},
		"parallel-mm": {VocabSize: 211, Dim: 64, Layers: 2, Heads: 4, FFNDim: 176, MaxSeq: 64, RopeBase: 10000, NormEps: 1e-5},
		// Logit rows of 4 KiB: the head's buffer is padded (paddedStride).
		"padded-head": {VocabSize: 1024, Dim: 32, Layers: 1, Heads: 2, FFNDim: 40, MaxSeq: 64, RopeBase: 10000, NormEps: 1e-5},
	}
	defer func(k microKernel) { trainKernel = k }(trainKernel)
	for _, kern := range trainKernels {
		trainKernel = kern
		for _, name := range slices.Sorted(maps.Keys(configs)) {
			t.Run(kern.name+"/"+name, func(t *testing.T) {
				checkNativeGradients(t, configs[name], uint64(len(name)))
			})
		}
	}
}

// checkNativeGradients compares the native and GoMLX gradients of a random
// model of configuration c on a random batch.
func checkNativeGradients(t *testing.T, c ModelConfig, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	m := randomModel(t, c, uint64(c.Dim))
	tr, err := NewNativeTrainer(m, DefaultTrainConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var seqs [][]int
	var w [][]float32
	for _, n := range []int{9, 30, 2, 17, 61} {
		s := make([]int, n)
		for i := range s {
			s[i] = rng.IntN(c.VocabSize)
		}
		ws := make([]float32, n-1)
		for i := range ws {
			switch rng.IntN(4) {
			case 0: // masked
			case 1:
				ws[i] = -rng.Float32()
			default:
				ws[i] = rng.Float32()
			}
		}
		seqs, w = append(seqs, s), append(w, ws)
	}
	wantLoss, want := gomlxWeightedLoss(t, m, seqs, w)
	gotLoss, got := nativeWeightedLoss(t, tr, seqs, w)
	if d := math.Abs(float64(gotLoss - wantLoss)); d > 1e-4*math.Max(1, math.Abs(float64(wantLoss))) {
		t.Errorf("loss %g; GoMLX %g", gotLoss, wantLoss)
	}
	worst, worstName := 0.0, ""
	for _, wn := range m.names {
		e := relMaxErr(got[wn], want[wn])
		if e > 1e-4 {
			t.Errorf("%s: relative max-norm error %.2g", wn, e)
		}
		if e > worst {
			worst, worstName = e, wn
		}
	}
	t.Logf("loss %.5f (GoMLX %.5f); worst gradient error %.2g at %s", gotLoss, wantLoss, worst, worstName)
}

// sftBatch is a batch of slices of a periodic text with a loss mask on the
// first tokens of every other sequence.
func sftBatch(text []int, step int) Batch {
	var b Batch
	for i := range 4 {
		n := 12 + (step+i*5)%21
		off := (step*7 + i*13) % (len(text) - n)
		s := text[off : off+n]
		w := make([]float32, n)
		for j := range w {
			if i%2 == 0 || j > n/2 {
				w[j] = 1
			}
		}
		b.Tokens, b.Weights = append(b.Tokens, s), append(b.Weights, w)
	}
	return b
}

// TestNativeStepsMatchGoMLXTrainer trains two copies of a model, one with
// each trainer, on the same masked batches: the loss curves agree.
func TestNativeStepsMatchGoMLXTrainer(t *testing.T) {
	cfg := DefaultTrainConfig()
	cfg.LearningRate, cfg.WarmupSteps, cfg.Schedule, cfg.TotalSteps = 3e-3, 5, "cosine", 40
	checkNativeStepsMatch(t, newTinyModel(t, 11), cfg, 30)
}

// checkNativeStepsMatch trains m and a clone of it, one with each trainer
// under cfg, for steps steps of masked batches (sftBatch): the losses agree
// within 1e-3 at every step, and so do the last gradient norms.
func checkNativeStepsMatch(t *testing.T, m *Model, cfg TrainConfig, steps int) {
	t.Helper()
	mn, err := m.Clone()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := NewTrainer(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	nt, err := NewNativeTrainer(mn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer nt.Close()
	text := repeatedText(400)
	worst := 0.0
	var first, last [2]float32
	for s := range steps {
		b := sftBatch(text, s)
		want, err := ref.Step(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := nt.Step(b)
		if err != nil {
			t.Fatal(err)
		}
		worst = math.Max(worst, math.Abs(float64(got-want)))
		if s == 0 {
			first = [2]float32{got, want}
		}
		last = [2]float32{got, want}
		if math.Abs(float64(got-want)) > 1e-3 {
			t.Errorf("step %d: native loss %.5f, GoMLX %.5f", s, got, want)
		}
	}
	if n := nt.LastGradNorm(); math.Abs(float64(n-ref.LastGradNorm())) > 1e-3*float64(n) {
		t.Errorf("last gradient norm %g; GoMLX %g", n, ref.LastGradNorm())
	}
	t.Logf("loss %.4f -> %.4f (GoMLX %.4f -> %.4f); worst difference %.2g over %d steps",
		first[0], last[0], first[1], last[1], worst, steps)
}

// TestNativeWeightedStepFollowsSign gives one sequence a positive weight
// (advantage) and another a negative one: a step raises the log-probs of
// the first and lowers those of the second.
func TestNativeWeightedStepFollowsSign(t *testing.T) {
	m := newTinyModel(t, 12)
	cfg := DefaultTrainConfig()
	cfg.WarmupSteps = 0
	tr, err := NewNativeTrainer(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	good, bad := repeatedText(20), []int{50, 3, 27, 44, 8, 19, 61, 30, 2, 55, 13, 38}
	seqs := [][]int{good, bad}
	before, err := tr.LogProbs(seqs)
	if err != nil {
		t.Fatal(err)
	}
	advantage := []float32{1, -1}
	var sawLogp [][]float32
	_, err = tr.StepWeighted(seqs, func(logp [][]float32) ([][]float32, float32, error) {
		sawLogp = logp
		w := make([][]float32, len(logp))
		var loss float32
		for i, lp := range logp {
			w[i] = make([]float32, len(lp))
			for j := range lp {
				w[i][j] = advantage[i] / float32(len(lp))
				loss -= w[i][j] * lp[j]
			}
		}
		return w, loss, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range seqs {
		if d := maxAbsDiff(sawLogp[i], before[i]); d != 0 {
			t.Errorf("sequence %d: the step's log-probs differ from LogProbs by %g", i, d)
		}
	}
	after, err := tr.LogProbs(seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range seqs {
		var delta float64
		for j := range after[i] {
			delta += float64(after[i][j]-before[i][j]) / float64(len(after[i]))
		}
		t.Logf("advantage %+g: mean log-prob change %+.4f", advantage[i], delta)
		if delta*float64(advantage[i]) <= 0 {
			t.Errorf("sequence %d with advantage %g: mean log-prob moved by %g", i, advantage[i], delta)
		}
	}
	// The model's own graphs see the trained weights.
	viaModel, err := m.SequenceLogProbs(seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range seqs {
		if d := maxAbsDiff(viaModel[i], after[i]); d > 1e-4 {
			t.Errorf("sequence %d: Model.SequenceLogProbs differs from the trainer's by %g", i, d)
		}
	}
}

// TestNativeLogProbsMatchKeptForward checks that LogProbs, which reuses one
// block's buffers for every block, gives bit for bit the log-probs of the
// forward that keeps them all for a backward, before and after one.
func TestNativeLogProbsMatchKeptForward(t *testing.T) {
	c := tinyConfig()
	c.Layers = 3
	m, err := NewModel(c, DefaultBackendConfig(), 5)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewNativeTrainer(m, DefaultTrainConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	seqs := [][]int{repeatedText(40), {5, 9, 2}, repeatedText(17)}
	first, err := tr.LogProbs(seqs)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.begin(seqs); err != nil {
		t.Fatal(err)
	}
	tr.forward(nil, true)
	kept := tr.splitLogProbs()
	again, err := tr.LogProbs(seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range seqs {
		if d := maxAbsDiff(first[i], kept[i]); d != 0 {
			t.Errorf("sequence %d: LogProbs differs from the kept forward by %g", i, d)
		}
		if d := maxAbsDiff(again[i], kept[i]); d != 0 {
			t.Errorf("sequence %d: LogProbs after a kept forward differs by %g", i, d)
		}
	}
}

// TestNativeCheckpointRoundTrip saves a model trained natively and loads it
// on the GoMLX path, and trains the loaded one with GoMLX and reads that
// back into a native trainer: both paths give the same log-probs.
func TestNativeCheckpointRoundTrip(t *testing.T) {
	checkNativeCheckpointRoundTrip(t, tinyConfig())
}

// checkNativeCheckpointRoundTrip trains a model of cfg natively, saves it
// and loads it back: GoMLX's log-probs equal the trainer's and the CPU
// decoder's logits equal GoMLX's; then the loaded model trained on GoMLX
// and saved again gives a native trainer the same log-probs.
func checkNativeCheckpointRoundTrip(t *testing.T, cfg ModelConfig) {
	t.Helper()
	tok := tinyTokenizer(t)
	cfg.VocabSize = tok.VocabSize()
	m, err := NewModel(cfg, DefaultBackendConfig(), 13)
	if err != nil {
		t.Fatal(err)
	}
	nt, err := NewNativeTrainer(m, DefaultTrainConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer nt.Close()
	seqs := [][]int{tok.Encode("The guard watches the gate."), tok.Encode("Welcome, traveller!")}
	for range 5 {
		if _, err := nt.Step(Batch{Tokens: seqs}); err != nil {
			t.Fatal(err)
		}
	}
	native, err := nt.LogProbs(seqs)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "npc", "v1")
	if err := SaveCheckpoint(dir, m, tok, testManifest()); err != nil {
		t.Fatal(err)
	}
	loaded, _, _, err := LoadCheckpoint(dir, DefaultBackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	viaGoMLX, err := loaded.SequenceLogProbs(seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range seqs {
		if d := maxAbsDiff(viaGoMLX[i], native[i]); d > 1e-4 {
			t.Errorf("natively trained checkpoint, sequence %d: GoMLX log-probs differ by %g", i, d)
		}
	}
	runDecoderParity(t, loaded, rand.New(rand.NewPCG(5, 6)))
	// The other way: train the loaded model on GoMLX, then a native
	// trainer on a fresh load of its checkpoint sees the same model.
	gt, err := NewTrainer(loaded, DefaultTrainConfig())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := gt.Step(Batch{Tokens: seqs}); err != nil {
			t.Fatal(err)
		}
	}
	dir2 := filepath.Join(t.TempDir(), "npc", "v2")
	if err := SaveCheckpoint(dir2, loaded, tok, testManifest()); err != nil {
		t.Fatal(err)
	}
	want, err := loaded.SequenceLogProbs(seqs)
	if err != nil {
		t.Fatal(err)
	}
	back, _, _, err := LoadCheckpoint(dir2, DefaultBackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	nt2, err := NewNativeTrainer(back, DefaultTrainConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer nt2.Close()
	got, err := nt2.LogProbs(seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range seqs {
		if d := maxAbsDiff(got[i], want[i]); d > 1e-4 {
			t.Errorf("GoMLX-trained checkpoint, sequence %d: native log-probs differ by %g", i, d)
		}
	}
}

// TestNativeTrainerRereadsRestoredWeights changes the model's weights behind
// the trainer's back (a restore): the next call uses them.
func TestNativeTrainerRereadsRestoredWeights(t *testing.T) {
	m := newTinyModel(t, 14)
	other := newTinyModel(t, 15)
	tr, err := NewNativeTrainer(m, DefaultTrainConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	seqs := [][]int{repeatedText(15)}
	if _, err := tr.LogProbs(seqs); err != nil {
		t.Fatal(err)
	}
	vals, _, err := other.Weights()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range m.names {
		scope, vname := weightScope(name)
		v := m.ctx.GetVariableByScopeAndName(scope, vname)
		if err := v.SetValue(tensors.FromFlatDataAndDimensions(vals[name], v.Shape().Dimensions...)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := tr.LogProbs(seqs)
	if err != nil {
		t.Fatal(err)
	}
	want, err := other.SequenceLogProbs(seqs)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(got[0], want[0]); d > 1e-4 {
		t.Errorf("log-probs after a restore differ from the restored model's by %g", d)
	}
}

func TestNativeTrainerRejectsBadBatches(t *testing.T) {
	m := newTinyModel(t, 16)
	tr, err := NewNativeTrainer(m, DefaultTrainConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		b    Batch
		want string
	}{
		{"empty", Batch{}, "empty batch"},
		{"short", Batch{Tokens: [][]int{{1}}}, "need at least 2"},
		{"out of vocabulary", Batch{Tokens: [][]int{{1, 64}}}, "outside vocabulary"},
		{"too long", Batch{Tokens: [][]int{make([]int, 66)}}, "too long"},
		{"weights", Batch{Tokens: [][]int{{1, 2}}, Weights: [][]float32{{1}}}, "1 weights for 2 tokens"},
	} {
		if _, err := tr.Step(tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Step error %v; want one containing %q", tc.name, err, tc.want)
		}
	}
	tr.Close()
	if _, err := tr.Step(Batch{Tokens: [][]int{{1, 2}}}); err == nil {
		t.Error("Step after Close succeeded")
	}
}

// benchBatch is the issue's measurement batch, 16×128 tokens (plus one
// target each) of a vocabulary of 2048; the default model is its size.
func benchBatch() Batch { return randomBatch(16, 128, 2048) }

// randomBatch is rows sequences of seq+1 random tokens below vocab.
func randomBatch(rows, seq, vocab int) Batch {
	rng := rand.New(rand.NewPCG(1, 1))
	var b Batch
	for range rows {
		s := make([]int, seq+1)
		for i := range s {
			s[i] = rng.IntN(vocab)
		}
		b.Tokens = append(b.Tokens, s)
	}
	return b
}

func BenchmarkNativeTrainStep(b *testing.B) {
	benchNativeTrainStep(b, DefaultModelConfig())
}

// BenchmarkNativeTrainStepLarger times the native trainer at about 5M and
// 15M parameters (GoMLX takes minutes per step there).
func BenchmarkNativeTrainStepLarger(b *testing.B) {
	c5, c15 := DefaultModelConfig(), DefaultModelConfig()
	c5.Dim, c5.Layers, c5.Heads, c5.FFNDim = 256, 6, 8, 768
	c15.Dim, c15.Layers, c15.Heads, c15.FFNDim = 384, 8, 6, 1152
	for _, c := range []ModelConfig{c5, c15} {
		b.Run(fmt.Sprintf("params=%.1fM", float64(c.Params())/1e6), func(b *testing.B) {
			benchNativeTrainStep(b, c)
		})
	}
}

func benchNativeTrainStep(b *testing.B, c ModelConfig) {
	m, err := NewModel(c, DefaultBackendConfig(), 1)
	if err != nil {
		b.Fatal(err)
	}
	tr, err := NewNativeTrainer(m, DefaultTrainConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	benchTrainStep(b, c, tr.Step)
}

// benchTrainStep times step on benchBatch and reports tokens/s and GFLOP/s
// (6·params per token plus the attention's products, forward and backward).
func benchTrainStep(b *testing.B, c ModelConfig, step func(Batch) (float32, error)) {
	benchTrainStepOn(b, c, benchBatch(), step)
}

// benchTrainStepOn is benchTrainStep on a batch of equal-length sequences.
func benchTrainStepOn(b *testing.B, c ModelConfig, batch Batch, step func(Batch) (float32, error)) {
	if _, err := step(batch); err != nil { // warm up (GoMLX compiles here)
		b.Fatal(err)
	}
	rows, seq := len(batch.Tokens), len(batch.Tokens[0])-1
	b.ResetTimer()
	for range b.N {
		if _, err := step(batch); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(rows*seq)/sec, "tokens/s")
	b.ReportMetric(trainFLOPs(c, rows, seq)/sec/1e9, "GFLOP/s")
}

// trainFLOPs counts a training step's arithmetic: 6 FLOPs per weight and
// token, plus causal attention (q·k and p·v, 2·T²/2·D multiply-adds each per
// layer and sequence, three times over for forward and backward).
func trainFLOPs(c ModelConfig, batch, seq int) float64 {
	tokens := float64(batch * seq)
	attn := 3 * 2 * 2 * float64(c.Layers) * float64(batch) * float64(seq*seq) / 2 * float64(c.Dim)
	return 6*float64(c.Params())*tokens + attn
}

func ExampleNativeTrainer_StepWeighted() {
	m, _ := NewModel(ModelConfig{VocabSize: 16, Dim: 8, Layers: 1, Heads: 2, FFNDim: 16, MaxSeq: 16, RopeBase: 10000, NormEps: 1e-5}, DefaultBackendConfig(), 1)
	tr, _ := NewNativeTrainer(m, DefaultTrainConfig())
	defer tr.Close()
	// A policy-gradient step: each token's weight is its sequence's
	// advantage over its length.
	adv := []float32{1, -0.5}
	_, err := tr.StepWeighted([][]int{{1, 2, 3}, {4, 5, 6, 7}}, func(logp [][]float32) ([][]float32, float32, error) {
		w := make([][]float32, len(logp))
		var loss float32
		for i, lp := range logp {
			for _, l := range lp {
				w[i] = append(w[i], adv[i]/float32(len(lp)))
				loss -= adv[i] / float32(len(lp)) * l
			}
		}
		return w, loss, nil
	})
	fmt.Println(err, tr.Steps())
	// Output: <nil> 1
}

// BenchmarkNativeLogProbsMemory reports the heap a forward over 16×512
// tokens of the default model leaves in the trainer's activations
// (held-B/op) and allocates in all (alloc-B/op): LogProbs, which keeps
// only what the forward needs, against the forward that keeps every
// block's activations for a backward.
func BenchmarkNativeLogProbsMemory(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	seqs := make([][]int, 16)
	for i := range seqs {
		seqs[i] = make([]int, 513)
		for j := range seqs[i] {
			seqs[i][j] = rng.IntN(2048)
		}
	}
	for _, keep := range []bool{true, false} {
		b.Run(fmt.Sprintf("keep=%v", keep), func(b *testing.B) {
			m, err := NewModel(DefaultModelConfig(), DefaultBackendConfig(), 1)
			if err != nil {
				b.Fatal(err)
			}
			var held, alloc float64
			for range b.N {
				tr, err := NewNativeTrainer(m, DefaultTrainConfig())
				if err != nil {
					b.Fatal(err)
				}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				if err := tr.begin(seqs); err != nil {
					b.Fatal(err)
				}
				tr.forward(nil, keep)
				runtime.GC()
				runtime.ReadMemStats(&after)
				runtime.KeepAlive(tr)
				held += float64(after.HeapAlloc) - float64(before.HeapAlloc)
				alloc += float64(after.TotalAlloc - before.TotalAlloc)
				tr.Close()
			}
			b.ReportMetric(held/float64(b.N), "held-B/op")
			b.ReportMetric(alloc/float64(b.N), "alloc-B/op")
		})
	}
}
