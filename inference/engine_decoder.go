package inference

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// decoder is the numeric backend of the Engine: a KV cache of rows × length
// positions and the three operations continuous batching needs. The GoMLX
// implementation below is the reference; cpuDecoder (cpudecode.go) is the
// faster plain-Go path for CPUs, checked against it in cpudecode_test.go.
type decoder interface {
	// resize re-lays the cache out as rows × length; new row i takes the
	// contents of old row src[i], or is left undefined when src[i] < 0.
	resize(src []int, rows, length int) error
	// prefill runs each prompt (at most length tokens) into its row at
	// positions 0..len(prompt)-1 and returns the logits of the token after
	// each prompt [len(rows) × V], and how many of the prompts' positions
	// were copied from kept sequences instead of run. Rows must be
	// distinct.
	prefill(rows []int, prompts [][]int) (logits []float32, reused int, err error)
	// keep offers the first len(toks) positions of row, which hold toks, to
	// later prefills whose prompts start with them; the decoder may hold on
	// to toks, or ignore the offer.
	keep(row int, toks []int)
	// step feeds tokens[i] at positions[i] to every row with active[i] and
	// returns the logits [rows × V]; the cache of inactive rows is left
	// unchanged and their logits are meaningless.
	step(tokens, positions []int32, active []bool) ([]float32, error)
	// dims returns the current rows and length.
	dims() (rows, length int)
	close()
}

// gomlxDecoder is the decoder on the model's GoMLX backend. The cache holds
// per layer the keys [rows, heads, length, hd] and the values transposed,
// [rows, heads, hd, length], the layouts the backend's matmul reads without
// copying. Every position at or after a row's next position is kept at zero,
// so a decode step writes a token's key and value with an in-place
// ScatterSum into the donated cache buffers (GoMLX v0.26.0's pure-Go backend
// has no DynamicUpdateSlice, and a Where over the whole cache costs more
// than the model's matmuls at large batches).
type gomlxDecoder struct {
	m      *Model
	rows   int
	length int
	cache  []*tensors.Tensor // k0, v0, k1, v1, ...

	mu        sync.Mutex
	resizeFns map[int]*graph.Exec // by target length
	prefillFn *context.Exec
	stepFn    *context.Exec
}

func newGomlxDecoder(m *Model) *gomlxDecoder {
	return &gomlxDecoder{m: m, resizeFns: map[int]*graph.Exec{}}
}

func (d *gomlxDecoder) dims() (int, int) {
	if d.cache == nil { // never laid out, closed, or lost to a failed run
		return 0, 0
	}
	return d.rows, d.length
}

func (d *gomlxDecoder) close() {
	d.freeCache()
}

func (d *gomlxDecoder) freeCache() {
	for _, t := range d.cache {
		if t != nil {
			_ = t.FinalizeAll()
		}
	}
	d.cache = nil
}

// replaceCache installs a new cache and frees the old one's buffers.
func (d *gomlxDecoder) replaceCache(ts []*tensors.Tensor) {
	d.freeCache()
	d.cache = ts
}

func (d *gomlxDecoder) resize(src []int, rows, length int) error {
	if len(src) != rows || rows < 1 || length < 1 || length > d.m.cfg.MaxSeq {
		return fmt.Errorf("resize cache to %d×%d with %d sources: bad shape", rows, length, len(src))
	}
	c := d.m.cfg
	if d.cache == nil {
		ts := make([]*tensors.Tensor, 2*c.Layers)
		for i := range ts {
			ts[i] = tensors.FromShape(cacheShape(i, rows, c.KVHeadCount(), length, c.HeadDim()))
		}
		d.cache, d.rows, d.length = ts, rows, length
		return nil
	}
	idx := make([]int32, rows)
	for i, s := range src {
		if s >= d.rows {
			return fmt.Errorf("resize cache: source row %d of %d", s, d.rows)
		}
		idx[i] = int32(max(s, 0))
	}
	d.mu.Lock()
	e, ok := d.resizeFns[length]
	if !ok {
		var err error
		e, err = graph.NewExec(d.m.backend, func(x []*graph.Node) []*graph.Node {
			return resizeGraph(x[0], x[1:], length)
		})
		if err != nil {
			d.mu.Unlock()
			return fmt.Errorf("build resize graph: %w", err)
		}
		e.SetMaxCache(256)
		d.resizeFns[length] = e
	}
	d.mu.Unlock()
	args := make([]any, 0, 1+len(d.cache))
	args = append(args, tensors.FromFlatDataAndDimensions(idx, rows, 1))
	for _, t := range d.cache {
		args = append(args, t)
	}
	out, err := e.Exec(args...)
	if err != nil {
		return fmt.Errorf("resize cache: %w", err)
	}
	d.replaceCache(out)
	d.rows, d.length = rows, length
	return nil
}

// cacheShape is the shape of cache tensor i: keys (even i) are
// [rows, heads, length, hd], values (odd i) [rows, heads, hd, length],
// heads being the key/value heads.
func cacheShape(i, rows, heads, length, hd int) shapes.Shape {
	if i%2 == 0 {
		return shapes.Make(dtypes.Float32, rows, heads, length, hd)
	}
	return shapes.Make(dtypes.Float32, rows, heads, hd, length)
}

// posAxis is the position axis of cache tensor i.
func posAxis(i int) int { return 2 + i%2 }

// padPositions pads x with zeros along axis up to length.
func padPositions(x *graph.Node, axis, length int) *graph.Node {
	dims := x.Shape().Clone().Dimensions
	if dims[axis] >= length {
		return x
	}
	dims[axis] = length - dims[axis]
	return graph.Concatenate([]*graph.Node{x, graph.Zeros(x.Graph(), shapes.Make(x.DType(), dims...))}, axis)
}

// resizeGraph gathers rows idx [rows', 1] of every cache tensor and pads or
// cuts its position axis to length.
func resizeGraph(idx *graph.Node, caches []*graph.Node, length int) []*graph.Node {
	out := make([]*graph.Node, len(caches))
	for i, c := range caches {
		x := graph.Gather(c, idx)
		if ax := posAxis(i); x.Shape().Dimensions[ax] > length {
			x = graph.SliceAxis(x, ax, graph.AxisRange(0, length))
		} else {
			x = padPositions(x, ax, length)
		}
		out[i] = x
	}
	return out
}

// keep is a no-op: the GoMLX decoder prefills whole prompts.
func (d *gomlxDecoder) keep(int, []int) {}

func (d *gomlxDecoder) prefill(rows []int, prompts [][]int) ([]float32, int, error) {
	if len(rows) != len(prompts) || len(rows) == 0 {
		return nil, 0, fmt.Errorf("prefill %d prompts into %d rows", len(prompts), len(rows))
	}
	if d.cache == nil {
		return nil, 0, errors.New("prefill: no cache laid out")
	}
	// Batch shapes are bucketed to powers of two; extra prompts are one
	// padding token written nowhere.
	k := bucketPow2(len(rows), 1, max(len(rows), d.rows))
	src := make([]int32, d.rows) // cache row → prompt index
	write := make([]bool, d.rows)
	seqs := make([][]int, k)
	for j := range seqs {
		seqs[j] = []int{0}
	}
	for j, r := range rows {
		if r < 0 || r >= d.rows || write[r] {
			return nil, 0, fmt.Errorf("prefill into row %d of %d (twice or out of range)", r, d.rows)
		}
		if len(prompts[j]) == 0 || len(prompts[j]) > d.length {
			return nil, 0, fmt.Errorf("prefill %d tokens into a cache of %d: %w", len(prompts[j]), d.length, ErrTooLong)
		}
		src[r], write[r], seqs[j] = int32(j), true, prompts[j]
	}
	d.mu.Lock()
	if d.prefillFn == nil {
		e, err := d.m.newExec(func(ctx *context.Context, x []*graph.Node) []*graph.Node {
			return d.m.prefillGraph(ctx, x[0], x[1], x[2], x[3], x[4:])
		})
		if err != nil {
			d.mu.Unlock()
			return nil, 0, fmt.Errorf("build prefill graph: %w", err)
		}
		d.prefillFn = e
	}
	e := d.prefillFn
	d.mu.Unlock()
	tok, last, err := padBatch(seqs, d.length)
	if err != nil {
		return nil, 0, err
	}
	args := make([]any, 0, 4+len(d.cache))
	args = append(args, tok, last,
		tensors.FromFlatDataAndDimensions(src, d.rows, 1),
		tensors.FromFlatDataAndDimensions(write, d.rows))
	args, err = d.appendDonatedCache(args)
	if err != nil {
		return nil, 0, fmt.Errorf("prefill: %w", err)
	}
	out, err := e.Exec(args...)
	if err != nil {
		return nil, 0, fmt.Errorf("prefill: %w", err)
	}
	d.cache = out[1:]
	logits, err := tensors.CopyFlatData[float32](out[0])
	if err != nil {
		return nil, 0, err
	}
	_ = out[0].FinalizeAll()
	return logits[:len(rows)*d.m.cfg.VocabSize], 0, nil
}

// prefillGraph runs the right-padded prompts tokens [k, P] through the
// model and returns the logits at each prompt's last position last [k],
// [k, V], followed by the caches with row r replaced, where write[r], by the
// keys and values of prompt src[r] (zero after its last position).
func (m *Model) prefillGraph(ctx *context.Context, tokens, last, src, write *graph.Node, caches []*graph.Node) []*graph.Node {
	g := tokens.Graph()
	k, p := tokens.Shape().Dimensions[0], tokens.Shape().Dimensions[1]
	h, ks, vs := m.forward(ctx, tokens)
	out := []*graph.Node{m.head(ctx, g, gatherPosition(h, last))}
	// Padding positions must be zero in the cache, like every unwritten one.
	real := graph.ConvertDType(graph.LessOrEqual(
		graph.Iota(g, shapes.Make(dtypes.Int32, k, p), 1),
		graph.BroadcastToDims(graph.Reshape(last, k, 1), k, p)), dtypes.Float32)
	for i, c := range caches {
		var kv *graph.Node
		if i%2 == 0 {
			kv = graph.Mul(ks[i/2], graph.Reshape(real, k, 1, p, 1))
		} else {
			kv = graph.Mul(graph.TransposeAllAxes(vs[i/2], 0, 1, 3, 2), graph.Reshape(real, k, 1, 1, p))
		}
		kv = padPositions(kv, posAxis(i), c.Shape().Dimensions[posAxis(i)])
		out = append(out, graph.Where(write, graph.Gather(kv, src), c))
	}
	return out
}

// appendDonatedCache appends the cache tensors to args, donating their
// buffers so the graph can update them in place; d.cache must be replaced
// by the graph's outputs afterwards.
func (d *gomlxDecoder) appendDonatedCache(args []any) ([]any, error) {
	for _, t := range d.cache {
		a, err := graph.DonateTensorBuffer(t, d.m.backend, 0)
		if err != nil {
			return nil, fmt.Errorf("donate cache: %w", err)
		}
		args = append(args, a)
	}
	d.cache = nil
	return args, nil
}

func (d *gomlxDecoder) step(tokens, positions []int32, active []bool) ([]float32, error) {
	if len(tokens) != d.rows || len(positions) != d.rows || len(active) != d.rows {
		return nil, fmt.Errorf("step %d tokens, %d positions, %d flags for %d rows", len(tokens), len(positions), len(active), d.rows)
	}
	for i, p := range positions {
		if p < 0 || int(p) >= d.length {
			return nil, fmt.Errorf("step row %d at position %d of %d: %w", i, p, d.length, ErrTooLong)
		}
	}
	d.mu.Lock()
	if d.stepFn == nil {
		e, err := d.m.newExec(func(ctx *context.Context, x []*graph.Node) []*graph.Node {
			return d.m.stepGraph(ctx, x[0], x[1], x[2], x[3:])
		})
		if err != nil {
			d.mu.Unlock()
			return nil, fmt.Errorf("build step graph: %w", err)
		}
		d.stepFn = e
	}
	e := d.stepFn
	d.mu.Unlock()
	act := make([]float32, d.rows)
	for i, a := range active {
		if a {
			act[i] = 1
		}
	}
	args := make([]any, 0, 3+len(d.cache))
	args = append(args,
		tensors.FromFlatDataAndDimensions(tokens, d.rows),
		tensors.FromFlatDataAndDimensions(positions, d.rows),
		tensors.FromFlatDataAndDimensions(act, d.rows))
	args, err := d.appendDonatedCache(args)
	if err != nil {
		return nil, fmt.Errorf("decode step: %w", err)
	}
	out, err := e.Exec(args...)
	if err != nil {
		return nil, fmt.Errorf("decode step: %w", err)
	}
	d.cache = out[1:]
	logits, err := tensors.CopyFlatData[float32](out[0])
	if err != nil {
		return nil, err
	}
	_ = out[0].FinalizeAll()
	return logits, nil
}

// stepGraph decodes one token per row: tokens and pos are [rows] int32,
// active [rows] float32 is 0 for rows not in use (their cache is left
// untouched). It returns the logits [rows, V] followed by the updated caches.
func (m *Model) stepGraph(ctx *context.Context, tokens, pos, active *graph.Node, caches []*graph.Node) []*graph.Node {
	g := tokens.Graph()
	rows := tokens.Shape().Dimensions[0]
	heads, hd := m.cfg.KVHeadCount(), m.cfg.HeadDim()
	length := caches[0].Shape().Dimensions[2]
	r := m.newRope(graph.Reshape(pos, rows, 1))
	posT := graph.BroadcastToDims(graph.Reshape(pos, rows, 1), rows, length)
	visible := graph.Reshape(graph.LessOrEqual(graph.Iota(g, shapes.Make(dtypes.Int32, rows, length), 1), posT), rows, 1, 1, length)
	// Scatter indices of every (row, key/value head, dim) element at the row's
	// position, for the key layout (r, h, pos, d) and the value layout
	// (r, h, d, pos).
	eshape := shapes.Make(dtypes.Int32, rows, heads, hd, 1)
	ir, ih, id := graph.Iota(g, eshape, 0), graph.Iota(g, eshape, 1), graph.Iota(g, eshape, 2)
	ip := graph.BroadcastToDims(graph.Reshape(pos, rows, 1, 1, 1), rows, heads, hd, 1)
	n := rows * heads * hd
	kIdx := graph.Reshape(graph.Concatenate([]*graph.Node{ir, ih, ip, id}, 3), n, 4)
	vIdx := graph.Reshape(graph.Concatenate([]*graph.Node{ir, ih, id, ip}, 3), n, 4)
	act := graph.Reshape(active, rows, 1, 1, 1)
	x := m.embed(ctx, g, graph.Reshape(tokens, rows, 1)) // [rows, 1, D]
	out := []*graph.Node{nil}
	for i := range m.cfg.Layers {
		layer := fmt.Sprintf("model/layers/%d", i)
		hn := m.rmsNorm(x, weight(ctx, g, layer+"/input_layernorm"))
		q, k, v := m.projectQKV(ctx, g, layer, hn, linearSplit)
		q, k, v = r.apply(m.heads(q, m.cfg.Heads)), r.apply(m.heads(k, heads)), m.heads(v, heads)
		// The cache is zero at each row's position, so adding writes.
		kc := graph.ScatterSum(caches[2*i], kIdx, graph.Reshape(graph.Mul(k, act), n), false, true)
		vc := graph.ScatterSum(caches[2*i+1], vIdx, graph.Reshape(graph.Mul(v, act), n), false, true)
		out = append(out, kc, vc)
		// Attention over the cache: scores [rows, H, 1, T], values read
		// from the transposed layout; query heads grouped by the key/value
		// head they read.
		s := graph.DotGeneral(m.groupHeads(q), []int{3}, []int{0, 1}, kc, []int{3}, []int{0, 1})
		s = m.ungroupHeads(graph.MulScalar(s, 1/math.Sqrt(float64(hd))), 1)
		s = graph.Where(graph.BroadcastToShape(visible, s.Shape()), s,
			graph.BroadcastToShape(graph.Scalar(g, dtypes.Float32, -1e9), s.Shape()))
		p := m.groupHeads(graph.Softmax(s, -1))
		a := m.ungroupHeads(graph.DotGeneral(p, []int{3}, []int{0, 1}, vc, []int{3}, []int{0, 1}), 1) // [rows, H, 1, hd]
		x = graph.Add(x, linearSplit(m.unheads(a), weight(ctx, g, layer+"/self_attn/o_proj")))
		hn = m.rmsNorm(x, weight(ctx, g, layer+"/post_attention_layernorm"))
		gate := linearSplit(hn, weight(ctx, g, layer+"/mlp/gate_proj"))
		up := linearSplit(hn, weight(ctx, g, layer+"/mlp/up_proj"))
		x = graph.Add(x, linearSplit(graph.Mul(graph.Mul(gate, graph.Sigmoid(gate)), up), weight(ctx, g, layer+"/mlp/down_proj")))
	}
	x = m.rmsNorm(x, weight(ctx, g, "model/norm"))
	out[0] = graph.Reshape(linearSplit(x, m.outputWeight(ctx, g)), rows, m.cfg.VocabSize)
	return out
}

// decodeSplit is how many parts linearSplit cuts a weight into.
const decodeSplit = 2

// linearSplit is linear for few rows (decode): the pure-Go backend runs a
// matmul's batch axis in parallel but not its rows, so the weight [out, in]
// is viewed as [parts, out/parts, in] and x broadcast over the parts.
func linearSplit(x, w *graph.Node) *graph.Node {
	out, in := w.Shape().Dimensions[0], w.Shape().Dimensions[1]
	if out%decodeSplit != 0 {
		return linear(x, w)
	}
	xd := x.Shape().Dimensions
	n := x.Shape().Size() / in
	xb := graph.BroadcastToDims(graph.Reshape(x, 1, n, in), decodeSplit, n, in)
	ws := graph.Reshape(w, decodeSplit, out/decodeSplit, in)
	y := graph.DotGeneral(xb, []int{2}, []int{0}, ws, []int{2}, []int{0}) // [parts, n, out/parts]
	y = graph.TransposeAllAxes(y, 1, 0, 2)
	return graph.Reshape(y, append(append([]int(nil), xd[:len(xd)-1]...), out)...)
}
