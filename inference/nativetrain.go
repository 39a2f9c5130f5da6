package inference

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// NativeTrainer updates a Model's weights in place with AdamW, as Trainer
// does, but computes the forward and backward passes itself in Go on the
// CPU (nativetrain_layers.go), with the matrix products on a packed
// micro-kernel (nativetrain_gemm.go) and both cores busy, instead of through
// GoMLX's pure-Go backend. The learning-rate schedule, weight decay, clipping
// and the update are TrainConfig's, as in Trainer; gradients are checked
// against GoMLX's autodiff in nativetrain_test.go. It implements every
// ModelConfig, the open-weight ones included (grouped-query attention, any
// head dim, q/k/v biases, an untied head, Llama 3's rope scaling, checked
// in nativetrain_openweights_test.go), on the checkpoint's weights.
//
// The loss is given as per-token weights on ∇log p: the backward computes
// the gradient of −Σ w·log p(target), so the one pass serves SFT (weights
// from loss masks, normalised) and RL (the weights are the derivative of a
// surrogate with respect to each token's log-prob, computed by the caller
// from the log-probs the forward returns, see StepWeighted).
//
// The trainer keeps its own copy of the weights and writes them back into
// the Model after every step, so checkpoints, the GoMLX graphs and the CPU
// decoder see the trained weights; a weight changed in the Model by others
// (a restore) is read back before the next step. A NativeTrainer is not safe
// for concurrent use; Close stops its goroutines.
type NativeTrainer struct {
	m    *Model
	mc   ModelConfig
	cfg  TrainConfig
	pool *cpuPool

	mu       sync.Mutex
	step     int
	lastNorm float32

	// params, grads and AdamW's moments are each one buffer with the model's
	// weights one after the other in checkpoint order (weightShapes), except
	// that a layer's q, k and v biases follow its v weight, so the stacked
	// projections (q, k, v and their biases; gate, up) are contiguous.
	params, grads, adamM, adamV []float32
	weights                     []nativeWeight
	vars                        []*mlctx.Variable
	seen                        []*tensors.Tensor // the values last read from or written to the model
	packed                      bool              // the linears' packs match params

	emb, norm, dEmb, dNorm []float32
	head                   nativeLinear // the LM head: lm_head, or emb when tied
	dHead                  []float32    // head's gradient: dEmb when tied
	blocks                 []nativeBlock
	cos, sin               []float32
	a                      nativeActs
}

// nativeWeight is one of the model's weights inside the trainer's buffers.
type nativeWeight struct {
	name      string
	off, size int
	dims      []int
}

// nativeBlock is one transformer block's weights and gradients, views into
// the trainer's buffers.
type nativeBlock struct {
	attnNorm, mlpNorm, dAttnNorm, dMlpNorm []float32
	qkv, o, gateUp, down                   nativeLinear
	dQKV, dO, dGateUp, dDown               []float32
	qkvBias, dQKVBias                      []float32 // nil without biases
}

// nativeActs are the activations of one batch, grown as needed: the
// forward's, kept for the backward, and the backward's scratch.
type nativeActs struct {
	n                 int // token rows: the batch's sequences back to back
	probs             int // attention probabilities of one block: Σ heads·len²
	toks, tgts, pos   []int
	sel, tgtSel       []int // the rows through the LM head and their targets
	seqs              []seqSpan
	blocks            []blockActs
	xf, rstdF, hf     []float32 // the last residual and its norm
	hsel, logits, inv []float32 // the head over the rows in sel; logits rows head.ldy apart
	logp              []float32 // [len(sel)]
	dres, dhn, dqkv   []float32
	datt, dgu, dact   []float32
	dhsel, partial    []float32
}

// blockActs are what one block's forward keeps for its backward.
type blockActs struct {
	x, rstd1, hn1, qkv, probs, att []float32
	xmid, rstd2, hn2, gu, act      []float32
}

// NewNativeTrainer reads m's weights and prepares AdamW state for them.
func NewNativeTrainer(m *Model, cfg TrainConfig) (*NativeTrainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, err := m.weightsContext()
	if err != nil {
		return nil, fmt.Errorf("native trainer: %w", err)
	}
	c := m.cfg
	t := &NativeTrainer{m: m, mc: c, cfg: cfg}
	names, dims := weightShapes(c)
	for _, name := range names {
		size := 1
		for _, d := range dims[name] {
			size *= d
		}
		t.weights = append(t.weights, nativeWeight{name: name, size: size, dims: dims[name]})
		scope, vname := weightScope(name)
		v := ctx.GetVariableByScopeAndName(scope, vname)
		if v == nil {
			return nil, fmt.Errorf("native trainer: weight %q not in context", name)
		}
		t.vars = append(t.vars, v)
	}
	total := t.placeWeights()
	t.params, t.grads = make([]float32, total), make([]float32, total)
	t.adamM, t.adamV = make([]float32, total), make([]float32, total)
	t.seen = make([]*tensors.Tensor, len(names))
	t.layOut()
	if err := t.readModel(); err != nil {
		return nil, err
	}
	t.cos, t.sin = ropeTables(c)
	t.pool = newCPUPool(runtime.GOMAXPROCS(0) - 1)
	return t, nil
}

// placeWeights sets every weight's offset in the buffers, in checkpoint
// order but with each layer's q, k and v biases moved after its v weight,
// and returns the total size.
func (t *NativeTrainer) placeWeights() int {
	total := 0
	var biases []*nativeWeight
	place := func(w *nativeWeight) {
		w.off = total
		total += w.size
	}
	for i := range t.weights {
		w := &t.weights[i]
		if !strings.HasSuffix(w.name, "_proj.bias") {
			place(w)
			continue
		}
		if biases = append(biases, w); strings.HasSuffix(w.name, "v_proj.bias") {
			for _, b := range biases {
				place(b)
			}
			biases = biases[:0]
		}
	}
	return total
}

// qkvWidth is the width of the stacked query, key and value projections.
func qkvWidth(c ModelConfig) int { return (c.Heads + 2*c.KVHeadCount()) * c.HeadDim() }

// layOut points the blocks' views into the buffers.
func (t *NativeTrainer) layOut() {
	c := t.mc
	D, F, Q, W := c.Dim, c.FFNDim, c.Heads*c.HeadDim(), qkvWidth(c)
	offs := make(map[string]int, len(t.weights))
	for _, w := range t.weights {
		offs[w.name] = w.off
	}
	// view returns n values of params and grads from weight name on.
	view := func(name string, n int) (p, g []float32) {
		at := offs[name]
		return t.params[at : at+n : at+n], t.grads[at : at+n : at+n]
	}
	t.emb, t.dEmb = view("model.embed_tokens.weight", c.VocabSize*D)
	head := t.emb
	t.dHead = t.dEmb
	if c.UntiedHead {
		head, t.dHead = view("lm_head.weight", c.VocabSize*D)
	}
	t.head = newNativeLinear(head, c.VocabSize, D, paddedStride(c.VocabSize))
	t.blocks = make([]nativeBlock, c.Layers)
	for i := range t.blocks {
		b, l := &t.blocks[i], fmt.Sprintf("model.layers.%d.", i)
		b.attnNorm, b.dAttnNorm = view(l+"input_layernorm.weight", D)
		var w []float32
		w, b.dQKV = view(l+"self_attn.q_proj.weight", W*D)
		b.qkv = newNativeLinear(w, W, D, W)
		if c.QKVBias {
			b.qkvBias, b.dQKVBias = view(l+"self_attn.q_proj.bias", W)
		}
		w, b.dO = view(l+"self_attn.o_proj.weight", D*Q)
		b.o = newNativeLinear(w, D, Q, D)
		b.mlpNorm, b.dMlpNorm = view(l+"post_attention_layernorm.weight", D)
		w, b.dGateUp = view(l+"mlp.gate_proj.weight", 2*F*D)
		b.gateUp = newNativeLinear(w, 2*F, D, 2*F)
		w, b.dDown = view(l+"mlp.down_proj.weight", D*F)
		b.down = newNativeLinear(w, D, F, D)
	}
	t.norm, t.dNorm = view("model.norm.weight", D)
}

// Close stops the trainer's goroutines.
func (t *NativeTrainer) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pool != nil {
		t.pool.close()
		t.pool = nil
	}
}

// Steps is the number of steps taken so far.
func (t *NativeTrainer) Steps() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.step
}

// LastGradNorm is the global gradient norm (before clipping) of the last step.
func (t *NativeTrainer) LastGradNorm() float32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastNorm
}

// readModel copies into params every weight whose value in the model is not
// the one last seen.
func (t *NativeTrainer) readModel() error {
	for i, v := range t.vars {
		val, err := v.Value()
		if err != nil {
			return fmt.Errorf("native trainer: read weight %q: %w", t.weights[i].name, err)
		}
		if val == t.seen[i] {
			continue
		}
		w := t.weights[i]
		if val.Size() != w.size {
			return fmt.Errorf("native trainer: weight %q has %d values, want %d", w.name, val.Size(), w.size)
		}
		var badType error
		err = val.ConstFlatData(func(flat any) {
			if f, ok := flat.([]float32); ok {
				copy(t.params[w.off:w.off+w.size], f)
			} else {
				badType = fmt.Errorf("native trainer: weight %q is %T, want float32", w.name, flat)
			}
		})
		if err = errors.Join(err, badType); err != nil {
			return err
		}
		t.seen[i], t.packed = val, false
	}
	return nil
}

// writeModel gives every weight of the model the trainer's current value.
// The old values are left to the garbage collector, not freed, as a
// concurrent reader may still hold them.
func (t *NativeTrainer) writeModel() error {
	for i, w := range t.weights {
		val := tensors.FromFlatDataAndDimensions(t.params[w.off:w.off+w.size], w.dims...)
		if err := t.vars[i].SetValuePreservingOld(val); err != nil {
			return fmt.Errorf("native trainer: write weight %q: %w", w.name, err)
		}
		t.seen[i] = val
	}
	return nil
}

// errClosed is returned by a NativeTrainer used after Close.
var errClosed = errors.New("inference: native trainer closed")

// begin syncs with the model and lays the batch out; the caller holds mu.
func (t *NativeTrainer) begin(seqs [][]int) error {
	if t.pool == nil {
		return errClosed
	}
	if err := t.readModel(); err != nil {
		return err
	}
	return t.layoutBatch(seqs)
}

// layoutBatch sets the rows of the batch: the inputs seq[:len−1] of every
// sequence back to back, their targets seq[1:] and positions.
func (t *NativeTrainer) layoutBatch(seqs [][]int) error {
	if len(seqs) == 0 {
		return errors.New("empty batch")
	}
	a := &t.a
	a.toks, a.tgts, a.pos, a.seqs = a.toks[:0], a.tgts[:0], a.pos[:0], a.seqs[:0]
	probs := 0
	for i, s := range seqs {
		if len(s) < 2 {
			return fmt.Errorf("sequence %d has %d tokens, need at least 2", i, len(s))
		}
		if len(s)-1 > t.mc.MaxSeq {
			return fmt.Errorf("sequence of %d tokens exceeds %d: %w", len(s), t.mc.MaxSeq+1, ErrTooLong)
		}
		for _, id := range s {
			if id < 0 || id >= t.mc.VocabSize {
				return fmt.Errorf("sequence %d: token id %d outside vocabulary of %d", i, id, t.mc.VocabSize)
			}
		}
		L := len(s) - 1
		a.seqs = append(a.seqs, seqSpan{off: len(a.toks), len: L, probOff: probs})
		probs += t.mc.Heads * L * L
		for j := range L {
			a.toks, a.tgts, a.pos = append(a.toks, s[j]), append(a.tgts, s[j+1]), append(a.pos, j)
		}
	}
	a.n, a.probs = len(a.toks), probs
	return nil
}

// growActs sizes the activations for the batch laid out: every block's,
// with its attention probabilities, when keep is set (a backward follows),
// else only the first block's without probabilities, which a forward-only
// pass reuses for every block.
func (t *NativeTrainer) growActs(keep bool) {
	a := &t.a
	n, D, F, Q, W := a.n, t.mc.Dim, t.mc.FFNDim, t.mc.Heads*t.mc.HeadDim(), qkvWidth(t.mc)
	if len(a.blocks) != t.mc.Layers {
		a.blocks = make([]blockActs, t.mc.Layers)
	}
	blocks := a.blocks
	if !keep {
		blocks = blocks[:1]
	}
	for i := range blocks {
		b := &blocks[i]
		grow(&b.x, n*D)
		grow(&b.rstd1, n)
		grow(&b.hn1, n*D)
		grow(&b.qkv, n*W)
		if keep {
			grow(&b.probs, a.probs)
		}
		grow(&b.att, n*Q)
		grow(&b.xmid, n*D)
		grow(&b.rstd2, n)
		grow(&b.hn2, n*D)
		grow(&b.gu, n*2*F)
		grow(&b.act, n*F)
	}
	grow(&a.xf, n*D)
	grow(&a.rstdF, n)
	grow(&a.hf, n*D)
}

// forward runs the model over the batch laid out by layoutBatch and puts
// into a.logp the log-probabilities of the targets of the rows in sel (all
// rows when sel is nil). With keep it keeps every block's activations for
// backward; without, the blocks run one after the other in the first
// block's buffers and the attention probabilities stay in per-head scratch,
// with the same arithmetic, so the log-probs are the same.
func (t *NativeTrainer) forward(sel []int, keep bool) {
	c, a, p := t.mc, &t.a, t.pool
	n, D, F := a.n, c.Dim, c.FFNDim
	hd, W := c.HeadDim(), qkvWidth(c)
	eps := float32(c.NormEps)
	t.growActs(keep)
	if !t.packed {
		t.head.pack(p)
		for i := range t.blocks {
			b := &t.blocks[i]
			b.qkv.pack(p)
			b.o.pack(p)
			b.gateUp.pack(p)
			b.down.pack(p)
		}
		t.packed = true
	}
	embeddingForward(a.blocks[0].x, t.emb, a.toks, D)
	for l := range t.blocks {
		b, ba, probs := &t.blocks[l], &a.blocks[0], []float32(nil)
		if keep {
			ba, probs = &a.blocks[l], a.blocks[l].probs
		}
		rmsnormForward(p, ba.hn1, ba.rstd1, ba.x, b.attnNorm, n, D, eps)
		linearForward(p, ba.qkv, ba.hn1, &b.qkv, n, false)
		if b.qkvBias != nil {
			biasForward(p, ba.qkv, b.qkvBias, n, W)
		}
		ropeForward(p, ba.qkv, a.pos, t.cos, t.sin, n, W, (c.Heads+c.KVHeadCount())*hd, hd)
		attentionForward(p, ba.att, probs, ba.qkv, a.seqs, c.Heads, c.KVHeadCount(), hd)
		copy(ba.xmid, ba.x)
		linearForward(p, ba.xmid, ba.att, &b.o, n, true)
		rmsnormForward(p, ba.hn2, ba.rstd2, ba.xmid, b.mlpNorm, n, D, eps)
		linearForward(p, ba.gu, ba.hn2, &b.gateUp, n, false)
		swigluForward(p, ba.act, ba.gu, n, F)
		next := a.xf
		switch {
		case l+1 == len(t.blocks):
		case keep:
			next = a.blocks[l+1].x
		default:
			next = ba.x // x is in xmid already
		}
		copy(next, ba.xmid)
		linearForward(p, next, ba.act, &b.down, n, true)
	}
	rmsnormForward(p, a.hf, a.rstdF, a.xf, t.norm, n, D, eps)
	if sel == nil {
		sel = a.sel[:0]
		for j := range n {
			sel = append(sel, j)
		}
	}
	a.sel = sel
	s, V := len(sel), c.VocabSize
	hsel := grow(&a.hsel, s*D)
	a.tgtSel = a.tgtSel[:0]
	for k, j := range sel {
		copy(hsel[k*D:(k+1)*D], a.hf[j*D:(j+1)*D])
		a.tgtSel = append(a.tgtSel, a.tgts[j])
	}
	logits := grow(&a.logits, s*t.head.ldy)
	linearForward(p, logits, hsel, &t.head, s, false)
	logSoftmaxForward(p, grow(&a.inv, s), grow(&a.logp, s), logits, a.tgtSel, s, V, t.head.ldy)
}

// backward computes into grads the gradient of −Σ_k w[k]·logp[k] over the
// rows selected by the last forward.
func (t *NativeTrainer) backward(w []float32) {
	c, a, p := t.mc, &t.a, t.pool
	n, D, F, V, s := a.n, c.Dim, c.FFNDim, c.VocabSize, len(a.sel)
	hd, Q, W := c.HeadDim(), c.Heads*c.HeadDim(), qkvWidth(c)
	clear(t.grads)
	logSoftmaxBackward(p, a.logits, a.inv, w, a.tgtSel, s, V, t.head.ldy)
	dhsel := grow(&a.dhsel, s*D)
	clear(dhsel)
	linearBackward(p, dhsel, t.dHead, a.logits, a.hsel, &t.head, s)
	dhn := grow(&a.dhn, n*D)
	clear(dhn)
	for k, j := range a.sel {
		copy(dhn[j*D:(j+1)*D], dhsel[k*D:(k+1)*D])
	}
	dres := grow(&a.dres, n*D)
	clear(dres)
	partial := grow(&a.partial, rowChunks*max(D, W))
	rmsnormBackward(p, dres, t.dNorm, dhn, a.xf, t.norm, a.rstdF, partial, n, D)
	dqkv, datt := grow(&a.dqkv, n*W), grow(&a.datt, n*Q)
	dgu, dact := grow(&a.dgu, n*2*F), grow(&a.dact, n*F)
	for l := len(t.blocks) - 1; l >= 0; l-- {
		b, ba := &t.blocks[l], &a.blocks[l]
		// dres is the gradient of the block's output, which is xmid plus
		// the MLP's output.
		clear(dact)
		linearBackward(p, dact, b.dDown, dres, ba.act, &b.down, n)
		swigluBackward(p, dgu, dact, ba.gu, n, F)
		clear(dhn)
		linearBackward(p, dhn, b.dGateUp, dgu, ba.hn2, &b.gateUp, n)
		rmsnormBackward(p, dres, b.dMlpNorm, dhn, ba.xmid, b.mlpNorm, ba.rstd2, partial, n, D)
		// dres is now xmid's gradient: x plus the attention's output.
		clear(datt)
		linearBackward(p, datt, b.dO, dres, ba.att, &b.o, n)
		clear(dqkv)
		attentionBackward(p, dqkv, datt, ba.probs, ba.qkv, a.seqs, c.Heads, c.KVHeadCount(), hd)
		ropeBackward(p, dqkv, a.pos, t.cos, t.sin, n, W, (c.Heads+c.KVHeadCount())*hd, hd)
		if b.qkvBias != nil {
			biasBackward(p, b.dQKVBias, dqkv, partial, n, W)
		}
		clear(dhn)
		linearBackward(p, dhn, b.dQKV, dqkv, ba.hn1, &b.qkv, n)
		rmsnormBackward(p, dres, b.dAttnNorm, dhn, ba.x, b.attnNorm, ba.rstd1, partial, n, D)
	}
	embeddingBackward(t.dEmb, dres, a.toks, D)
}

// adamChunk is the number of weights one parallel chunk of the update
// handles.
const adamChunk = 1 << 14

// update takes one AdamW step with the gradients in grads, exactly as
// Trainer's graph does, and writes the weights back into the model.
func (t *NativeTrainer) update() error {
	c := t.cfg
	chunks := (len(t.grads) + adamChunk - 1) / adamChunk
	sums := make([]float64, chunks)
	t.pool.run(chunks, 1, func(lo, hi int) {
		for k := lo; k < hi; k++ {
			var s float64
			for _, g := range t.grads[k*adamChunk : min((k+1)*adamChunk, len(t.grads))] {
				s += float64(g) * float64(g)
			}
			sums[k] = s
		}
	})
	var sq float64
	for _, s := range sums {
		sq += s
	}
	norm := float32(math.Sqrt(sq))
	scale := float32(1)
	if c.ClipNorm > 0 {
		scale = min(scale, float32(c.ClipNorm)/(norm+1e-6))
	}
	lr := float32(c.LR(t.step))
	t.step++
	t.lastNorm = norm
	b1, b2 := float32(c.Beta1), float32(c.Beta2)
	bc1 := float32(1 - math.Pow(c.Beta1, float64(t.step)))
	bc2 := float32(1 - math.Pow(c.Beta2, float64(t.step)))
	eps, wd := float32(c.Epsilon), float32(c.WeightDecay)
	t.pool.run(chunks, 1, func(lo, hi int) {
		for _, w := range t.weights {
			from, to := max(w.off, lo*adamChunk), min(w.off+w.size, hi*adamChunk)
			decay := float32(0)
			if len(w.dims) >= 2 {
				decay = wd
			}
			for i := from; i < to; i++ {
				g := t.grads[i] * scale
				m := t.adamM[i]*b1 + g*(1-b1)
				v := t.adamV[i]*b2 + g*g*(1-b2)
				t.adamM[i], t.adamV[i] = m, v
				upd := (m/bc1)/(float32(math.Sqrt(float64(v/bc2)))+eps) + decay*t.params[i]
				t.params[i] -= lr * upd
			}
		}
	})
	t.packed = false
	return t.writeModel()
}

// Step takes one AdamW step on the weighted next-token cross-entropy of the
// batch (the mean over weighted tokens, as Trainer.Step) and returns the loss
// before the step. Rows of weight 0 skip the LM head.
func (t *NativeTrainer) Step(batch Batch) (float32, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if batch.Weights != nil && len(batch.Weights) != len(batch.Tokens) {
		return 0, fmt.Errorf("native train step: %d weight rows for %d sequences", len(batch.Weights), len(batch.Tokens))
	}
	if err := t.begin(batch.Tokens); err != nil {
		return 0, fmt.Errorf("native train step: %w", err)
	}
	var sel []int
	var w []float32
	var den float64
	for i, span := range t.a.seqs {
		if batch.Weights != nil && len(batch.Weights[i]) != span.len+1 {
			return 0, fmt.Errorf("native train step: sequence %d: %d weights for %d tokens", i, len(batch.Weights[i]), span.len+1)
		}
		for j := range span.len {
			wj := float32(1)
			if batch.Weights != nil {
				wj = batch.Weights[i][j+1]
			}
			if wj != 0 {
				sel, w = append(sel, span.off+j), append(w, wj)
				den += float64(wj)
			}
		}
	}
	den = max(den, 1e-6)
	for k := range w {
		w[k] = float32(float64(w[k]) / den)
	}
	var loss float64
	if len(sel) > 0 {
		t.forward(sel, true)
		for k, lp := range t.a.logp {
			loss -= float64(w[k]) * float64(lp)
		}
		t.backward(w)
	} else {
		clear(t.grads)
	}
	if err := t.update(); err != nil {
		return 0, fmt.Errorf("native train step: %w", err)
	}
	l := float32(loss)
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return l, fmt.Errorf("native train step: loss is %g", l)
	}
	return l, nil
}

// TokenWeightsFunc maps the log-probs of a batch's targets, logp[i][j] =
// log p(seq[i][j+1] | seq[i][:j+1]) as SequenceLogProbs returns them, to
// weights of the same shape and the loss to report. The step then follows
// the gradient of −Σ weights·logp: a weight is minus the derivative of the
// caller's loss with respect to that log-prob (for the mean cross-entropy,
// 1/count; for a policy-gradient surrogate, the advantage times the
// ratio's derivative).
type TokenWeightsFunc func(logp [][]float32) (weights [][]float32, loss float32, err error)

// StepWeighted runs the forward over seqs, asks weigh for per-token weights
// given the targets' log-probs, and takes one AdamW step on −Σ w·log p. It
// returns weigh's loss.
func (t *NativeTrainer) StepWeighted(seqs [][]int, weigh TokenWeightsFunc) (float32, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.begin(seqs); err != nil {
		return 0, fmt.Errorf("native train step: %w", err)
	}
	t.forward(nil, true)
	weights, loss, err := weigh(t.splitLogProbs())
	if err != nil {
		return 0, fmt.Errorf("native train step: %w", err)
	}
	if len(weights) != len(seqs) {
		return 0, fmt.Errorf("native train step: %d weight rows for %d sequences", len(weights), len(seqs))
	}
	w := make([]float32, t.a.n)
	for i, span := range t.a.seqs {
		if len(weights[i]) != span.len {
			return 0, fmt.Errorf("native train step: sequence %d: %d weights for %d log-probs", i, len(weights[i]), span.len)
		}
		copy(w[span.off:], weights[i])
	}
	t.backward(w)
	if err := t.update(); err != nil {
		return 0, fmt.Errorf("native train step: %w", err)
	}
	if math.IsNaN(float64(loss)) || math.IsInf(float64(loss), 0) {
		return loss, fmt.Errorf("native train step: loss is %g", loss)
	}
	return loss, nil
}

// LogProbs returns, for each sequence, log p(seq[t+1] | seq[0..t]) for
// t = 0..len(seq)−2 under the current weights, as Model.SequenceLogProbs.
func (t *NativeTrainer) LogProbs(seqs [][]int) ([][]float32, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.begin(seqs); err != nil {
		return nil, fmt.Errorf("native log probs: %w", err)
	}
	t.forward(nil, false)
	return t.splitLogProbs(), nil
}

// splitLogProbs copies the log-probs of a forward over all rows out per
// sequence.
func (t *NativeTrainer) splitLogProbs() [][]float32 {
	out := make([][]float32, len(t.a.seqs))
	for i, span := range t.a.seqs {
		out[i] = append([]float32(nil), t.a.logp[span.off:span.off+span.len]...)
	}
	return out
}

// Trainer names: the native CPU trainer (NativeTrainer) or GoMLX's graph
// (Trainer).
const (
	TrainerNative = "native"
	TrainerGoMLX  = "gomlx"
)

// ResolveTrainer returns the trainer that choice names for a model on
// backend b: empty means native on the pure-Go backend and GoMLX on XLA.
// The native trainer runs on the CPU only, so it is refused on XLA.
func ResolveTrainer(choice string, b BackendConfig) (string, error) {
	xla := b.Name == "xla"
	switch choice {
	case "":
		if xla {
			return TrainerGoMLX, nil
		}
		return TrainerNative, nil
	case TrainerGoMLX:
		return choice, nil
	case TrainerNative:
		if xla {
			return "", fmt.Errorf("trainer native: runs on the CPU only, use gomlx (or leave it empty) on the xla backend: %w", ErrBackend)
		}
		return choice, nil
	default:
		return "", fmt.Errorf("trainer %q: want %q or %q", choice, TrainerNative, TrainerGoMLX)
	}
}

// NativeTrainerState is a NativeTrainer's optimiser state, for exact
// resumes: the steps taken and AdamW's moments, each one buffer over the
// model's weights in the trainer's order (checkpoint order, with each
// layer's q, k and v biases after its v weight).
type NativeTrainerState struct {
	Step int
	M, V []float32
}

// State returns a copy of the optimiser state.
func (t *NativeTrainer) State() NativeTrainerState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return NativeTrainerState{Step: t.step, M: slices.Clone(t.adamM), V: slices.Clone(t.adamV)}
}

// SetState restores an optimiser state taken by State from a trainer of
// the same architecture.
func (t *NativeTrainer) SetState(s NativeTrainerState) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.Step < 0 || len(s.M) != len(t.adamM) || len(s.V) != len(t.adamV) {
		return fmt.Errorf("native trainer: state of step %d with %d and %d moments, want %d each", s.Step, len(s.M), len(s.V), len(t.adamM))
	}
	t.step = s.Step
	copy(t.adamM, s.M)
	copy(t.adamV, s.V)
	return nil
}
