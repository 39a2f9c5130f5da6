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
func OpenHFModel(dir string, backend BackendConfig) (*Model, error) {
	cfg, err := ReadHFConfig(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("open model %q: %w", dir, err)
	}
	w, err := openHFWeights(dir)
	if err != nil {
		return nil, fmt.Errorf("open model %q: %w", dir, err)
	}
	defer w.close()
	if err := w.check(cfg); err != nil {
		return nil, fmt.Errorf("open model %q: %w", dir, err)
	}
	m, err := newModelFilled(cfg, backend, w.read)
	if err != nil {
		return nil, fmt.Errorf("open model %q: %w", dir, err)
	}
	return m, nil
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
	shards  map[string]safetensors.SafeTensors // by file name
	located map[string]string                  // tensor → shard file
}

func openHFWeights(dir string) (_ *hfWeights, err error) {
	idx, err := readWeightsIndex(dir)
	if err != nil {
		return nil, err
	}
	w := &hfWeights{shards: map[string]safetensors.SafeTensors{}, located: map[string]string{}}
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
		st, err := w.mapShard(filepath.Join(dir, file))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		w.shards[file] = st
		for _, name := range st.Names() {
			if other, dup := w.located[name]; dup {
				return nil, fmt.Errorf("tensor %q in both %s and %s: %w", name, other, file, ErrBadWeights)
			}
			if idx != nil && idx[name] != file {
				return nil, fmt.Errorf("tensor %q is in %s, the index says %q: %w", name, file, idx[name], ErrBadWeights)
			}
			w.located[name] = file
		}
	}
	for name, file := range idx {
		if _, ok := w.located[name]; !ok {
			return nil, fmt.Errorf("tensor %q: the index places it in %s, which lacks it: %w", name, file, ErrBadWeights)
		}
	}
	return w, nil
}

// mapShard memory-maps one safetensors file read-only and parses its
// header; the library checks that the offsets tile the data exactly, so a
// truncated or padded file is refused.
func (w *hfWeights) mapShard(path string) (safetensors.SafeTensors, error) {
	f, err := os.Open(path)
	if err != nil {
		return safetensors.SafeTensors{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return safetensors.SafeTensors{}, err
	}
	if fi.Size() < 8 {
		return safetensors.SafeTensors{}, fmt.Errorf("%d bytes, too short for a safetensors header: %w", fi.Size(), ErrBadWeights)
	}
	if int64(int(fi.Size())) != fi.Size() {
		return safetensors.SafeTensors{}, fmt.Errorf("%d bytes do not fit the address space: %w", fi.Size(), ErrBadWeights)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return safetensors.SafeTensors{}, fmt.Errorf("mmap: %w", err)
	}
	w.maps = append(w.maps, data)
	st, err := safetensors.Deserialize(data)
	if err != nil {
		return safetensors.SafeTensors{}, fmt.Errorf("%w: %w", err, ErrBadWeights)
	}
	return st, nil
}

// check verifies, before any conversion, that the shards hold exactly the
// tensors of cfg with its shapes and a supported dtype. Rotary tables that
// old Llama checkpoints store, and lm_head.weight of a tied model, are
// ignored.
func (w *hfWeights) check(cfg ModelConfig) error {
	names, dims := weightShapes(cfg)
	for _, name := range names {
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
		if !slices.Equal(shape, dims[name]) {
			return fmt.Errorf("%s: tensor %q has shape %v, the config wants %v: %w", file, name, shape, dims[name], ErrBadWeights)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(w.located)) {
		file := w.located[name]
		_, known := dims[name]
		switch {
		case known, strings.HasSuffix(name, ".rotary_emb.inv_freq"), name == "lm_head.weight" && !cfg.UntiedHead:
		default:
			return fmt.Errorf("%s: tensor %q is not part of the configured architecture: %w", file, name, ErrBadWeights)
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
