package inference

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"
	"weak"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/nlpodyssey/safetensors"
)

// DecodeWeights is the precision the CPU decoder holds a model's weight
// matrices in (Model.SetDecodeWeights).
type DecodeWeights string

const (
	// DecodeWeightsAuto is bfloat16 for a model loaded from a checkpoint
	// whose matrices are all bfloat16 (OpenHFModel, LoadCheckpoint), float32
	// otherwise.
	DecodeWeightsAuto DecodeWeights = ""
	// DecodeWeightsF32 copies every weight to float32 and lays the
	// matrices out in panels for the float32 kernels.
	DecodeWeightsF32 DecodeWeights = "f32"
	// DecodeWeightsBF16 multiplies by the checkpoint's bfloat16 matrices
	// where they lie in the memory-mapped files, widening them to float32
	// in registers and accumulating in float32: half the bytes read per
	// token and no copy of the matrices.
	DecodeWeightsBF16 DecodeWeights = "bf16"
)

// ParseDecodeWeights reads "auto" (or ""), "f32" or "bf16".
func ParseDecodeWeights(s string) (DecodeWeights, error) {
	switch w := DecodeWeights(s); w {
	case "auto":
		return DecodeWeightsAuto, nil
	case DecodeWeightsAuto, DecodeWeightsF32, DecodeWeightsBF16:
		return w, nil
	}
	return "", fmt.Errorf("decode weights %q: want auto, f32 or bf16", s)
}

// bf16Checkpoint records where the weights of a Model loaded from a
// bfloat16 checkpoint came from, so that the CPU decoder can multiply by
// the checkpoint's own matrices instead of float32 copies. It applies
// while the model's variables still hold the values loaded: once a Trainer
// or a restore gives one a new value, the decoder reads float32 from the
// model again. The shards mapped at load stay mapped until the float32
// weights are converted from them, and after that only if a decoder took
// them (a trainer that never decodes unmaps them, and a decoder maps them
// again if it needs them later); they are unmapped when the Model is
// garbage.
type bf16Checkpoint struct {
	dir    string
	stamps map[string]fileStamp // weight file → as it was at load

	mu   sync.Mutex
	mode DecodeWeights
	// loaded are, per variable in Model.names order, the values that are
	// the weights as loaded: the placeholders, and the float32 tensors
	// converted from the checkpoint once there are some; weak so that a
	// model being trained does not keep them alive.
	loaded [][]weak.Pointer[tensors.Tensor]
	files  *hfWeights // nil when not mapped
	used   bool       // a decoder took files
}

// fileStamp is what tells a weight file replaced since load.
type fileStamp struct {
	size int64
	mod  time.Time
}

// bf16Checkpoints maps weak.Pointer[Model] to *bf16Checkpoint. Model
// (model.go) is shared with the trainers, so the decoder's view of a
// checkpoint lives beside it, dropped with it.
var bf16Checkpoints sync.Map

// littleEndian: the bfloat16 matrices are read in place as uint16.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// bf16CheckpointOf returns m's checkpoint record, nil when m was not
// loaded from a bfloat16 checkpoint.
func bf16CheckpointOf(m *Model) *bf16Checkpoint {
	c, ok := bf16Checkpoints.Load(weak.Make(m))
	if !ok {
		return nil
	}
	return c.(*bf16Checkpoint)
}

// allMatricesBF16 reports whether the CPU decoder can read cfg's matrices
// in place in w: all are bfloat16, on a little-endian machine.
func allMatricesBF16(cfg ModelConfig, w *hfWeights) bool {
	if !littleEndian {
		return false
	}
	_, dims := weightShapes(cfg)
	for name, d := range dims {
		tv, _ := w.shards[w.located[name]].Tensor(name)
		if len(d) == 2 && tv.DType() != safetensors.BF16 {
			return false
		}
	}
	return true
}

// newBF16Model builds the model of cfg from the checkpoint in dir, whose
// matrices are all bfloat16 and whose shards w are mapped and checked: the
// model keeps w, its float32 weights are converted from w when first read
// (newModelDeferred), and the CPU decoder multiplies by w's matrices.
func newBF16Model(dir string, cfg ModelConfig, backend BackendConfig, w *hfWeights) (*Model, error) {
	c := &bf16Checkpoint{dir: dir, stamps: map[string]fileStamp{}, files: w}
	files, err := HFWeightFiles(dir)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		c.stamps[f] = fileStamp{fi.Size(), fi.ModTime()}
	}
	m, err := newModelDeferred(cfg, backend, w.read, c.converted)
	if err != nil {
		return nil, err
	}
	placeholders, err := m.weightValues()
	if err != nil {
		return nil, err
	}
	c.loaded = make([][]weak.Pointer[tensors.Tensor], len(placeholders))
	for i, t := range placeholders {
		c.loaded[i] = []weak.Pointer[tensors.Tensor]{weak.Make(t)}
	}
	key := weak.Make(m)
	bf16Checkpoints.Store(key, c)
	runtime.AddCleanup(m, func(key weak.Pointer[Model]) {
		if c, ok := bf16Checkpoints.LoadAndDelete(key); ok {
			c.(*bf16Checkpoint).close()
		}
	}, key)
	return m, nil
}

// converted records the float32 tensors converted from the checkpoint as
// the weights loaded too, and unmaps the shards unless a decoder took them.
func (c *bf16Checkpoint) converted(values []*tensors.Tensor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, t := range values {
		c.loaded[i] = append(c.loaded[i], weak.Make(t))
	}
	if c.files != nil && !c.used {
		c.files.close()
		c.files = nil
	}
}

// SetDecodeWeights chooses the precision of the CPU decoders that read m's
// weights from now on (an engine created afterwards): DecodeWeightsAuto
// ("auto" too), DecodeWeightsF32 or DecodeWeightsBF16. DecodeWeightsBF16
// needs a model loaded from a bfloat16 checkpoint, and applies while its
// weights are the ones loaded.
func (m *Model) SetDecodeWeights(w DecodeWeights) error {
	w, err := ParseDecodeWeights(string(w))
	if err != nil {
		return err
	}
	c := bf16CheckpointOf(m)
	if c == nil {
		if w == DecodeWeightsBF16 {
			return fmt.Errorf("decode weights bf16: the model was not loaded from a checkpoint whose matrices are all bfloat16")
		}
		return nil
	}
	if w == DecodeWeightsF32 {
		// The decoder copies the float32 weights: convert them now, not
		// while a decoder holds the placeholders.
		if _, err := m.weightsContext(); err != nil {
			return fmt.Errorf("decode weights f32: %w", err)
		}
	}
	c.mu.Lock()
	c.mode = w
	c.mu.Unlock()
	return nil
}

// DecodeWeights returns the precision a CPU decoder reading m's weights
// now holds its matrices in: DecodeWeightsBF16 or DecodeWeightsF32.
func (m *Model) DecodeWeights() (DecodeWeights, error) {
	c := bf16CheckpointOf(m)
	if c == nil {
		return DecodeWeightsF32, nil
	}
	values, err := m.weightValues()
	if err != nil {
		return "", err
	}
	if c.serves(values) {
		return DecodeWeightsBF16, nil
	}
	return DecodeWeightsF32, nil
}

// weightValues returns the current value of each variable, in m.names order.
func (m *Model) weightValues() ([]*tensors.Tensor, error) {
	values := make([]*tensors.Tensor, len(m.names))
	for i, name := range m.names {
		scope, vname := weightScope(name)
		v := m.ctx.GetVariableByScopeAndName(scope, vname)
		if v == nil {
			return nil, fmt.Errorf("read weight %q: not in context", name)
		}
		t, err := v.Value()
		if err != nil {
			return nil, fmt.Errorf("read weight %q: %w", name, err)
		}
		values[i] = t
	}
	return values, nil
}

// serves reports whether the decoder should use the checkpoint's bfloat16
// matrices for a model whose variables hold values: bf16 is chosen and
// they are still the values loaded.
func (c *bf16Checkpoint) serves(values []*tensors.Tensor) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mode == DecodeWeightsF32 || len(values) != len(c.loaded) {
		return false
	}
	for i, t := range values {
		if !slices.Contains(c.loaded[i], weak.Make(t)) {
			return false
		}
	}
	return true
}

// mapped returns the checkpoint's shards for a decoder, mapping them again
// if they were unmapped, or nil when a weight file has been replaced since
// load.
func (c *bf16Checkpoint) mapped() (*hfWeights, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.files != nil {
		c.used = true
		return c.files, nil
	}
	for f, st := range c.stamps {
		fi, err := os.Stat(filepath.Join(c.dir, f))
		if err != nil || fi.Size() != st.size || !fi.ModTime().Equal(st.mod) {
			return nil, nil
		}
	}
	w, err := openHFWeights(c.dir)
	if err != nil {
		return nil, fmt.Errorf("map %q: %w", c.dir, err)
	}
	c.files, c.used = w, true
	return w, nil
}

// bf16CPUWeights lays out m's weights for the CPU decoder in bfloat16 from
// its checkpoint when that serves the variables' current values, else
// returns nil.
func bf16CPUWeights(m *Model, values []*tensors.Tensor) (*cpuWeights, error) {
	c := bf16CheckpointOf(m)
	if c == nil || !c.serves(values) {
		return nil, nil
	}
	files, err := c.mapped()
	if err != nil || files == nil {
		return nil, err
	}
	return layOutBF16CPUWeights(m.cfg, files)
}

// close unmaps the shards.
func (c *bf16Checkpoint) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.files != nil {
		c.files.close()
		c.files = nil
	}
}

// layOutBF16CPUWeights lays out cfg's weights for the CPU decoder from the
// checkpoint's mapped shards: the matrices (embeddings and head included)
// stay bfloat16 where they lie, the q/k/v and gate/up projections stacked
// as blocks rather than copied together; norms and biases are read as
// float32. It returns nil when the shards cannot be read in place (a
// matrix at an odd address).
func layOutBF16CPUWeights(c ModelConfig, files *hfWeights) (*cpuWeights, error) {
	D, F := c.Dim, c.FFNDim
	f32 := func(name string, n int) ([]float32, error) {
		v := make([]float32, n)
		return v, files.read(name, v)
	}
	matrix := func(out, in int, names ...string) (cpuMatrix, bool) {
		m := cpuMatrix{in: in, out: out}
		for _, name := range names {
			tv, _ := files.shards[files.located[name]].Tensor(name)
			data := tv.Data()
			if tv.DType() != safetensors.BF16 || len(data) == 0 || len(data)%(2*in) != 0 || uintptr(unsafe.Pointer(&data[0]))%2 != 0 {
				return cpuMatrix{}, false
			}
			rows := unsafe.Slice((*uint16)(unsafe.Pointer(&data[0])), len(data)/2)
			m.bf16 = append(m.bf16, bf16Block{w: rows, rows: len(rows) / in})
		}
		return m, true
	}
	var err error
	w := &cpuWeights{}
	if w.norm, err = f32("model.norm.weight", D); err != nil {
		return nil, err
	}
	emb, ok := matrix(c.VocabSize, D, "model.embed_tokens.weight")
	if !ok {
		return nil, nil
	}
	w.embBF16, w.head = emb.bf16[0].w, emb
	if c.UntiedHead {
		if w.head, ok = matrix(c.VocabSize, D, "lm_head.weight"); !ok {
			return nil, nil
		}
	}
	q, qkv := c.Heads*c.HeadDim(), (c.Heads+2*c.KVHeadCount())*c.HeadDim()
	for i := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		var ly cpuLayer
		if ly.attnNorm, err = f32(p+"input_layernorm.weight", D); err != nil {
			return nil, err
		}
		if ly.mlpNorm, err = f32(p+"post_attention_layernorm.weight", D); err != nil {
			return nil, err
		}
		if c.QKVBias {
			kv := c.KVHeadCount() * c.HeadDim()
			ly.qkvBias = make([]float32, 0, qkv)
			for _, b := range []struct {
				name string
				n    int
			}{{"q_proj", q}, {"k_proj", kv}, {"v_proj", kv}} {
				v, err := f32(p+"self_attn."+b.name+".bias", b.n)
				if err != nil {
					return nil, err
				}
				ly.qkvBias = append(ly.qkvBias, v...)
			}
		}
		var ok1, ok2, ok3, ok4 bool
		ly.qkv, ok1 = matrix(qkv, D, prefixed(p+"self_attn.", "q_proj.weight", "k_proj.weight", "v_proj.weight")...)
		ly.o, ok2 = matrix(D, q, p+"self_attn.o_proj.weight")
		ly.gateUp, ok3 = matrix(2*F, D, prefixed(p+"mlp.", "gate_proj.weight", "up_proj.weight")...)
		ly.down, ok4 = matrix(D, F, p+"mlp.down_proj.weight")
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return nil, nil
		}
		w.layers = append(w.layers, ly)
	}
	w.cos, w.sin = ropeTables(c)
	return w, nil
}

// prefixed returns names each with prefix p.
func prefixed(p string, names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = p + n
	}
	return out
}
