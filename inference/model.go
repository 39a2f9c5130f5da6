package inference

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// ModelConfig is the architecture of the decoder-only transformer (Llama
// shape: RMSNorm, rotary positions, SwiGLU). The JSON names follow Hugging
// Face's LlamaConfig so config.json reads familiar. The fields after NormEps
// describe imported open-weight models (ReadHFConfig); their zero values
// are Parley's own architecture: multi-head attention, head dim Dim/Heads,
// no biases, tied embeddings, unscaled rotary frequencies.
type ModelConfig struct {
	VocabSize int     `json:"vocab_size"`
	Dim       int     `json:"hidden_size"`
	Layers    int     `json:"num_hidden_layers"`
	Heads     int     `json:"num_attention_heads"`
	FFNDim    int     `json:"intermediate_size"`
	MaxSeq    int     `json:"max_position_embeddings"`
	RopeBase  float64 `json:"rope_theta"`
	NormEps   float64 `json:"rms_norm_eps"`

	// KVHeads is the number of key/value heads of grouped-query attention
	// (num_key_value_heads); 0 means Heads.
	KVHeads int `json:"num_key_value_heads,omitempty"`
	// HeadSize is the width of one attention head (head_dim); 0 means
	// Dim/Heads.
	HeadSize int `json:"head_dim,omitempty"`
	// QKVBias adds biases to the query, key and value projections (Qwen2).
	QKVBias bool `json:"qkv_bias,omitempty"`
	// UntiedHead gives the output projection its own weight,
	// lm_head.weight, instead of reusing the token embeddings.
	UntiedHead bool `json:"untied_lm_head,omitempty"`
	// RopeScaling is Llama 3's rescaling of the rotary frequencies; nil
	// means none.
	RopeScaling *RopeScaling `json:"rope_scaling,omitempty"`
}

// RopeScaling is Llama 3's rope_scaling: wavelengths longer than
// OriginalMaxPos/LowFreqFactor are stretched by Factor, shorter than
// OriginalMaxPos/HighFreqFactor kept, and those between interpolated.
type RopeScaling struct {
	RopeType       string  `json:"rope_type"`
	Factor         float64 `json:"factor"`
	LowFreqFactor  float64 `json:"low_freq_factor"`
	HighFreqFactor float64 `json:"high_freq_factor"`
	OriginalMaxPos int     `json:"original_max_position_embeddings"`
}

// RopeTypeLlama3 is the only RopeScaling.RopeType Parley implements.
const RopeTypeLlama3 = "llama3"

// DefaultModelConfig is the ~1.1M-parameter default sized for 2 CPU cores.
// VocabSize should be replaced by the tokenizer's.
func DefaultModelConfig() ModelConfig {
	return ModelConfig{
		VocabSize: 2048,
		Dim:       128,
		Layers:    4,
		Heads:     4,
		FFNDim:    384,
		MaxSeq:    512,
		RopeBase:  10000,
		NormEps:   1e-5,
	}
}

// Validate reports the first inconsistent field.
func (c ModelConfig) Validate() error {
	switch {
	case c.VocabSize < 2:
		return fmt.Errorf("model config: vocab size %d must be at least 2", c.VocabSize)
	case c.Dim < 2 || c.Layers < 1 || c.Heads < 1 || c.FFNDim < 1 || c.MaxSeq < 2:
		return fmt.Errorf("model config: dim %d, layers %d, heads %d, ffn %d, max seq %d must be positive",
			c.Dim, c.Layers, c.Heads, c.FFNDim, c.MaxSeq)
	case c.KVHeads < 0 || c.HeadSize < 0:
		return fmt.Errorf("model config: key/value heads %d and head dim %d must not be negative", c.KVHeads, c.HeadSize)
	case c.HeadSize == 0 && c.Dim%c.Heads != 0:
		return fmt.Errorf("model config: dim %d is not a multiple of heads %d", c.Dim, c.Heads)
	case c.HeadDim()%2 != 0:
		return fmt.Errorf("model config: head dim %d must be even for rotary positions", c.HeadDim())
	case c.Heads%c.KVHeadCount() != 0:
		return fmt.Errorf("model config: heads %d is not a multiple of key/value heads %d", c.Heads, c.KVHeadCount())
	case c.RopeBase <= 1:
		return fmt.Errorf("model config: rope base %g must exceed 1", c.RopeBase)
	case c.NormEps <= 0:
		return fmt.Errorf("model config: norm eps %g must be positive", c.NormEps)
	}
	if r := c.RopeScaling; r != nil {
		switch {
		case r.RopeType != RopeTypeLlama3:
			return fmt.Errorf("model config: rope scaling type %q, only %q is implemented", r.RopeType, RopeTypeLlama3)
		case r.Factor < 1 || r.LowFreqFactor <= 0 || r.HighFreqFactor <= r.LowFreqFactor || r.OriginalMaxPos < 1:
			return fmt.Errorf("model config: rope scaling factor %g, low %g, high %g, original max positions %d: want factor ≥ 1, 0 < low < high and positions ≥ 1",
				r.Factor, r.LowFreqFactor, r.HighFreqFactor, r.OriginalMaxPos)
		}
	}
	return nil
}

// HeadDim is the width of one attention head: HeadSize, or Dim / Heads.
func (c ModelConfig) HeadDim() int {
	if c.HeadSize > 0 {
		return c.HeadSize
	}
	return c.Dim / c.Heads
}

// KVHeadCount is the number of key/value heads: KVHeads, or Heads.
func (c ModelConfig) KVHeadCount() int {
	if c.KVHeads > 0 {
		return c.KVHeads
	}
	return c.Heads
}

// Params is the number of weights (embeddings counted once when tied).
func (c ModelConfig) Params() int {
	q, kv := c.Heads*c.HeadDim(), c.KVHeadCount()*c.HeadDim()
	perLayer := 2*c.Dim*q + 2*c.Dim*kv + 3*c.Dim*c.FFNDim + 2*c.Dim
	if c.QKVBias {
		perLayer += q + 2*kv
	}
	n := c.VocabSize*c.Dim + c.Layers*perLayer + c.Dim
	if c.UntiedHead {
		n += c.VocabSize * c.Dim
	}
	return n
}

// ropeFrequencies returns the HeadDim()/2 rotary angular frequencies,
// rescaled as RopeScaling says (Hugging Face's
// _compute_llama3_parameters).
func (c ModelConfig) ropeFrequencies() []float64 {
	hd := c.HeadDim()
	inv := make([]float64, hd/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.RopeBase, float64(2*i)/float64(hd))
	}
	r := c.RopeScaling
	if r == nil {
		return inv
	}
	orig := float64(r.OriginalMaxPos)
	lowWavelen, highWavelen := orig/r.LowFreqFactor, orig/r.HighFreqFactor
	for i, f := range inv {
		switch wavelen := 2 * math.Pi / f; {
		case wavelen < highWavelen:
		case wavelen > lowWavelen:
			inv[i] = f / r.Factor
		default:
			smooth := (orig/wavelen - r.LowFreqFactor) / (r.HighFreqFactor - r.LowFreqFactor)
			inv[i] = (1-smooth)*f/r.Factor + smooth*f
		}
	}
	return inv
}

// FLOPsPerToken is the approximate forward cost of one token at context
// length ctxLen: 2 FLOPs per weight plus the attention products.
func (c ModelConfig) FLOPsPerToken(ctxLen int) float64 {
	return 2*float64(c.Params()) + 4*float64(c.Layers*c.Dim*ctxLen)
}

// Model holds a GoMLX backend and the weights of one transformer in a
// context.Context. Its inference methods are safe for concurrent use; a
// Trainer mutates the weights in place.
//
// A model loaded from a bfloat16 checkpoint holds no float32 weights until
// something reads them (Context, Weights, a trainer, the GoMLX graph): its
// variables hold placeholders, and the CPU decoder multiplies by the
// checkpoint's matrices meanwhile (see DecodeWeights).
type Model struct {
	cfg     ModelConfig
	bcfg    BackendConfig
	backend backends.Backend
	// ctx holds the weights; read it through weightsContext, except for
	// the identity of the variables' values (the CPU decoder's check).
	ctx *context.Context
	// names lists the weight variables in a fixed order (Hugging Face
	// names, e.g. "model.layers.0.self_attn.q_proj.weight").
	names []string

	deferMu  sync.Mutex
	deferred *deferredWeights // nil once the variables hold the weights

	mu      sync.Mutex
	logits  *context.Exec // tokens → last-position logits (naive generation)
	logProb *context.Exec // inputs, targets → per-token log-probs
}

// weightShapes lists every weight of cfg in order, with its shape. Linear
// weights are [out, in] as in PyTorch, so an import of Llama weights is a
// mapping of names only.
func weightShapes(c ModelConfig) ([]string, map[string][]int) {
	var names []string
	sh := map[string][]int{}
	add := func(name string, dims ...int) {
		names = append(names, name)
		sh[name] = dims
	}
	q, kv := c.Heads*c.HeadDim(), c.KVHeadCount()*c.HeadDim()
	add("model.embed_tokens.weight", c.VocabSize, c.Dim)
	for i := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		add(p+"input_layernorm.weight", c.Dim)
		add(p+"self_attn.q_proj.weight", q, c.Dim)
		if c.QKVBias {
			add(p+"self_attn.q_proj.bias", q)
		}
		add(p+"self_attn.k_proj.weight", kv, c.Dim)
		if c.QKVBias {
			add(p+"self_attn.k_proj.bias", kv)
		}
		add(p+"self_attn.v_proj.weight", kv, c.Dim)
		if c.QKVBias {
			add(p+"self_attn.v_proj.bias", kv)
		}
		add(p+"self_attn.o_proj.weight", c.Dim, q)
		add(p+"post_attention_layernorm.weight", c.Dim)
		add(p+"mlp.gate_proj.weight", c.FFNDim, c.Dim)
		add(p+"mlp.up_proj.weight", c.FFNDim, c.Dim)
		add(p+"mlp.down_proj.weight", c.Dim, c.FFNDim)
	}
	add("model.norm.weight", c.Dim)
	if c.UntiedHead {
		add("lm_head.weight", c.VocabSize, c.Dim)
	}
	return names, sh
}

// NewModel creates a randomly initialised model (normal, std 0.02; residual
// output projections scaled by 1/√(2·layers); norms at 1, biases at 0) on
// the backend.
func NewModel(cfg ModelConfig, backend BackendConfig, seed int64) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	names, sh := weightShapes(cfg)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
	values := make(map[string][]float32, len(names))
	for _, name := range names {
		dims := sh[name]
		n := 1
		for _, d := range dims {
			n *= d
		}
		v := make([]float32, n)
		switch {
		case strings.HasSuffix(name, ".bias"):
		case len(dims) == 1:
			for i := range v {
				v[i] = 1
			}
		default:
			std := 0.02
			if strings.HasSuffix(name, "o_proj.weight") || strings.HasSuffix(name, "down_proj.weight") {
				std /= math.Sqrt(2 * float64(cfg.Layers))
			}
			for i := range v {
				v[i] = float32(rng.NormFloat64() * std)
			}
		}
		values[name] = v
	}
	return newModelWithWeights(cfg, backend, values)
}

// newModelWithWeights builds a Model from named float32 weights.
func newModelWithWeights(cfg ModelConfig, bcfg BackendConfig, values map[string][]float32) (*Model, error) {
	return newModelFilled(cfg, bcfg, func(name string, dst []float32) error {
		v, ok := values[name]
		if !ok {
			return fmt.Errorf("weight %q missing", name)
		}
		if len(v) != len(dst) {
			return fmt.Errorf("weight %q has %d values, want %d", name, len(v), len(dst))
		}
		copy(dst, v)
		return nil
	})
}

// weightFill writes the float32 values of weight name into dst.
type weightFill func(name string, dst []float32) error

// newModelFilled builds a Model whose weights fill writes, one at a time,
// into the float32 storage of each (so a loader converting from another
// dtype never holds a second copy of the model).
func newModelFilled(cfg ModelConfig, bcfg BackendConfig, fill weightFill) (*Model, error) {
	return newModelOf(cfg, bcfg, func(name string, dims []int) (*tensors.Tensor, error) {
		return filledTensor(name, dims, fill)
	})
}

// deferredWeights are the weights of a model built by newModelDeferred.
type deferredWeights struct {
	fill weightFill
	// filled is told the float32 tensors, in Model.names order, once they
	// replace the placeholders.
	filled func(values []*tensors.Tensor)
}

// newModelDeferred builds a Model whose variables hold scalar placeholders
// until its weights are first read (weightsContext): then fill converts
// them one at a time into the variables, and filled is told the tensors.
// The placeholders are distinct tensors, so that their identities tell the
// weights as loaded.
func newModelDeferred(cfg ModelConfig, bcfg BackendConfig, fill weightFill, filled func(values []*tensors.Tensor)) (*Model, error) {
	m, err := newModelOf(cfg, bcfg, func(string, []int) (*tensors.Tensor, error) {
		return tensors.FromValue(float32(0)), nil
	})
	if err != nil {
		return nil, err
	}
	m.deferred = &deferredWeights{fill: fill, filled: filled}
	return m, nil
}

// newModelOf builds a Model whose variable name holds value(name, shape).
func newModelOf(cfg ModelConfig, bcfg BackendConfig, value func(name string, dims []int) (*tensors.Tensor, error)) (*Model, error) {
	installDotGeneralVJP()
	b, err := newBackend(bcfg)
	if err != nil {
		return nil, err
	}
	names, sh := weightShapes(cfg)
	ctx := context.New().Checked(false)
	for _, name := range names {
		t, err := value(name, sh[name])
		if err != nil {
			return nil, fmt.Errorf("new model: %w", err)
		}
		scope, vname := weightScope(name)
		ctx.InAbsPath(scope).VariableWithValue(vname, t)
	}
	return &Model{cfg: cfg, bcfg: bcfg, backend: b, ctx: ctx, names: names}, nil
}

// filledTensor is a float32 tensor of dims that fill writes as weight name.
func filledTensor(name string, dims []int, fill weightFill) (*tensors.Tensor, error) {
	t := tensors.FromShape(shapes.Make(dtypes.Float32, dims...))
	var err error
	if merr := tensors.MutableFlatData(t, func(flat []float32) { err = fill(name, flat) }); merr != nil {
		return nil, fmt.Errorf("weight %q: %w", name, merr)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// weightsContext returns the context holding the weights, converting a
// deferred model's weights into it first (once; the placeholders are
// dropped).
func (m *Model) weightsContext() (*context.Context, error) {
	m.deferMu.Lock()
	defer m.deferMu.Unlock()
	d := m.deferred
	if d == nil {
		return m.ctx, nil
	}
	_, sh := weightShapes(m.cfg)
	values := make([]*tensors.Tensor, len(m.names))
	for i, name := range m.names {
		t, err := filledTensor(name, sh[name], d.fill)
		if err != nil {
			return nil, fmt.Errorf("convert weights: %w", err)
		}
		values[i] = t
	}
	// filled first: a CPU decoder reading the variables meanwhile sees
	// placeholders or these tensors, both the weights as loaded.
	d.filled(values)
	for i, name := range m.names {
		scope, vname := weightScope(name)
		if err := m.ctx.GetVariableByScopeAndName(scope, vname).SetValue(values[i]); err != nil {
			return nil, fmt.Errorf("convert weight %q: %w", name, err)
		}
	}
	m.deferred = nil
	return m.ctx, nil
}

// weightScope maps "model.layers.0.mlp.up_proj.weight" to the context scope
// "/model/layers/0/mlp/up_proj" and variable name "weight".
func weightScope(name string) (scope, vname string) {
	i := strings.LastIndexByte(name, '.')
	return "/" + strings.ReplaceAll(name[:i], ".", "/"), name[i+1:]
}

// Config returns the architecture.
func (m *Model) Config() ModelConfig { return m.cfg }

// BackendConfig returns the backend the model runs on.
func (m *Model) BackendConfig() BackendConfig { return m.bcfg }

// Backend returns the GoMLX backend, for graphs built by other packages.
func (m *Model) Backend() backends.Backend { return m.backend }

// Context returns the GoMLX context that holds the weights (trainable
// variables under scope "/model"), converting a bfloat16 checkpoint's
// weights to float32 on the first call. It panics if they cannot be
// converted, which the checks of loading rule out (Weights, NewTrainer and
// NewNativeTrainer return the error instead).
func (m *Model) Context() *context.Context {
	ctx, err := m.weightsContext()
	if err != nil {
		panic(fmt.Errorf("inference: model context: %w", err))
	}
	return ctx
}

// WeightNames lists the weights in checkpoint order.
func (m *Model) WeightNames() []string { return append([]string(nil), m.names...) }

// Weights copies every weight out of the model, keyed by its Hugging Face
// name, with its shape.
func (m *Model) Weights() (map[string][]float32, map[string][]int, error) {
	ctx, err := m.weightsContext()
	if err != nil {
		return nil, nil, err
	}
	vals := make(map[string][]float32, len(m.names))
	dims := make(map[string][]int, len(m.names))
	for _, name := range m.names {
		scope, vname := weightScope(name)
		v := ctx.GetVariableByScopeAndName(scope, vname)
		if v == nil {
			return nil, nil, fmt.Errorf("read weight %q: not in context", name)
		}
		t, err := v.Value()
		if err != nil {
			return nil, nil, fmt.Errorf("read weight %q: %w", name, err)
		}
		data, err := tensors.CopyFlatData[float32](t)
		if err != nil {
			return nil, nil, fmt.Errorf("read weight %q: %w", name, err)
		}
		vals[name] = data
		dims[name] = t.Shape().Dimensions
	}
	return vals, dims, nil
}

// CloneWeights copies the current weights into the non-trainable scope
// "/<scope>" of the model's context and returns a context positioned there:
// pass it to Logits or TokenLogProbs to evaluate a frozen reference copy
// (e.g. the KL reference policy of RL) in the same graph as the live weights.
// Calling it again with the same scope refreshes the copy.
func (m *Model) CloneWeights(scope string) (*context.Context, error) {
	if scope == "" || strings.ContainsAny(scope, "/.") || scope == "model" {
		return nil, fmt.Errorf("clone weights: bad scope %q", scope)
	}
	ctx, err := m.weightsContext()
	if err != nil {
		return nil, fmt.Errorf("clone weights: %w", err)
	}
	for _, name := range m.names {
		s, vname := weightScope(name)
		src := ctx.GetVariableByScopeAndName(s, vname)
		t, err := src.Value()
		if err != nil {
			return nil, fmt.Errorf("clone weight %q: %w", name, err)
		}
		c, err := t.LocalClone()
		if err != nil {
			return nil, fmt.Errorf("clone weight %q: %w", name, err)
		}
		dst := ctx.InAbsPath("/" + scope + s)
		if v := dst.GetVariableByScopeAndName(dst.Scope(), vname); v != nil {
			if err := v.SetValue(c); err != nil {
				return nil, fmt.Errorf("clone weight %q: %w", name, err)
			}
			continue
		}
		dst.VariableWithValue(vname, c).SetTrainable(false)
	}
	return ctx.InAbsPath("/" + scope), nil
}

// errNoWeight is raised (as a panic inside graph building) when a weight is
// missing from the context a graph is built against.
var errNoWeight = errors.New("inference: weight not found in context")

// weight returns the graph node of the weight at path (e.g.
// "model/layers/0/self_attn/q_proj") relative to ctx's scope.
func weight(ctx *context.Context, g *graph.Graph, path string) *graph.Node {
	return param(ctx, g, path, "weight")
}

// param returns the graph node of the variable vname ("weight" or "bias")
// at path relative to ctx's scope.
func param(ctx *context.Context, g *graph.Graph, path, vname string) *graph.Node {
	scope := strings.TrimSuffix(ctx.Scope(), "/") + "/" + path
	v := ctx.GetVariableByScopeAndName(scope, vname)
	if v == nil {
		panic(fmt.Errorf("%s %q: %w", vname, scope, errNoWeight))
	}
	return v.ValueGraph(g)
}

// projectQKV applies the query, key and value projections of layer to hn
// with lin (linear, or linearSplit when decoding), plus their biases when
// the model has them: [.., Heads·hd], [.., KVHeads·hd] and [.., KVHeads·hd].
func (m *Model) projectQKV(ctx *context.Context, g *graph.Graph, layer string, hn *graph.Node, lin func(x, w *graph.Node) *graph.Node) (q, k, v *graph.Node) {
	proj := func(name string) *graph.Node {
		path := layer + "/self_attn/" + name
		y := lin(hn, weight(ctx, g, path))
		if m.cfg.QKVBias {
			y = graph.Add(y, graph.ExpandLeftToRank(param(ctx, g, path, "bias"), y.Rank()))
		}
		return y
	}
	return proj("q_proj"), proj("k_proj"), proj("v_proj")
}

// outputWeight is the [V, D] output projection: lm_head, or the tied
// embeddings.
func (m *Model) outputWeight(ctx *context.Context, g *graph.Graph) *graph.Node {
	if m.cfg.UntiedHead {
		return weight(ctx, g, "lm_head")
	}
	return weight(ctx, g, "model/embed_tokens")
}

// linear applies a [out, in] weight to the last axis of x.
func linear(x, w *graph.Node) *graph.Node {
	return graph.DotGeneral(x, []int{x.Rank() - 1}, nil, w, []int{1}, nil)
}

func (m *Model) rmsNorm(x, w *graph.Node) *graph.Node {
	ms := graph.ReduceAndKeep(graph.Square(x), graph.ReduceMean, -1)
	return graph.Mul(graph.Mul(x, graph.Reciprocal(graph.Sqrt(graph.AddScalar(ms, m.cfg.NormEps)))), graph.ExpandLeftToRank(w, x.Rank()))
}

// rope holds the rotary tables for given positions, shaped to broadcast
// against [B, H, T, headDim].
type rope struct {
	cos, sin, rot *graph.Node
}

// newRope computes the rotary tables for positions [B, T] (int32).
func (m *Model) newRope(pos *graph.Node) rope {
	g := pos.Graph()
	hd := m.cfg.HeadDim()
	half := hd / 2
	inv := make([]float32, hd)
	for i, f := range m.cfg.ropeFrequencies() {
		inv[i], inv[i+half] = float32(f), float32(f)
	}
	b, t := pos.Shape().Dimensions[0], pos.Shape().Dimensions[1]
	p := graph.Reshape(graph.ConvertDType(pos, dtypes.Float32), b, 1, t, 1)
	ang := graph.Mul(p, graph.Reshape(graph.Const(g, inv), 1, 1, 1, hd)) // [B,1,T,hd]
	// rotate_half as a constant matrix: Slice has no gradient in GoMLX
	// v0.26.0, a DotGeneral has.
	rot := make([][]float32, hd)
	for i := range rot {
		rot[i] = make([]float32, hd)
	}
	for i := range half {
		rot[i+half][i] = -1
		rot[i][i+half] = 1
	}
	return rope{cos: graph.Cos(ang), sin: graph.Sin(ang), rot: graph.Const(g, rot)}
}

// apply rotates x [B, H, T, headDim].
func (r rope) apply(x *graph.Node) *graph.Node {
	return graph.Add(graph.Mul(x, r.cos), graph.Mul(linearIn(x, r.rot), r.sin))
}

// linearIn multiplies the last axis of x by an [in, out] matrix.
func linearIn(x, w *graph.Node) *graph.Node {
	return graph.DotGeneral(x, []int{x.Rank() - 1}, nil, w, []int{0}, nil)
}

// heads reshapes [B, T, n·headDim] to [B, n, T, headDim].
func (m *Model) heads(x *graph.Node, n int) *graph.Node {
	d := x.Shape().Dimensions
	return graph.TransposeAllAxes(graph.Reshape(x, d[0], d[1], n, m.cfg.HeadDim()), 0, 2, 1, 3)
}

// unheads reshapes [B, H, T, headDim] back to [B, T, H·headDim].
func (m *Model) unheads(x *graph.Node) *graph.Node {
	d := x.Shape().Dimensions
	return graph.Reshape(graph.TransposeAllAxes(x, 0, 2, 1, 3), d[0], d[2], d[1]*d[3])
}

// groupHeads views [B, H, T, n] as [B, KVHeads, (H/KVHeads)·T, n]: under
// grouped-query attention query head h reads key/value head
// h / (H/KVHeads), so each group of queries is one batch entry of the
// products with the keys and values. It is the identity without grouping.
func (m *Model) groupHeads(x *graph.Node) *graph.Node {
	kv := m.cfg.KVHeadCount()
	if kv == m.cfg.Heads {
		return x
	}
	d := x.Shape().Dimensions
	return graph.Reshape(x, d[0], kv, d[1]/kv*d[2], d[3])
}

// ungroupHeads undoes groupHeads for queries of length t.
func (m *Model) ungroupHeads(x *graph.Node, t int) *graph.Node {
	if m.cfg.KVHeadCount() == m.cfg.Heads {
		return x
	}
	d := x.Shape().Dimensions
	return graph.Reshape(x, d[0], m.cfg.Heads, t, d[3])
}

// attend computes softmax(q·kᵀ/√d + mask)·v for q [B,H,Tq,hd], k and v
// [B,KV,Tk,hd] and a boolean mask broadcastable to [B,H,Tq,Tk] (true = keep).
func (m *Model) attend(q, k, v, mask *graph.Node) *graph.Node {
	tq := q.Shape().Dimensions[2]
	s := graph.DotGeneral(m.groupHeads(q), []int{3}, []int{0, 1}, k, []int{3}, []int{0, 1})
	s = m.ungroupHeads(graph.MulScalar(s, 1/math.Sqrt(float64(m.cfg.HeadDim()))), tq)
	mask = graph.BroadcastToShape(mask, s.Shape())
	s = graph.Where(mask, s, graph.BroadcastToShape(graph.Scalar(s.Graph(), dtypes.Float32, -1e9), s.Shape()))
	p := m.groupHeads(graph.Softmax(s, -1))
	return m.ungroupHeads(graph.DotGeneral(p, []int{3}, []int{0, 1}, v, []int{2}, []int{0, 1}), tq)
}

func (m *Model) mlp(ctx *context.Context, g *graph.Graph, layer string, x *graph.Node) *graph.Node {
	gate := linear(x, weight(ctx, g, layer+"/mlp/gate_proj"))
	up := linear(x, weight(ctx, g, layer+"/mlp/up_proj"))
	return linear(graph.Mul(graph.Mul(gate, graph.Sigmoid(gate)), up), weight(ctx, g, layer+"/mlp/down_proj"))
}

func (m *Model) embed(ctx *context.Context, g *graph.Graph, tokens *graph.Node) *graph.Node {
	d := tokens.Shape().Dimensions
	idx := graph.Reshape(tokens, append(append([]int(nil), d...), 1)...)
	return graph.Gather(weight(ctx, g, "model/embed_tokens"), idx)
}

func (m *Model) head(ctx *context.Context, g *graph.Graph, h *graph.Node) *graph.Node {
	h = m.rmsNorm(h, weight(ctx, g, "model/norm"))
	return linear(h, m.outputWeight(ctx, g))
}

// forward runs the transformer over tokens [B, T] (int32) at positions 0..T-1
// with causal attention and returns the final hidden states [B, T, D] and,
// per layer, the rotated keys and the values [B, KVHeads, T, headDim].
func (m *Model) forward(ctx *context.Context, tokens *graph.Node) (h *graph.Node, ks, vs []*graph.Node) {
	g := tokens.Graph()
	b, t := tokens.Shape().Dimensions[0], tokens.Shape().Dimensions[1]
	pos := graph.Iota(g, shapes.Make(dtypes.Int32, b, t), 1)
	r := m.newRope(pos)
	causal := graph.GreaterOrEqual(
		graph.Iota(g, shapes.Make(dtypes.Int32, 1, 1, t, t), 2),
		graph.Iota(g, shapes.Make(dtypes.Int32, 1, 1, t, t), 3))
	x := m.embed(ctx, g, tokens)
	for i := range m.cfg.Layers {
		layer := fmt.Sprintf("model/layers/%d", i)
		hn := m.rmsNorm(x, weight(ctx, g, layer+"/input_layernorm"))
		q, k, v := m.projectQKV(ctx, g, layer, hn, linear)
		q, k, v = r.apply(m.heads(q, m.cfg.Heads)), r.apply(m.heads(k, m.cfg.KVHeadCount())), m.heads(v, m.cfg.KVHeadCount())
		ks, vs = append(ks, k), append(vs, v)
		a := m.unheads(m.attend(q, k, v, causal))
		x = graph.Add(x, linear(a, weight(ctx, g, layer+"/self_attn/o_proj")))
		hn = m.rmsNorm(x, weight(ctx, g, layer+"/post_attention_layernorm"))
		x = graph.Add(x, m.mlp(ctx, g, layer, hn))
	}
	return x, ks, vs
}

// Logits builds the graph of the next-token logits [B, T, V] for tokens
// [B, T] (int32) under the weights found at ctx's scope: m.Context() for the
// live weights, or a context returned by CloneWeights for a frozen copy.
// Sequences shorter than T should be right-padded: attention is causal, so
// padding never changes the logits of earlier positions.
func (m *Model) Logits(ctx *context.Context, tokens *graph.Node) *graph.Node {
	h, _, _ := m.forward(ctx, tokens)
	return m.head(ctx, tokens.Graph(), h)
}

// TokenLogProbs builds the graph of log p(targets[b,t] | inputs[b,0..t]),
// shaped [B, T], for int32 inputs and targets [B, T] (targets are usually the
// inputs shifted left by one). It is the building block of next-token losses
// and of RL objectives (ratios and KL against a CloneWeights reference).
func (m *Model) TokenLogProbs(ctx *context.Context, inputs, targets *graph.Node) *graph.Node {
	return gatherLast(graph.LogSoftmax(m.Logits(ctx, inputs), -1), targets)
}

// gatherLast picks x[b, t, idx[b,t]] from x [B, T, V] with a one-hot
// product, which has a cheap gradient.
func gatherLast(x, idx *graph.Node) *graph.Node {
	oh := graph.OneHot(idx, x.Shape().Dimensions[2], x.DType())
	return graph.ReduceSum(graph.Mul(x, oh), -1)
}

// newExec runs a context graph function with the model's backend.
func (m *Model) newExec(fn any) (*context.Exec, error) {
	ctx, err := m.weightsContext()
	if err != nil {
		return nil, err
	}
	e, err := context.NewExecAny(m.backend, ctx, fn)
	if err != nil {
		return nil, err
	}
	e.SetMaxCache(256)
	return e, nil
}

// LastLogits runs the model over each sequence (right-padded to the
// longest) and returns the logits of the next token after each one: [B][V].
// It recomputes everything from scratch (no cache); the Engine is the fast
// path, this is the reference and the naive baseline.
func (m *Model) LastLogits(seqs [][]int) ([][]float32, error) {
	m.mu.Lock()
	if m.logits == nil {
		e, err := m.newExec(func(ctx *context.Context, tokens, last *graph.Node) *graph.Node {
			logits := m.Logits(ctx, tokens)
			return gatherPosition(logits, last)
		})
		if err != nil {
			m.mu.Unlock()
			return nil, fmt.Errorf("build logits graph: %w", err)
		}
		m.logits = e
	}
	e := m.logits
	m.mu.Unlock()
	tok, last, err := padBatch(seqs, m.cfg.MaxSeq)
	if err != nil {
		return nil, err
	}
	out, err := e.Exec(tok, last)
	if err != nil {
		return nil, fmt.Errorf("run logits: %w", err)
	}
	flat, err := tensors.CopyFlatData[float32](out[0])
	if err != nil {
		return nil, err
	}
	res := make([][]float32, len(seqs))
	v := m.cfg.VocabSize
	for i := range res {
		res[i] = flat[i*v : (i+1)*v]
	}
	return res, nil
}

// gatherPosition picks x[b, last[b], :] from x [B, T, V] for last [B] int32.
func gatherPosition(x, last *graph.Node) *graph.Node {
	g := x.Graph()
	b := x.Shape().Dimensions[0]
	idx := graph.Concatenate([]*graph.Node{
		graph.Iota(g, shapes.Make(dtypes.Int32, b, 1), 0),
		graph.Reshape(last, b, 1),
	}, 1)
	return graph.Gather(x, idx)
}

// padBucket rounds a sequence length up to limit the number of compiled
// graph shapes.
func padBucket(n, max int) int {
	b := 16
	for b < n {
		b *= 2
	}
	if b > max {
		b = max
	}
	if b < n {
		b = n
	}
	return b
}

// padBatch right-pads seqs to a common bucketed length and returns the
// tokens tensor [B, T] and the index of each sequence's last token [B].
func padBatch(seqs [][]int, maxSeq int) (*tensors.Tensor, *tensors.Tensor, error) {
	if len(seqs) == 0 {
		return nil, nil, errors.New("empty batch")
	}
	longest := 0
	for i, s := range seqs {
		if len(s) == 0 {
			return nil, nil, fmt.Errorf("sequence %d is empty", i)
		}
		longest = max(longest, len(s))
	}
	if longest > maxSeq {
		return nil, nil, fmt.Errorf("sequence of %d tokens exceeds the model's %d: %w", longest, maxSeq, ErrTooLong)
	}
	t := padBucket(longest, maxSeq)
	flat := make([]int32, len(seqs)*t)
	last := make([]int32, len(seqs))
	for i, s := range seqs {
		for j, id := range s {
			flat[i*t+j] = int32(id)
		}
		last[i] = int32(len(s) - 1)
	}
	return tensors.FromFlatDataAndDimensions(flat, len(seqs), t), tensors.FromFlatDataAndDimensions(last, len(seqs)), nil
}

// ErrTooLong is returned for a sequence longer than the model's context.
var ErrTooLong = errors.New("inference: sequence too long")

// SequenceLogProbs returns, for each sequence, log p(seq[t+1] | seq[0..t])
// for t = 0..len(seq)-2. Sequences are right-padded and run as one batch.
func (m *Model) SequenceLogProbs(seqs [][]int) ([][]float32, error) {
	m.mu.Lock()
	if m.logProb == nil {
		e, err := m.newExec(func(ctx *context.Context, inputs, targets *graph.Node) *graph.Node {
			return m.TokenLogProbs(ctx, inputs, targets)
		})
		if err != nil {
			m.mu.Unlock()
			return nil, fmt.Errorf("build log-prob graph: %w", err)
		}
		m.logProb = e
	}
	e := m.logProb
	m.mu.Unlock()
	in, tg, _, err := nextTokenTensors(Batch{Tokens: seqs}, m.cfg.MaxSeq)
	if err != nil {
		return nil, fmt.Errorf("log probs: %w", err)
	}
	out, err := e.Exec(in, tg)
	if err != nil {
		return nil, fmt.Errorf("log probs: %w", err)
	}
	flat, err := tensors.CopyFlatData[float32](out[0])
	if err != nil {
		return nil, err
	}
	t := out[0].Shape().Dimensions[1]
	res := make([][]float32, len(seqs))
	for i, s := range seqs {
		res[i] = flat[i*t : i*t+len(s)-1]
	}
	return res, nil
}

// Clone returns an independent copy of the model (same architecture, copied
// weights, a backend of the same configuration), e.g. to keep serving a
// snapshot while a Trainer updates the original.
func (m *Model) Clone() (*Model, error) {
	vals, _, err := m.Weights()
	if err != nil {
		return nil, fmt.Errorf("clone model: %w", err)
	}
	return newModelWithWeights(m.cfg, m.bcfg, vals)
}
