package inference

import (
	"fmt"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// decoder is the numeric backend of the Engine: a KV cache of rows × length
// positions and the three operations continuous batching needs. The GoMLX
// implementation below is the reference; a dedicated CPU path can implement
// the same interface and be checked against it (engine_decoder_test.go).
type decoder interface {
	// resize re-lays the cache out as rows × length; new row i takes the
	// contents of old row src[i], or is left undefined when src[i] < 0.
	resize(src []int, rows, length int) error
	// prefill runs prompt (at most length tokens) into row at positions
	// 0..len(prompt)-1 and returns the logits of the next token [V].
	prefill(row int, prompt []int) ([]float32, error)
	// step feeds tokens[i] at positions[i] to every row and returns the
	// logits [rows × V]. Rows not in use may carry any token at position 0.
	step(tokens, positions []int32) ([]float32, error)
	// dims returns the current rows and length.
	dims() (rows, length int)
	close()
}

// gomlxDecoder is the decoder on the model's GoMLX backend. The cache is one
// tensor per layer for keys and one for values, [rows, heads, length, hd];
// a token's key and value are written with Where(Iota == position, new,
// cache) because GoMLX v0.26.0's pure-Go backend has no DynamicUpdateSlice.
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

func (d *gomlxDecoder) dims() (int, int) { return d.rows, d.length }

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
			ts[i] = tensors.FromShape(shapes.Make(dtypes.Float32, rows, c.Heads, length, c.HeadDim()))
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
		e.SetMaxCache(64)
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

// resizeGraph gathers rows idx [rows', 1] of every cache tensor and pads or
// cuts its position axis to length.
func resizeGraph(idx *graph.Node, caches []*graph.Node, length int) []*graph.Node {
	out := make([]*graph.Node, len(caches))
	for i, c := range caches {
		x := graph.Gather(c, idx) // [rows', H, T, hd]
		dims := x.Shape().Dimensions
		switch t := dims[2]; {
		case length > t:
			zeros := graph.Zeros(x.Graph(), shapes.Make(x.DType(), dims[0], dims[1], length-t, dims[3]))
			x = graph.Concatenate([]*graph.Node{x, zeros}, 2)
		case length < t:
			x = graph.SliceAxis(x, 2, graph.AxisRange(0, length))
		}
		out[i] = x
	}
	return out
}

func (d *gomlxDecoder) prefill(row int, prompt []int) ([]float32, error) {
	if row < 0 || row >= d.rows {
		return nil, fmt.Errorf("prefill row %d of %d", row, d.rows)
	}
	if len(prompt) == 0 || len(prompt) > d.length {
		return nil, fmt.Errorf("prefill %d tokens into a cache of %d: %w", len(prompt), d.length, ErrTooLong)
	}
	d.mu.Lock()
	if d.prefillFn == nil {
		e, err := d.m.newExec(func(ctx *context.Context, x []*graph.Node) []*graph.Node {
			return d.m.prefillGraph(ctx, x[0], x[1], x[2], x[3:])
		})
		if err != nil {
			d.mu.Unlock()
			return nil, fmt.Errorf("build prefill graph: %w", err)
		}
		d.prefillFn = e
	}
	e := d.prefillFn
	d.mu.Unlock()
	tok, last, err := padBatch([][]int{prompt}, d.length)
	if err != nil {
		return nil, err
	}
	args := make([]any, 0, 3+len(d.cache))
	args = append(args, tok, last, int32(row))
	for _, t := range d.cache {
		args = append(args, t)
	}
	out, err := e.Exec(args...)
	if err != nil {
		return nil, fmt.Errorf("prefill: %w", err)
	}
	logits, err := tensors.CopyFlatData[float32](out[0])
	if err != nil {
		return nil, err
	}
	d.replaceCache(out[1:])
	return logits, nil
}

// prefillGraph runs tokens [1, P] through the model, writes the keys and
// values of positions 0..P-1 into row of every cache tensor and returns the
// logits at position last [1] followed by the new caches.
func (m *Model) prefillGraph(ctx *context.Context, tokens, last, row *graph.Node, caches []*graph.Node) []*graph.Node {
	g := tokens.Graph()
	h, ks, vs := m.forward(ctx, tokens)
	h = gatherPosition(h, last) // [1, D]
	out := []*graph.Node{m.head(ctx, g, h)}
	rows := caches[0].Shape().Dimensions[0]
	sel := graph.Equal(graph.Iota(g, shapes.Make(dtypes.Int32, rows), 0), graph.BroadcastToDims(row, rows))
	for i, c := range caches {
		kv := ks[i/2]
		if i%2 == 1 {
			kv = vs[i/2]
		}
		cd := c.Shape().Dimensions
		if p := kv.Shape().Dimensions[2]; p < cd[2] {
			zeros := graph.Zeros(g, shapes.Make(kv.DType(), 1, cd[1], cd[2]-p, cd[3]))
			kv = graph.Concatenate([]*graph.Node{kv, zeros}, 2)
		}
		out = append(out, graph.Where(sel, graph.BroadcastToDims(kv, cd...), c))
	}
	return out
}

func (d *gomlxDecoder) step(tokens, positions []int32) ([]float32, error) {
	if len(tokens) != d.rows || len(positions) != d.rows {
		return nil, fmt.Errorf("step %d tokens, %d positions for %d rows", len(tokens), len(positions), d.rows)
	}
	for i, p := range positions {
		if p < 0 || int(p) >= d.length {
			return nil, fmt.Errorf("step row %d at position %d of %d: %w", i, p, d.length, ErrTooLong)
		}
	}
	d.mu.Lock()
	if d.stepFn == nil {
		e, err := d.m.newExec(func(ctx *context.Context, x []*graph.Node) []*graph.Node {
			return d.m.stepGraph(ctx, x[0], x[1], x[2:])
		})
		if err != nil {
			d.mu.Unlock()
			return nil, fmt.Errorf("build step graph: %w", err)
		}
		d.stepFn = e
	}
	e := d.stepFn
	d.mu.Unlock()
	args := make([]any, 0, 2+len(d.cache))
	args = append(args, tensors.FromFlatDataAndDimensions(tokens, d.rows), tensors.FromFlatDataAndDimensions(positions, d.rows))
	for _, t := range d.cache {
		args = append(args, t)
	}
	out, err := e.Exec(args...)
	if err != nil {
		return nil, fmt.Errorf("decode step: %w", err)
	}
	logits, err := tensors.CopyFlatData[float32](out[0])
	if err != nil {
		return nil, err
	}
	_ = out[0].FinalizeAll()
	d.replaceCache(out[1:])
	return logits, nil
}

// stepGraph decodes one token per row: tokens and pos are [rows] int32. It
// returns the logits [rows, V] followed by the updated caches.
func (m *Model) stepGraph(ctx *context.Context, tokens, pos *graph.Node, caches []*graph.Node) []*graph.Node {
	g := tokens.Graph()
	rows := tokens.Shape().Dimensions[0]
	cd := caches[0].Shape().Dimensions // [rows, H, T, hd]
	length := cd[2]
	r := m.newRope(graph.Reshape(pos, rows, 1))
	posT := graph.BroadcastToDims(graph.Reshape(pos, rows, 1), rows, length)
	iota := graph.Iota(g, shapes.Make(dtypes.Int32, rows, length), 1)
	write := graph.BroadcastToDims(graph.Reshape(graph.Equal(iota, posT), rows, 1, length, 1), cd...)
	visible := graph.Reshape(graph.LessOrEqual(iota, posT), rows, 1, 1, length)
	x := m.embed(ctx, g, graph.Reshape(tokens, rows, 1)) // [rows, 1, D]
	out := []*graph.Node{nil}
	for i := range m.cfg.Layers {
		layer := fmt.Sprintf("model/layers/%d", i)
		hn := m.rmsNorm(x, weight(ctx, g, layer+"/input_layernorm"))
		q := r.apply(m.heads(linear(hn, weight(ctx, g, layer+"/self_attn/q_proj"))))
		k := r.apply(m.heads(linear(hn, weight(ctx, g, layer+"/self_attn/k_proj"))))
		v := m.heads(linear(hn, weight(ctx, g, layer+"/self_attn/v_proj")))
		kc := graph.Where(write, graph.BroadcastToDims(k, cd...), caches[2*i])
		vc := graph.Where(write, graph.BroadcastToDims(v, cd...), caches[2*i+1])
		out = append(out, kc, vc)
		a := m.unheads(m.attend(q, kc, vc, visible))
		x = graph.Add(x, linear(a, weight(ctx, g, layer+"/self_attn/o_proj")))
		hn = m.rmsNorm(x, weight(ctx, g, layer+"/post_attention_layernorm"))
		x = graph.Add(x, m.mlp(ctx, g, layer, hn))
	}
	out[0] = graph.Reshape(m.head(ctx, g, x), rows, m.cfg.VocabSize)
	return out
}
