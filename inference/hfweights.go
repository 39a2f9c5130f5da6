package inference

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/nlpodyssey/safetensors"
	"github.com/x448/float16"
	"golang.org/x/sys/unix"
)

// ErrBadWeights is returned for safetensors weights that are corrupt,
// truncated, incomplete or shaped unlike the config.
var ErrBadWeights = errors.New("inference: bad model weights")

// WeightsIndexFile is the index of a sharded Hugging Face checkpoint: its
// weight_map names the shard of every tensor.
const WeightsIndexFile = "model.safetensors.index.json"

// OpenHFModel loads a Hugging Face checkpoint directory (Llama, Qwen2 or
// SmolLM2): config.json (ParseHFConfig) and the weights in
// model.safetensors or in the shards model.safetensors.index.json lists,
// in float32, float16 or bfloat16. Each shard is memory-mapped and its
// tensors converted one at a time into the model's float32 weights, so
// loading never holds the checkpoint in memory besides the model. A shard
// that is corrupt or truncated, a missing tensor, a shape unlike the
// config's or an unknown tensor is refused with an error wrapping
// ErrBadWeights that names it. The tokenizer is not read here.
//
// When every matrix of the checkpoint is bfloat16, the shards stay mapped
// and the CPU decoder multiplies by the checkpoint's own matrices instead
// of float32 copies, as long as the weights are the ones loaded (see
// DecodeWeights and Model.SetDecodeWeights); the float32 weights, which
// trainers and the GoMLX graph read, are converted only when something
// first reads them (Model.Context, Model.Weights, a trainer), so a model
// that only the CPU decoder serves never holds them.
func OpenHFModel(dir string, backend BackendConfig) (*Model, error) {
	cfg, err := ReadHFConfig(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("open model %q: %w", dir, err)
	}
	m, err := loadHFWeights(dir, cfg, backend)
	if err != nil {
		return nil, fmt.Errorf("open model %q: %w", dir, err)
	}
	return m, nil
}

// loadHFWeights builds the model of cfg from the safetensors weights in dir
// (see OpenHFModel).
func loadHFWeights(dir string, cfg ModelConfig, backend BackendConfig) (*Model, error) {
	w, err := openHFWeights(dir)
	if err != nil {
		return nil, err
	}
	kept := false
	defer func() {
		if !kept {
			w.close()
		}
	}()
	_, dims := weightShapes(cfg)
	if err := w.check(dims, cfg.ignoredTensor); err != nil {
		return nil, err
	}
	if !allMatricesBF16(cfg, w) {
		return newModelFilled(cfg, backend, w.read)
	}
	m, err := newBF16Model(dir, cfg, backend, w)
	kept = err == nil
	return m, err
}

// CheckHFCheckpoint verifies, without converting the weights, that dir
// holds a checkpoint Parley can serve: config.json (ParseHFConfig),
// tokenizer.json (LoadTokenizer) with no more tokens than the model, and
// safetensors weights with every tensor of the config in its shape. It
// returns the config and the files a registry version of the checkpoint
// consists of: those, plus tokenizer_config.json, chat_template.jinja,
// generation_config.json and special_tokens_map.json where present.
func CheckHFCheckpoint(dir string) (ModelConfig, []string, error) {
	fail := func(err error) (ModelConfig, []string, error) {
		return ModelConfig{}, nil, fmt.Errorf("check model %q: %w", dir, err)
	}
	cfg, _, err := readConfigAndTokenizer(dir)
	if err != nil {
		return fail(err)
	}
	w, err := openHFWeights(dir)
	if err != nil {
		return fail(err)
	}
	defer w.close()
	_, dims := weightShapes(cfg)
	if err := w.check(dims, cfg.ignoredTensor); err != nil {
		return fail(err)
	}
	weights, err := HFWeightFiles(dir)
	if err != nil {
		return fail(err)
	}
	files := append([]string{ConfigFile, TokenizerFile}, weights...)
	for _, extra := range hfChatFileNames {
		if _, err := os.Stat(filepath.Join(dir, extra)); err == nil {
			files = append(files, extra)
		}
	}
	return cfg, files, nil
}

// readConfigAndTokenizer reads dir's config.json and tokenizer.json and
// checks that the tokenizer fits the model's vocabulary.
func readConfigAndTokenizer(dir string) (ModelConfig, *Tokenizer, error) {
	cfg, err := ReadHFConfig(filepath.Join(dir, ConfigFile))
	if err != nil {
		return ModelConfig{}, nil, err
	}
	tok, err := LoadTokenizer(filepath.Join(dir, TokenizerFile))
	if err != nil {
		return ModelConfig{}, nil, err
	}
	if tok.VocabSize() > cfg.VocabSize {
		return ModelConfig{}, nil, fmt.Errorf("tokenizer has %d tokens, model only %d", tok.VocabSize(), cfg.VocabSize)
	}
	return cfg, tok, nil
}

// HFWeightFiles lists the weight files of the checkpoint in dir: the index
// and its shards, or model.safetensors alone.
func HFWeightFiles(dir string) ([]string, error) {
	idx, err := readWeightsIndex(dir)
	if err != nil {
		return nil, err
	}
	if idx == nil {
		return []string{WeightsFile}, nil
	}
	files := []string{WeightsIndexFile}
	for _, shard := range idx {
		if !slices.Contains(files, shard) {
			files = append(files, shard)
		}
	}
	slices.Sort(files[1:])
	return files, nil
}

// readWeightsIndex returns the weight_map of dir's index (tensor → shard
// file), or nil when the checkpoint is one unsharded file.
func readWeightsIndex(dir string) (map[string]string, error) {
	raw, err := os.ReadFile(filepath.Join(dir, WeightsIndexFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", WeightsIndexFile, err, ErrBadWeights)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: empty weight_map: %w", WeightsIndexFile, ErrBadWeights)
	}
	for name, shard := range idx.WeightMap {
		if shard == "" || filepath.Base(shard) != shard || !strings.HasSuffix(shard, ".safetensors") {
			return nil, fmt.Errorf("%s: tensor %q in shard %q, want a .safetensors file in the directory: %w", WeightsIndexFile, name, shard, ErrBadWeights)
		}
	}
	return idx.WeightMap, nil
}

// hfWeights is a checkpoint's shards, memory-mapped and parsed.
type hfWeights struct {
	maps    [][]byte                           // to unmap
	index   map[string]string                  // the index's weight_map; nil without one
	shards  map[string]safetensors.SafeTensors // by file name
	located map[string]string                  // tensor → shard file
}

func newHFWeights(index map[string]string) *hfWeights {
	return &hfWeights{index: index, shards: map[string]safetensors.SafeTensors{}, located: map[string]string{}}
}

func openHFWeights(dir string) (_ *hfWeights, err error) {
	idx, err := readWeightsIndex(dir)
	if err != nil {
		return nil, err
	}
	w := newHFWeights(idx)
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	files, err := HFWeightFiles(dir)
	if err != nil {
		return nil, err
	}
	for _, file := range files {
		if file == WeightsIndexFile {
			continue
		}
		data, err := w.mapFile(filepath.Join(dir, file))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if err := w.addShard(file, data); err != nil {
			return nil, err
		}
	}
	for name, file := range idx {
		if _, ok := w.located[name]; !ok {
			return nil, fmt.Errorf("tensor %q: the index places it in %s, which lacks it: %w", name, file, ErrBadWeights)
		}
	}
	return w, nil
}

// mapFile memory-maps one file read-only; close unmaps it.
func (w *hfWeights) mapFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() < 8 {
		return nil, fmt.Errorf("%d bytes, too short for a safetensors header: %w", fi.Size(), ErrBadWeights)
	}
	if int64(int(fi.Size())) != fi.Size() {
		return nil, fmt.Errorf("%d bytes do not fit the address space: %w", fi.Size(), ErrBadWeights)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	w.maps = append(w.maps, data)
	return data, nil
}

// addShard parses the safetensors file named file, whose bytes are data,
// and records where its tensors are. The library checks that the offsets
// tile the data exactly, so a truncated or padded file is refused.
func (w *hfWeights) addShard(file string, data []byte) error {
	st, err := safetensors.Deserialize(data)
	if err != nil {
		return fmt.Errorf("%s: %w: %w", file, err, ErrBadWeights)
	}
	w.shards[file] = st
	for _, name := range st.Names() {
		if other, dup := w.located[name]; dup {
			return fmt.Errorf("tensor %q in both %s and %s: %w", name, other, file, ErrBadWeights)
		}
		if w.index != nil && w.index[name] != file {
			return fmt.Errorf("tensor %q is in %s, the index says %q: %w", name, file, w.index[name], ErrBadWeights)
		}
		w.located[name] = file
	}
	return nil
}

// ignoredTensor reports a tensor a checkpoint may hold beyond c's weights:
// the rotary tables old Llama checkpoints store, and lm_head.weight when
// the head is tied to the embeddings.
func (c ModelConfig) ignoredTensor(name string) bool {
	return strings.HasSuffix(name, ".rotary_emb.inv_freq") || name == "lm_head.weight" && !c.UntiedHead
}

// check verifies, before any conversion, that the shards hold every tensor
// of want with its shape and a supported dtype, and nothing else but what
// ignored allows.
func (w *hfWeights) check(want map[string][]int, ignored func(name string) bool) error {
	for _, name := range slices.Sorted(maps.Keys(want)) {
		file, ok := w.located[name]
		if !ok {
			return fmt.Errorf("tensor %q missing: %w", name, ErrBadWeights)
		}
		tv, _ := w.shards[file].Tensor(name)
		switch tv.DType() {
		case safetensors.F32, safetensors.F16, safetensors.BF16:
		default:
			return fmt.Errorf("%s: tensor %q has dtype %s, want F32, F16 or BF16: %w", file, name, tv.DType(), ErrBadWeights)
		}
		shape := make([]int, len(tv.Shape()))
		for i, d := range tv.Shape() {
			shape[i] = int(d)
		}
		if !slices.Equal(shape, want[name]) {
			return fmt.Errorf("%s: tensor %q has shape %v, the config wants %v: %w", file, name, shape, want[name], ErrBadWeights)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(w.located)) {
		if _, known := want[name]; !known && !ignored(name) {
			return fmt.Errorf("%s: tensor %q is not part of the configured architecture: %w", w.located[name], name, ErrBadWeights)
		}
	}
	return nil
}

// read converts tensor name into dst (float32), as newModelFilled asks.
func (w *hfWeights) read(name string, dst []float32) error {
	tv, ok := w.shards[w.located[name]].Tensor(name)
	if !ok {
		return fmt.Errorf("tensor %q missing: %w", name, ErrBadWeights)
	}
	data := tv.Data()
	size := int(tv.DType().Size())
	if len(data) != size*len(dst) {
		return fmt.Errorf("tensor %q: %d bytes for %d values: %w", name, len(data), len(dst), ErrBadWeights)
	}
	switch tv.DType() {
	case safetensors.F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
	case safetensors.BF16:
		for i := range dst {
			dst[i] = bfloat16.FromBits(binary.LittleEndian.Uint16(data[2*i:])).Float32()
		}
	case safetensors.F16:
		for i := range dst {
			dst[i] = float16.Frombits(binary.LittleEndian.Uint16(data[2*i:])).Float32()
		}
	default:
		return fmt.Errorf("tensor %q: dtype %s: %w", name, tv.DType(), ErrBadWeights)
	}
	return nil
}

// close unmaps the shards; the parsed views are invalid afterwards.
func (w *hfWeights) close() {
	for _, m := range w.maps {
		_ = unix.Munmap(m)
	}
	w.maps, w.shards = nil, nil
}
