package inference

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/parleyhq/parley/schema"
)

// TestOpenWeightsFineTuneCheckpointKeepsTemplate saves a model imported
// from a Hugging Face directory with the directory's HFFiles and checks
// that the version carries its chat template, generation config and the
// config.json fields Parley does not read, each checked by the manifest, and
// that it loads and encodes prompts as the imported directory does.
func TestOpenWeightsFineTuneCheckpointKeepsTemplate(t *testing.T) {
	tok := byteTokenizer(t, "<|endoftext|>", "<|im_start|>", "<|im_end|>")
	cfg := ModelConfig{VocabSize: tok.VocabSize(), Dim: 16, Layers: 1, Heads: 4, KVHeads: 2, FFNDim: 24,
		MaxSeq: 128, RopeBase: 1e6, NormEps: 1e-6, QKVBias: true}
	m, err := NewModel(cfg, DefaultBackendConfig(), 3)
	if err != nil {
		t.Fatal(err)
	}
	src := chatModelDir(t, "qwen2.5", `{"bos_token_id": 0, "eos_token_id": [2, 0]}`)
	cfgJSON, err := marshalConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var hf map[string]any
	if err := json.Unmarshal(cfgJSON, &hf); err != nil {
		t.Fatal(err)
	}
	hf["bos_token_id"], hf["eos_token_id"], hf["torch_dtype"], hf["dtype"] = 0, 2, "bfloat16", "bfloat16"
	raw, _ := json.Marshal(hf)
	if err := os.WriteFile(filepath.Join(src, ConfigFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := ReadHFFiles(src)
	if err != nil {
		t.Fatal(err)
	}
	if got := files.chatNames(); !slices.Equal(got, []string{"generation_config.json", "tokenizer_config.json"}) {
		t.Fatalf("chat files %v", got)
	}
	dst := filepath.Join(t.TempDir(), "v2")
	if err := SaveImportedCheckpoint(dst, m, tok, files, schema.Manifest{Model: "npc", Version: "v2", Algorithm: "sft"}); err != nil {
		t.Fatal(err)
	}
	m2, tok2, man, err := LoadCheckpoint(dst, DefaultBackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m2.Config(), cfg) {
		t.Errorf("reloaded config %+v; want %+v", m2.Config(), cfg)
	}
	for _, name := range []string{"tokenizer_config.json", "generation_config.json"} {
		if man.Files[name] == "" {
			t.Errorf("manifest does not list %s", name)
		}
	}
	var saved map[string]any
	raw, err = os.ReadFile(filepath.Join(dst, ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &saved); err != nil {
		t.Fatal(err)
	}
	if saved["bos_token_id"] != 0.0 || saved["eos_token_id"] != 2.0 || saved["torch_dtype"] != "float32" || saved["dtype"] != "float32" {
		t.Errorf("config.json %s: want the original's token ids and float32", raw)
	}
	want, err := LoadChatFormat(src, tok)
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadChatFormat(dst, tok2)
	if err != nil {
		t.Fatal(err)
	}
	if got.Template() == nil || !slices.Equal(got.Stop(), want.Stop()) {
		t.Fatalf("reloaded format: template %v, stop %v; want the import's, stop %v", got.Template() != nil, got.Stop(), want.Stop())
	}
	wantIDs, _ := want.Encode(fineTuneDialogue(), true)
	gotIDs, _ := got.Encode(fineTuneDialogue(), true)
	if !slices.Equal(gotIDs, wantIDs) {
		t.Errorf("reloaded prompt %v; want the import's %v", gotIDs, wantIDs)
	}

	// A chat file changed after publishing is caught.
	if err := os.WriteFile(filepath.Join(dst, "tokenizer_config.json"), []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := LoadCheckpoint(dst, DefaultBackendConfig()); !errors.Is(err, ErrChecksum) {
		t.Errorf("tampered template: %v; want ErrChecksum", err)
	}
}
