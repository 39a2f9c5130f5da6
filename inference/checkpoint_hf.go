package inference

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// hfChatFileNames are the files of an imported Hugging Face checkpoint,
// beside config.json, tokenizer.json and the weights, that make it answer
// through its chat template (see LoadChatFormat).
var hfChatFileNames = []string{"tokenizer_config.json", "chat_template.jinja", "generation_config.json", "special_tokens_map.json"}

// HFFiles are what an imported Hugging Face checkpoint holds that Parley
// does not write from a Model and a Tokenizer: its chat files (template,
// generation config, special tokens) by name, and its config.json, whose
// fields Parley does not read (bos_token_id, eos_token_id, ...) a
// fine-tuned version keeps. A Parley checkpoint has none: nil.
type HFFiles map[string][]byte

// ReadHFFiles reads the HFFiles of the checkpoint in dir: nil for a
// checkpoint without a chat file (Parley's own).
func ReadHFFiles(dir string) (HFFiles, error) {
	files := HFFiles{}
	for _, name := range hfChatFileNames {
		data, err := os.ReadFile(filepath.Join(dir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return nil, fmt.Errorf("read hugging face files: %w", err)
		}
		files[name] = data
	}
	if len(files) == 0 {
		return nil, nil
	}
	cfg, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("read hugging face files: %w", err)
	}
	files[ConfigFile] = cfg
	return files, nil
}

// Write writes f's files into dir, so that ReadHFFiles(dir) reads them
// back and LoadChatFormat(dir, ...) finds the template: a training run
// keeps its parent's HFFiles so.
func (f HFFiles) Write(dir string) error {
	for _, name := range slices.Sorted(maps.Keys(f)) {
		if err := os.WriteFile(filepath.Join(dir, name), f[name], 0o644); err != nil {
			return fmt.Errorf("write hugging face files: %w", err)
		}
	}
	return nil
}

// chatNames lists the chat files f holds, sorted.
func (f HFFiles) chatNames() []string {
	var names []string
	for _, name := range slices.Sorted(maps.Keys(f)) {
		if slices.Contains(hfChatFileNames, name) {
			names = append(names, name)
		}
	}
	return names
}

// mergeHFConfig returns the original config.json with the fields of
// Parley's own (marshalConfig) written over it; a "dtype" field, which
// newer transformers write instead of torch_dtype, becomes float32 too.
func mergeHFConfig(original, parley []byte) ([]byte, error) {
	var out, ours map[string]json.RawMessage
	if err := json.Unmarshal(original, &out); err != nil {
		return nil, fmt.Errorf("parse the imported %s: %w", ConfigFile, err)
	}
	if err := json.Unmarshal(parley, &ours); err != nil {
		return nil, err
	}
	maps.Copy(out, ours)
	if _, ok := out["dtype"]; ok {
		out["dtype"] = json.RawMessage(`"float32"`)
	}
	return json.MarshalIndent(out, "", "  ")
}
