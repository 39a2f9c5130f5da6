package inference

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nlpodyssey/safetensors"
	"github.com/parleyhq/parley/schema"
)

// tinyTokenizer trains a tokenizer on a few sentences; its vocabulary (about
// 300 tokens) sizes the tiny models that need a tokenizer.
func tinyTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	texts := []string{
		"The blacksmith sharpens the sword. The guard watches the gate.",
		"Welcome, traveller! The inn has warm bread and cold ale.",
		"I have not seen the dragon since the winter. Ask the guard.",
	}
	tok, err := TrainTokenizer(texts, 300)
	if err != nil {
		t.Fatalf("TrainTokenizer: %v", err)
	}
	return tok
}

func testManifest() schema.Manifest {
	return schema.Manifest{
		Model: "npc", Version: "v1", Algorithm: "sft",
		CreatedAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
	}
}

func saveTiny(t *testing.T) (string, *Model, *Tokenizer) {
	t.Helper()
	tok := tinyTokenizer(t)
	cfg := tinyConfig()
	cfg.VocabSize = tok.VocabSize()
	m, err := NewModel(cfg, DefaultBackendConfig(), 7)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "npc", "v1")
	if err := SaveCheckpoint(dir, m, tok, testManifest()); err != nil {
		t.Fatalf("SaveCheckpoint: %v", err)
	}
	return dir, m, tok
}

func TestCheckpointRoundTrip(t *testing.T) {
	dir, m, tok := saveTiny(t)
	m2, tok2, man, err := LoadCheckpoint(dir, DefaultBackendConfig())
	if err != nil {
		t.Fatalf("LoadCheckpoint: %v", err)
	}
	if man.Version != "v1" || len(man.Files) != 3 {
		t.Errorf("manifest = %+v; want version v1 and 3 files", man)
	}
	if m2.Config() != m.Config() {
		t.Errorf("config = %+v; want %+v", m2.Config(), m.Config())
	}
	text := "Welcome, traveller! Ask the guard."
	if got, want := tok2.Encode(text), tok.Encode(text); !slices.Equal(got, want) {
		t.Errorf("loaded tokenizer Encode = %v; want %v", got, want)
	}
	seqs := [][]int{tok.Encode(text), tok.Encode("The dragon")}
	want, err := m.LastLogits(seqs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := m2.LastLogits(seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("logits[%d][%d] = %g after reload; want %g", i, j, got[i][j], want[i][j])
			}
		}
	}
	// Saving over an existing version is refused: versions are immutable.
	if err := SaveCheckpoint(dir, m, tok, testManifest()); err == nil {
		t.Error("SaveCheckpoint over an existing version succeeded; want an error")
	}
}

// TestCheckpointSafetensorsStandard reads model.safetensors with an
// independent safetensors implementation.
func TestCheckpointSafetensorsStandard(t *testing.T) {
	dir, m, _ := saveTiny(t)
	raw, err := os.ReadFile(filepath.Join(dir, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	st, err := safetensors.Deserialize(raw)
	if err != nil {
		t.Fatalf("safetensors.Deserialize: %v", err)
	}
	vals, dims, err := m.Weights()
	if err != nil {
		t.Fatal(err)
	}
	if st.Len() != len(vals) {
		t.Errorf("file holds %d tensors; want %d", st.Len(), len(vals))
	}
	name := "model.layers.1.mlp.down_proj.weight"
	tv, ok := st.Tensor(name)
	if !ok {
		t.Fatalf("tensor %q missing", name)
	}
	if tv.DType().String() != "F32" || len(tv.Shape()) != 2 || int(tv.Shape()[0]) != dims[name][0] || int(tv.Shape()[1]) != dims[name][1] {
		t.Errorf("%s: dtype %s shape %v; want F32 %v", name, tv.DType(), tv.Shape(), dims[name])
	}
	d := tv.Data()
	first := math.Float32frombits(uint32(d[0]) | uint32(d[1])<<8 | uint32(d[2])<<16 | uint32(d[3])<<24)
	if first != vals[name][0] {
		t.Errorf("%s[0] = %g; want %g", name, first, vals[name][0])
	}
}

func TestCheckpointRefusesTampering(t *testing.T) {
	tests := []struct {
		name   string
		file   string
		tamper func(data []byte) []byte
	}{
		{"flipped weight byte", WeightsFile, func(d []byte) []byte { d[len(d)-3] ^= 0x40; return d }},
		{"truncated weights", WeightsFile, func(d []byte) []byte { return d[:len(d)-4] }},
		{"truncated tokenizer", TokenizerFile, func(d []byte) []byte { return d[:len(d)/2] }},
		{"edited config", ConfigFile, func(d []byte) []byte {
			return []byte(strings.Replace(string(d), `"num_hidden_layers": 2`, `"num_hidden_layers": 3`, 1))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, _, _ := saveTiny(t)
			p := filepath.Join(dir, tc.file)
			d, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, tc.tamper(d), 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, _, err = LoadCheckpoint(dir, DefaultBackendConfig())
			if !errors.Is(err, ErrChecksum) {
				t.Fatalf("LoadCheckpoint = %v; want ErrChecksum", err)
			}
			if !strings.Contains(err.Error(), tc.file) {
				t.Errorf("error %q does not name %s", err, tc.file)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		dir, _, _ := saveTiny(t)
		if err := os.Remove(filepath.Join(dir, TokenizerFile)); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := LoadCheckpoint(dir, DefaultBackendConfig()); err == nil {
			t.Fatal("LoadCheckpoint without tokenizer.json succeeded; want an error")
		}
	})
}
