package inference

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/parleyhq/parley/internal/atomicfile"
	"github.com/parleyhq/parley/schema"
)

// ErrChecksum is returned when a checkpoint file does not match the sha256
// recorded in its manifest.json.
var ErrChecksum = errors.New("inference: checkpoint checksum mismatch")

// Checkpoint file names of the registry layout (DESIGN.md §3).
const (
	ConfigFile    = "config.json"
	WeightsFile   = "model.safetensors"
	TokenizerFile = "tokenizer.json"
	ManifestFile  = "manifest.json"
)

// checkpointConfig is config.json: the ModelConfig plus the fields that let
// Hugging Face tools recognise the architecture.
type checkpointConfig struct {
	ModelConfig
	ModelType         string   `json:"model_type"`
	Architectures     []string `json:"architectures"`
	TieWordEmbeddings bool     `json:"tie_word_embeddings"`
	TorchDType        string   `json:"torch_dtype"`
	HeadDim           int      `json:"head_dim"`
	NumKeyValueHeads  int      `json:"num_key_value_heads"`
	HiddenAct         string   `json:"hidden_act"`
}

// SaveCheckpoint writes m and tok to dir in the registry layout: config.json,
// model.safetensors, tokenizer.json and manifest.json, whose Files get the
// sha256 of the other three (CreatedAt defaults to now). The version is
// written into a temporary directory next to dir and renamed into place, so a
// reader never sees a partial version; dir must not exist or be empty.
func SaveCheckpoint(dir string, m *Model, tok *Tokenizer, man schema.Manifest) error {
	return SaveImportedCheckpoint(dir, m, tok, nil, man)
}

// SaveImportedCheckpoint is SaveCheckpoint for a model imported from a
// Hugging Face checkpoint (or fine-tuned from one), whose HFFiles src
// (ReadHFFiles of that checkpoint) the version carries: its chat files as
// they were, listed in the manifest, and a config.json that is the
// original's with Parley's description of m written over it (the dtype is
// float32, as the weights Parley writes). The version loads with
// LoadCheckpoint and LoadChatFormat and answers through the same template.
// A nil src is SaveCheckpoint.
func SaveImportedCheckpoint(dir string, m *Model, tok *Tokenizer, src HFFiles, man schema.Manifest) error {
	if tok == nil {
		return fmt.Errorf("save checkpoint %q: nil tokenizer", dir)
	}
	if tok.VocabSize() > m.cfg.VocabSize {
		return fmt.Errorf("save checkpoint %q: tokenizer has %d tokens, model only %d", dir, tok.VocabSize(), m.cfg.VocabSize)
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("save checkpoint %q: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("save checkpoint %q: %w", dir, err)
	}
	defer os.RemoveAll(tmp) // no-op after a successful rename
	if err := writeCheckpointFiles(tmp, m, tok, src, &man); err != nil {
		return fmt.Errorf("save checkpoint %q: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("save checkpoint %q: %w", dir, err)
	}
	return nil
}

func writeCheckpointFiles(tmp string, m *Model, tok *Tokenizer, src HFFiles, man *schema.Manifest) error {
	cfgJSON, err := marshalConfig(m.cfg)
	if err != nil {
		return err
	}
	if original, ok := src[ConfigFile]; ok {
		if cfgJSON, err = mergeHFConfig(original, cfgJSON); err != nil {
			return err
		}
	}
	if err := atomicfile.Write(filepath.Join(tmp, ConfigFile), append(cfgJSON, '\n'), 0o644); err != nil {
		return err
	}
	vals, dims, err := m.Weights()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := writeSafetensors(&buf, m.names, vals, dims); err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(tmp, WeightsFile), buf.Bytes(), 0o644); err != nil {
		return err
	}
	if err := tok.Save(filepath.Join(tmp, TokenizerFile)); err != nil {
		return err
	}
	for _, name := range src.chatNames() {
		if err := atomicfile.Write(filepath.Join(tmp, name), src[name], 0o644); err != nil {
			return err
		}
	}
	man.Files = map[string]string{}
	for _, name := range append([]string{ConfigFile, WeightsFile, TokenizerFile}, src.chatNames()...) {
		sum, err := schema.FileSHA256(filepath.Join(tmp, name))
		if err != nil {
			return err
		}
		man.Files[name] = sum
	}
	if man.CreatedAt.IsZero() {
		man.CreatedAt = time.Now().UTC()
	}
	if err := man.Validate(); err != nil {
		return err
	}
	manJSON, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(tmp, ManifestFile), append(manJSON, '\n'), 0o644)
}

// marshalConfig renders c as a Hugging Face config.json of float32 weights
// (Qwen2 when it has q/k/v biases, else Llama), which ParseHFConfig reads
// back as c.
func marshalConfig(c ModelConfig) ([]byte, error) {
	modelType, arch := "llama", ArchLlama
	if c.QKVBias {
		modelType, arch = "qwen2", ArchQwen2
	}
	return json.MarshalIndent(checkpointConfig{
		ModelConfig: c, ModelType: modelType, Architectures: []string{arch},
		TieWordEmbeddings: !c.UntiedHead, TorchDType: "float32", HeadDim: c.HeadDim(),
		NumKeyValueHeads: c.KVHeadCount(), HiddenAct: "silu",
	}, "", "  ")
}

// LoadCheckpoint reads a version written by SaveCheckpoint, or a Hugging
// Face checkpoint imported into the registry (bf16/f16/f32, sharded or not;
// see OpenHFModel). It verifies the sha256 of every file listed in
// manifest.json first and returns an error wrapping ErrChecksum, naming the
// file, on any mismatch. An imported model's chat files, which the manifest
// lists too, are read with LoadChatFormat and ReadHFFiles.
func LoadCheckpoint(dir string, backend BackendConfig) (*Model, *Tokenizer, schema.Manifest, error) {
	var man schema.Manifest
	fail := func(err error) (*Model, *Tokenizer, schema.Manifest, error) {
		return nil, nil, schema.Manifest{}, fmt.Errorf("load checkpoint %q: %w", dir, err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return fail(err)
	}
	if err := json.Unmarshal(raw, &man); err != nil {
		return fail(fmt.Errorf("parse %s: %w", ManifestFile, err))
	}
	if err := man.Validate(); err != nil {
		return fail(err)
	}
	names := make([]string, 0, len(man.Files))
	for name := range man.Files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if filepath.Base(name) != name {
			return fail(fmt.Errorf("manifest lists %q outside the version directory", name))
		}
		sum, err := schema.FileSHA256(filepath.Join(dir, name))
		if err != nil {
			return fail(err)
		}
		if sum != man.Files[name] {
			return fail(fmt.Errorf("%s: sha256 %s, manifest says %s: %w", name, sum, man.Files[name], ErrChecksum))
		}
	}
	weights, err := HFWeightFiles(dir)
	if err != nil {
		return fail(err)
	}
	for _, name := range append([]string{ConfigFile, TokenizerFile}, weights...) {
		if _, ok := man.Files[name]; !ok {
			return fail(fmt.Errorf("manifest does not list %s", name))
		}
	}
	cfg, tok, err := readConfigAndTokenizer(dir)
	if err != nil {
		return fail(err)
	}
	m, err := loadHFWeights(dir, cfg, backend)
	if err != nil {
		return fail(err)
	}
	return m, tok, man, nil
}

// safetensorsEntry is one tensor of a safetensors header.
type safetensorsEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// writeSafetensors writes float32 tensors in the safetensors format: an
// 8-byte little-endian header length, a JSON header {name: {dtype, shape,
// data_offsets}} padded with spaces to a multiple of 8, then the raw
// little-endian data in names order.
func writeSafetensors(w io.Writer, names []string, vals map[string][]float32, dims map[string][]int) error {
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, n := range names {
		size := int64(len(vals[n])) * 4
		header[n] = safetensorsEntry{DType: "F32", Shape: dims[n], DataOffsets: [2]int64{off, off + size}}
		off += size
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hj)))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return err
	}
	if _, err := w.Write(hj); err != nil {
		return err
	}
	for _, n := range names {
		b := make([]byte, 4*len(vals[n]))
		for i, v := range vals[n] {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}
