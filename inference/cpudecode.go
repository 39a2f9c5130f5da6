package inference

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// cpuDecoder is the decoder in Go for CPUs, without cgo. GoMLX's pure-Go
// backend re-lays-out the weights on every small-M matmul, which makes
// decode steps several times slower than the arithmetic needs; this path
// lays the weights out once (rows for dot products with a few tokens,
// 16-wide panels for a register-blocked kernel with six or more), reads each
// weight once per step for the whole batch, skips inactive rows, and runs
// the matmuls, attention and SiLU on a fixed pool of goroutines. Three
// small AVX2/FMA loops (cpudecode_amd64.s) do the arithmetic where the CPU
// has them, plain Go elsewhere. The math is Model.forward's for every
// ModelConfig (RMSNorm, rotary positions with Llama 3's rescaling,
// causal softmax attention, grouped or not, any head dim, q/k/v biases,
// SwiGLU, tied or untied head) and is checked against gomlxDecoder in
// cpudecode_test.go.
//
// The weights are copied out of the Model when first needed and again
// whenever a variable of the model has been given a new value (a Trainer
// step, a restore), so an engine serving a model that is being trained, as
// in RL, always decodes with the current weights, as the GoMLX path does.
// A model loaded from a bfloat16 checkpoint is decoded from the
// checkpoint's memory-mapped matrices instead, with float32 accumulation
// (cpudecode_bf16.go), until its weights change (see DecodeWeights).
type cpuDecoder struct {
	m    *Model
	cfg  ModelConfig
	vars []*mlctx.Variable
	seen []*tensors.Tensor // the variables' values the weights were read from
	w    *cpuWeights
	pool *cpuPool

	rows, length int
	// k and v hold, per layer, a slot of cacheSlot(length, hd) floats per
	// row and KV head. A slot of k holds the rotated keys in tiles of
	// kvTile positions, each tile transposed, [⌈length/kvTile⌉][hd][kvTile];
	// a slot of v the values [length, hd]. Both products of attention then
	// read whole rows of 32 outputs (scores of 32 positions, 32 dims of the
	// output) per input element (axpy32), and the scores read each tile
	// as one contiguous block (keys transposed over the whole length put
	// a head's rows a cache length apart, which the hardware prefetcher
	// does not follow).
	k, v [][]float32
	// prefixes keeps finished sequences for later prompts (nil: none).
	prefixes *prefixStore

	s     cpuScratch
	parts []cpuScratch // a part's activations each when forward splits a step
	// unsplit counts down the steps forward runs on the shared loops
	// after a split step that was slower than no split; took holds the
	// time each part of a split step took.
	unsplit int
	took    []time.Duration
}

// kvTile is the number of positions of a key tile in the cache: one
// axpy32 per tile computes its 32 scores.
const kvTile = 32

// cacheSlot is the floats a row's KV head takes in each of the decoder's
// caches: length positions rounded up to whole key tiles.
func cacheSlot(length, hd int) int {
	return (length + kvTile - 1) / kvTile * kvTile * hd
}

// keyAt is the index in a key slot of position p's dimension 0; dimension
// i is kvTile floats further per i.
func keyAt(p, hd int) int {
	return p/kvTile*kvTile*hd + p%kvTile
}

// cpuWeights are the model's weights laid out for the CPU decoder.
type cpuWeights struct {
	emb     []float32 // [V, D]
	embBF16 []uint16  // [V, D] in bfloat16 instead of emb (DecodeWeightsBF16)
	head    cpuMatrix // lm_head, or emb again when the embeddings are tied
	norm    []float32 // [D]
	layers  []cpuLayer
	// cos and sin are the rotary tables [MaxSeq, hd/2].
	cos, sin []float32
}

// cpuLayer is one transformer block; matrices are [out, in].
type cpuLayer struct {
	attnNorm, mlpNorm []float32
	qkv               cpuMatrix // q, k and v projections stacked: [(H+2·KV)·hd, D]
	qkvBias           []float32 // their biases stacked, nil without
	o                 cpuMatrix // [D, H·hd]
	gateUp            cpuMatrix // gate and up projections stacked: [2F, D]
	down              cpuMatrix // [D, F]
}

// cpuScratch holds the activations of one forward pass, grown as needed.
type cpuScratch struct {
	x, hn, qkv, att, gu, act []float32
	head, logits, out        []float32
	scores                   []float32 // a row of attention scores per chunk of tokens
}

func newCPUDecoder(m *Model) *cpuDecoder {
	return &cpuDecoder{m: m, cfg: m.cfg}
}

func (d *cpuDecoder) dims() (int, int) {
	if d.k == nil {
		return 0, 0
	}
	return d.rows, d.length
}

func (d *cpuDecoder) close() {
	if d.pool != nil {
		d.pool.close()
		d.pool = nil
	}
	d.k, d.v, d.s, d.parts = nil, nil, cpuScratch{}, nil
	d.prefixes.clear()
}

// prepare starts the pool and (re)reads the weights if the model's
// variables changed since they were read: in bfloat16 where the model was
// loaded from a bfloat16 checkpoint and its weights are still the ones
// loaded (DecodeWeights), else in float32.
func (d *cpuDecoder) prepare() error {
	if d.pool == nil {
		d.pool = newCPUPool(runtime.GOMAXPROCS(0) - 1)
	}
	if d.vars == nil {
		for _, name := range d.m.names {
			scope, vname := weightScope(name)
			v := d.m.ctx.GetVariableByScopeAndName(scope, vname)
			if v == nil {
				return fmt.Errorf("read weight %q: not in context", name)
			}
			d.vars = append(d.vars, v)
		}
		d.seen = make([]*tensors.Tensor, len(d.vars))
	}
	changed := d.w == nil
	for i, v := range d.vars {
		t, err := v.Value()
		if err != nil {
			return fmt.Errorf("read weight %q: %w", d.m.names[i], err)
		}
		if t != d.seen[i] {
			d.seen[i], changed = t, true
		}
	}
	if !changed {
		return nil
	}
	d.prefixes.clear() // computed with the old weights
	// The checkpoint's bfloat16 matrices while they are the weights, else
	// float32 copies; on an error nothing is kept, so the next call reads
	// again.
	w, err := bf16CPUWeights(d.m, d.seen)
	if err == nil && w == nil {
		var vals map[string][]float32
		if vals, _, err = d.m.Weights(); err == nil {
			w = layOutCPUWeights(d.cfg, vals)
		}
	}
	d.w = w
	return err
}

// layOutCPUWeights stacks the projections that read the same input, so one
// pass over the batch computes them together, and tabulates the rotary
// angles.
func layOutCPUWeights(c ModelConfig, vals map[string][]float32) *cpuWeights {
	D, F := c.Dim, c.FFNDim
	q, qkv := c.Heads*c.HeadDim(), (c.Heads+2*c.KVHeadCount())*c.HeadDim()
	w := &cpuWeights{emb: vals["model.embed_tokens.weight"], norm: vals["model.norm.weight"]}
	head := w.emb
	if c.UntiedHead {
		head = vals["lm_head.weight"]
	}
	w.head = newCPUMatrix(head, c.VocabSize, D)
	for i := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		cat := func(names ...string) []float32 {
			var out []float32
			for _, n := range names {
				out = append(out, vals[p+n]...)
			}
			return out
		}
		ly := cpuLayer{
			attnNorm: vals[p+"input_layernorm.weight"],
			mlpNorm:  vals[p+"post_attention_layernorm.weight"],
			qkv:      newCPUMatrix(cat("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"), qkv, D),
			o:        newCPUMatrix(vals[p+"self_attn.o_proj.weight"], D, q),
			gateUp:   newCPUMatrix(cat("mlp.gate_proj.weight", "mlp.up_proj.weight"), 2*F, D),
			down:     newCPUMatrix(vals[p+"mlp.down_proj.weight"], D, F),
		}
		if c.QKVBias {
			ly.qkvBias = cat("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias")
		}
		w.layers = append(w.layers, ly)
	}
	w.cos, w.sin = ropeTables(c)
	return w
}

// ropeTables tabulates the rotary angles' cosines and sines [MaxSeq, hd/2]
// exactly as Model.newRope computes them, from the same (possibly
// rescaled) frequencies.
func ropeTables(c ModelConfig) (cos, sin []float32) {
	half := c.HeadDim() / 2
	cos = make([]float32, c.MaxSeq*half)
	sin = make([]float32, c.MaxSeq*half)
	for i, f := range c.ropeFrequencies() {
		inv := float32(f)
		for p := range c.MaxSeq {
			ang := float64(float32(p) * inv)
			cos[p*half+i] = float32(math.Cos(ang))
			sin[p*half+i] = float32(math.Sin(ang))
		}
	}
	return cos, sin
}

func (d *cpuDecoder) resize(src []int, rows, length int) error {
	if len(src) != rows || rows < 1 || length < 1 || length > d.cfg.MaxSeq {
		return fmt.Errorf("resize cache to %d×%d with %d sources: bad shape", rows, length, len(src))
	}
	for _, s := range src {
		if d.k != nil && s >= d.rows {
			return fmt.Errorf("resize cache: source row %d of %d", s, d.rows)
		}
	}
	c := d.cfg
	hd, kv := c.HeadDim(), c.KVHeadCount()
	slot, oldSlot := cacheSlot(length, hd), cacheSlot(d.length, hd)
	size := rows * kv * slot
	k, v := make([][]float32, c.Layers), make([][]float32, c.Layers)
	keep := min(length, d.length)
	// The key tiles that hold the kept positions, copied whole: the
	// positions past keep in the last one are never read before written.
	keepTiles := cacheSlot(keep, hd)
	for l := range c.Layers {
		k[l], v[l] = make([]float32, size), make([]float32, size)
		if d.k == nil {
			continue
		}
		for r, s := range src {
			if s < 0 {
				continue
			}
			for h := range kv {
				to, from := (r*kv+h)*slot, (s*kv+h)*oldSlot
				copy(v[l][to:to+keep*hd], d.v[l][from:from+keep*hd])
				copy(k[l][to:to+keepTiles], d.k[l][from:from+keepTiles])
			}
		}
	}
	d.k, d.v, d.rows, d.length = k, v, rows, length
	return nil
}

func (d *cpuDecoder) prefill(rows []int, prompts [][]int) ([]float32, int, error) {
	if len(rows) != len(prompts) || len(rows) == 0 {
		return nil, 0, fmt.Errorf("prefill %d prompts into %d rows", len(prompts), len(rows))
	}
	if d.k == nil {
		return nil, 0, errors.New("prefill: no cache laid out")
	}
	if err := d.prepare(); err != nil {
		return nil, 0, fmt.Errorf("prefill: %w", err)
	}
	used := make([]bool, d.rows)
	for j, r := range rows {
		if r < 0 || r >= d.rows || used[r] {
			return nil, 0, fmt.Errorf("prefill into row %d of %d (twice or out of range)", r, d.rows)
		}
		used[r] = true
		p := prompts[j]
		if len(p) == 0 || len(p) > d.length {
			return nil, 0, fmt.Errorf("prefill %d tokens into a cache of %d: %w", len(p), d.length, ErrTooLong)
		}
		for _, id := range p {
			if id < 0 || id >= d.cfg.VocabSize {
				return nil, 0, fmt.Errorf("prefill: token id %d outside vocabulary of %d", id, d.cfg.VocabSize)
			}
		}
	}
	var toks, tokRows, tokPos, last []int
	reused := 0
	for j, r := range rows {
		p, from := prompts[j], 0
		if e, n := d.prefixes.match(p); e != nil {
			d.loadRow(r, e, n)
			from = n
			reused += n
		}
		for i := from; i < len(p); i++ {
			toks, tokRows, tokPos = append(toks, p[i]), append(tokRows, r), append(tokPos, i)
		}
		last = append(last, len(toks)-1)
	}
	out := make([]float32, len(rows)*d.cfg.VocabSize)
	d.forward(toks, tokRows, tokPos, last, out)
	return out, reused, nil
}

// logitsFrom runs each sequence from position 0 in a row of its own and
// returns, per sequence, the next-token logits after each of its positions
// from on, [(len(seq)−from) × V]. The cache is resized only when the
// batch outgrows it: every position a sequence reads is written first.
func (d *cpuDecoder) logitsFrom(seqs [][]int, from int) ([][]float32, error) {
	longest := 0
	for _, s := range seqs {
		if len(s) <= from || len(s) > d.cfg.MaxSeq {
			return nil, fmt.Errorf("score %d tokens from position %d within %d: %w", len(s), from, d.cfg.MaxSeq, ErrTooLong)
		}
		longest = max(longest, len(s))
	}
	if d.k == nil || d.rows < len(seqs) || d.length < longest {
		src := make([]int, max(len(seqs), d.rows))
		for i := range src {
			src[i] = -1
		}
		if err := d.resize(src, len(src), max(longest, d.length)); err != nil {
			return nil, fmt.Errorf("score: %w", err)
		}
	}
	if err := d.prepare(); err != nil {
		return nil, fmt.Errorf("score: %w", err)
	}
	var toks, rows, pos, sel []int
	for r, s := range seqs {
		for i, id := range s {
			if i >= from {
				sel = append(sel, len(toks))
			}
			toks, rows, pos = append(toks, id), append(rows, r), append(pos, i)
		}
	}
	V := d.cfg.VocabSize
	logits := make([]float32, len(sel)*V)
	d.forward(toks, rows, pos, sel, logits)
	out := make([][]float32, len(seqs))
	at := 0
	for r, s := range seqs {
		n := (len(s) - from) * V
		out[r] = logits[at : at+n]
		at += n
	}
	return out, nil
}

// logSoftmaxOf returns log softmax(logits)[id].
func logSoftmaxOf(logits []float32, id int) float32 {
	top := logits[0]
	for _, v := range logits {
		top = max(top, v)
	}
	sum := 0.0
	for _, v := range logits {
		sum += math.Exp(float64(v - top))
	}
	return float32(float64(logits[id]-top) - math.Log(sum))
}

// step returns the logits in a buffer of the decoder's, valid until its
// next call: a batch-32 step no longer allocates and clears 256 KB.
func (d *cpuDecoder) step(tokens, positions []int32, active []bool) ([]float32, error) {
	if len(tokens) != d.rows || len(positions) != d.rows || len(active) != d.rows || d.k == nil {
		return nil, fmt.Errorf("step %d tokens, %d positions, %d flags for %d rows", len(tokens), len(positions), len(active), d.rows)
	}
	var toks, rows, pos, sel []int
	for i, p := range positions {
		if p < 0 || int(p) >= d.length {
			return nil, fmt.Errorf("step row %d at position %d of %d: %w", i, p, d.length, ErrTooLong)
		}
		if !active[i] {
			continue
		}
		if tokens[i] < 0 || int(tokens[i]) >= d.cfg.VocabSize {
			return nil, fmt.Errorf("step row %d: token id %d outside vocabulary of %d", i, tokens[i], d.cfg.VocabSize)
		}
		sel = append(sel, len(toks))
		toks, rows, pos = append(toks, int(tokens[i])), append(rows, i), append(pos, int(p))
	}
	if err := d.prepare(); err != nil {
		return nil, fmt.Errorf("decode step: %w", err)
	}
	V := d.cfg.VocabSize
	out := grow(&d.s.out, d.rows*V)
	if len(toks) == d.rows {
		// Every row is active, in order: the logits go straight to out.
		d.forward(toks, rows, pos, sel, out)
		return out, nil
	}
	if len(toks) == 0 {
		return out, nil
	}
	logits := grow(&d.s.logits, len(toks)*V)
	d.forward(toks, rows, pos, sel, logits)
	for j, r := range rows {
		copy(out[r*V:(r+1)*V], logits[j*V:(j+1)*V])
	}
	return out, nil
}

// grow returns (*buf)[:n], reallocating when it is too short.
func grow(buf *[]float32, n int) []float32 {
	if cap(*buf) < n {
		*buf = make([]float32, n)
	}
	*buf = (*buf)[:n]
	return *buf
}

// parallelMACs is the size of matmul below which handing half of it to a
// helper goroutine costs more than it saves.
const parallelMACs = 1 << 17

// matmul computes y [n, out] (+)= x [n, in] · mᵀ on pool (nil: in the
// caller), split over the outputs in chunks that are whole panels.
func matmul(pool *cpuPool, y, x []float32, m *cpuMatrix, n int, add bool) {
	if pool == nil || n*m.in*m.out < parallelMACs {
		m.mulRange(y, x, n, 0, m.out, add)
		return
	}
	align := max(m.width, 16)
	grain := (max(m.out/8, 4) + align - 1) / align * align
	pool.run(m.out, grain, func(lo, hi int) {
		m.mulRange(y, x, n, lo, hi, add)
	})
}

// forward feeds token toks[j] at position pos[j] of cache row rows[j],
// writing its key and value into the cache, and puts into logits [len(sel),
// V] the next-token logits after tokens sel. Tokens of one row must come in
// position order; each attends to the cache up to its own position, so the
// tokens of a prompt can be fed together.
//
// A decode step of two tokens or more, each token in a row of its own and
// every token's logits wanted, is split into parts of whole tokens that
// run the entire forward on a core each: the tokens do not read each
// other's keys, so the cores meet once per step instead of at every matmul
// and attention of every layer (25 times at four layers), where the
// hand-offs leave the second core mostly idle. Parts of a token or two
// pay: a serving engine's steps mostly hold two to eight sequences, whose
// attention over their own keys runs on one core otherwise (steps of three
// to eight 0.74 of unsplit, of two the same; docs/bench/decode.md). A part holds a
// core for the whole step, though, and on a machine whose cores other
// processes keep busy the step then waits for a helper that was
// descheduled: where a split step took longer than its fastest part
// would have taken for every part in turn, the next splitBackoff steps
// go through the shared loops instead.
func (d *cpuDecoder) forward(toks, rows, pos, sel []int, logits []float32) {
	n := len(toks)
	parts := 1
	if d.pool != nil && n > 0 && len(sel) == n && sel[n-1] == n-1 {
		parts = min(d.pool.helpers+1, n)
	}
	for j := 1; j < n && parts > 1; j++ {
		if rows[j] <= rows[j-1] {
			parts = 1
		}
	}
	if parts > 1 && d.unsplit > 0 {
		d.unsplit--
		parts = 1
	}
	if parts <= 1 {
		d.forwardOn(&d.s, d.pool, toks, rows, pos, sel, logits)
		return
	}
	for len(d.parts) < parts {
		d.parts = append(d.parts, cpuScratch{})
	}
	d.took = slices.Grow(d.took[:0], parts)[:parts]
	took := d.took
	clear(took)
	start := time.Now()
	V, per := d.cfg.VocabSize, (n+parts-1)/parts
	d.pool.run(n, per, func(lo, hi int) {
		t := time.Now()
		d.forwardOn(&d.parts[lo/per], nil, toks[lo:hi], rows[lo:hi], pos[lo:hi], sel[:hi-lo], logits[lo*V:hi*V])
		took[lo/per] = time.Since(t)
	})
	if time.Since(start) > time.Duration(parts)*slices.Min(took) {
		d.unsplit = splitBackoff
	}
}

// splitBackoff is the decode steps forward does not split after a split
// that did not pay.
const splitBackoff = 32

// forwardOn is forward on the activations of s, its loops on pool (nil:
// in the caller).
func (d *cpuDecoder) forwardOn(s *cpuScratch, pool *cpuPool, toks, rows, pos, sel []int, logits []float32) {
	c := d.cfg
	n, D, F, H, KV, hd := len(toks), c.Dim, c.FFNDim, c.Heads, c.KVHeadCount(), c.HeadDim()
	// A token's row of qkv holds its H query heads, then KV key heads,
	// then KV value heads; query head h reads key/value head h/group.
	Q, KVw, group := H*hd, KV*hd, H/KV
	W := Q + 2*KVw
	half := hd / 2
	slot := cacheSlot(d.length, hd)
	eps := float32(c.NormEps)
	w := d.w
	x := grow(&s.x, n*D)
	hn := grow(&s.hn, n*D)
	qkv := grow(&s.qkv, n*W)
	att := grow(&s.att, n*Q)
	gu := grow(&s.gu, n*2*F)
	act := grow(&s.act, n*F)
	for j, id := range toks {
		if w.embBF16 != nil {
			widenBF16(x[j*D:(j+1)*D], w.embBF16[id*D:(id+1)*D])
		} else {
			copy(x[j*D:(j+1)*D], w.emb[id*D:(id+1)*D])
		}
	}
	scale := float32(1 / math.Sqrt(float64(hd)))
	tokGrain := max(1, n/16)
	scoreLen := slot / hd // positions rounded up to whole tiles
	scores := grow(&s.scores, (n+tokGrain-1)/tokGrain*scoreLen)
	// oneEach: every token is in a row of its own (rows increase), as in
	// a decode step.
	oneEach := true
	for j := 1; j < n; j++ {
		oneEach = oneEach && rows[j] > rows[j-1]
	}
	for l := range w.layers {
		ly := &w.layers[l]
		kc, vc := d.k[l], d.v[l]
		for j := range n {
			rmsNormRow(hn[j*D:(j+1)*D], x[j*D:(j+1)*D], ly.attnNorm, eps)
		}
		matmul(pool, qkv, hn, &ly.qkv, n, false)
		// Add the biases, rotate queries and keys, write keys and values
		// to the cache.
		store := func(lo, hi int) {
			for j := lo; j < hi; j++ {
				cs := w.cos[pos[j]*half : (pos[j]+1)*half]
				sn := w.sin[pos[j]*half : (pos[j]+1)*half]
				t := qkv[j*W : (j+1)*W]
				if ly.qkvBias != nil {
					axpy(t, 1, ly.qkvBias)
				}
				for h := range H {
					rotate(t[h*hd:(h+1)*hd], cs, sn)
				}
				for h := range KV {
					kh := t[Q+h*hd : Q+(h+1)*hd]
					rotate(kh, cs, sn)
					base := (rows[j]*KV + h) * slot
					at := base + keyAt(pos[j], hd)
					for i, x := range kh {
						kc[at+i*kvTile] = x
					}
					copy(vc[base+pos[j]*hd:base+(pos[j]+1)*hd], t[Q+KVw+h*hd:Q+KVw+(h+1)*hd])
				}
			}
		}
		// Causal attention of each token over its row's cache.
		attend := func(lo, hi int) {
			// Chunks start at multiples of tokGrain: a row of scores each.
			scores := scores[lo/tokGrain*scoreLen : (lo/tokGrain+1)*scoreLen]
			for j := lo; j < hi; j++ {
				for h := range H {
					// The keys and values the next head reads, if they
					// are not this head's, to fetch while this one
					// computes.
					var nextK, nextV []float32
					if nj, nh := j+(h+1)/H, (h+1)%H; nj < hi && nh%group == 0 {
						nb := (rows[nj]*KV + nh/group) * slot
						nextK, nextV = kc[nb:nb+slot], vc[nb:nb+slot]
					}
					q := qkv[j*W+h*hd : j*W+(h+1)*hd]
					base := (rows[j]*KV + h/group) * slot
					attendRow(att[j*Q+h*hd:j*Q+(h+1)*hd], q, kc[base:base+slot], vc[base:base+slot], scores[:pos[j]+1], scale, nextK, nextV)
				}
			}
		}
		if oneEach {
			// No token reads another's key: one pass over the pool.
			pool.run(n, tokGrain, func(lo, hi int) {
				store(lo, hi)
				attend(lo, hi)
			})
		} else {
			pool.run(n, tokGrain, store)
			pool.run(n, tokGrain, attend)
		}
		matmul(pool, x, att, &ly.o, n, true)
		for j := range n {
			rmsNormRow(hn[j*D:(j+1)*D], x[j*D:(j+1)*D], ly.mlpNorm, eps)
		}
		matmul(pool, gu, hn, &ly.gateUp, n, false)
		pool.run(n, tokGrain, func(lo, hi int) {
			for j := lo; j < hi; j++ {
				g, u, a := gu[j*2*F:j*2*F+F], gu[j*2*F+F:(j+1)*2*F], act[j*F:(j+1)*F]
				expAffine(a, g, -1, 0) // e^-g
				for i, gv := range g {
					a[i] = gv * u[i] / (1 + a[i])
				}
			}
		})
		matmul(pool, x, act, &ly.down, n, true)
	}
	hs := grow(&s.head, len(sel)*D)
	for k, j := range sel {
		rmsNormRow(hs[k*D:(k+1)*D], x[j*D:(j+1)*D], w.norm, eps)
	}
	matmul(pool, logits, hs, &w.head, len(sel), false)
}

// after returns x[i:], or nil when x is shorter.
func after(x []float32, i int) []float32 {
	if i >= len(x) {
		return nil
	}
	return x[i:]
}

// rotate applies the rotary embedding to one head x [hd] in place:
// x·cos + rotate_half(x)·sin with rotate_half(x) = [-x₂, x₁].
func rotate(x, cs, sn []float32) {
	half := len(cs)
	x1, x2 := x[:half], x[half:2*half]
	sn = sn[:half]
	for i, c := range cs {
		a, b := x1[i], x2[i]
		x1[i] = a*c - b*sn[i]
		x2[i] = b*c + a*sn[i]
	}
}

// attendRow writes softmax(q·kᵀ·scale)·v to out for one head over the
// T = len(scores) first positions of kt, a slot of keys in transposed
// tiles [⌈T/kvTile⌉][hd][kvTile], and v [positions, hd]. scores must have
// room for T rounded up to 32. nextK and nextV, nil or the slots the
// caller reads next, are fetched into the cache while this computes.
func attendRow(out, q, kt, v []float32, scores []float32, scale float32, nextK, nextV []float32) {
	hd := len(q)
	qkScores(scores, q, kt, nextK)
	mx := float32(math.Inf(-1))
	for _, s := range scores {
		mx = max(mx, s)
	}
	// The weights are left unnormalised and the output divided by their
	// sum: hd multiplications instead of T.
	inv := 1 / expAffine(scores, scores, scale, -scale*mx)
	if hd%32 == 0 {
		T := len(scores)
		for i := 0; i < hd; i += 32 {
			axpy32Ahead(out[i:i+32], scores, v[i:], hd, after(nextV, i*T))
		}
	} else {
		clear(out)
		for t, p := range scores {
			axpy(out, p, v[t*hd:(t+1)*hd])
		}
	}
	for i := range out {
		out[i] *= inv
	}
}
