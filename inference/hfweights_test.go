package inference

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// hfFixtureCases are the checkpoints testdata/hf_fixtures.py writes.
var hfFixtureCases = []string{"llama3_gqa_f32", "qwen2_bias_bf16_sharded", "smollm2_f16"}

// pythonFixtures runs testdata/hf_fixtures.py into a temporary directory
// with the first python3 that has torch (the one on PATH, then Debian's
// /usr/bin/python3), or skips the test when there is none.
func pythonFixtures(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		path, err := exec.LookPath(py)
		if err != nil {
			continue
		}
		var stderr bytes.Buffer
		cmd := exec.Command(path, filepath.Join("testdata", "hf_fixtures.py"), dir)
		cmd.Stderr = &stderr
		err = cmd.Run()
		if err == nil {
			return dir
		}
		if !strings.Contains(stderr.String(), "No module named 'torch'") {
			t.Fatalf("%s testdata/hf_fixtures.py: %v\n%s", path, err, stderr.String())
		}
	}
	t.Skip("no python3 with torch: the reference logits of testdata/hf_fixtures.py need it (Debian: apt-get install python3-torch)")
	return ""
}

// allLogits runs m over tokens and returns the logits at every position.
func allLogits(t *testing.T, m *Model, tokens []int) [][]float32 {
	t.Helper()
	e, err := m.newExec(func(ctx *context.Context, x *graph.Node) *graph.Node { return m.Logits(ctx, x) })
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, len(tokens))
	for i, id := range tokens {
		ids[i] = int32(id)
	}
	out, err := e.Exec(tensors.FromFlatDataAndDimensions(ids, 1, len(ids)))
	if err != nil {
		t.Fatal(err)
	}
	flat, err := tensors.CopyFlatData[float32](out[0])
	if err != nil {
		t.Fatal(err)
	}
	v := m.Config().VocabSize
	res := make([][]float32, len(tokens))
	for i := range res {
		res[i] = flat[i*v : (i+1)*v]
	}
	return res
}

func maxAbsDiff64(got []float32, want []float64) float64 {
	d := 0.0
	for i := range got {
		d = max(d, abs64(float64(got[i])-want[i]))
	}
	return d
}

func abs64(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestOpenWeightsMatchesReference loads random checkpoints written in the
// exact Hugging Face layouts of Llama 3 (grouped-query attention, head_dim
// unlike hidden/heads, llama3 rope scaling, untied lm_head; float32),
// Qwen2.5 (q/k/v biases, tied; bfloat16 in two shards with an index) and
// SmolLM2 (Llama layout, tied; float16), and checks the logits of the full
// forward and of KV-cache decoding on both decoders against an independent
// PyTorch forward to 1e-4.
func TestOpenWeightsMatchesReference(t *testing.T) {
	root := pythonFixtures(t)
	const tol = 1e-4
	for _, name := range hfFixtureCases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, name)
			m, err := OpenHFModel(dir, DefaultBackendConfig())
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join(dir, "reference.json"))
			if err != nil {
				t.Fatal(err)
			}
			var ref struct {
				Tokens []int
				Logits [][]float64
			}
			if err := json.Unmarshal(raw, &ref); err != nil {
				t.Fatal(err)
			}
			worst, scale := 0.0, 0.0
			for i, got := range allLogits(t, m, ref.Tokens) {
				worst = max(worst, maxAbsDiff64(got, ref.Logits[i]))
				for _, v := range ref.Logits[i] {
					scale = max(scale, abs64(v))
				}
			}
			t.Logf("full forward: max |Go - PyTorch| = %.2g over logits up to %.2g", worst, scale)
			if worst > tol {
				t.Fatalf("full forward: max |Go - PyTorch| = %g; want ≤ %g", worst, tol)
			}

			// Both engine decoders: prefill 5 tokens, then one at a time.
			if got := m.DefaultDecoder(); got != DecoderCPU {
				t.Errorf("DefaultDecoder() = %q; want %q", got, DecoderCPU)
			}
			for _, name := range []string{DecoderGoMLX, DecoderCPU} {
				dec := newDecoder(m, name, 0)
				defer dec.close()
				if err := dec.resize([]int{-1}, 1, 16); err != nil {
					t.Fatal(err)
				}
				const prompt = 5
				logits, _, err := dec.prefill([]int{0}, [][]int{ref.Tokens[:prompt]})
				if err != nil {
					t.Fatal(err)
				}
				worst = maxAbsDiff64(logits, ref.Logits[prompt-1])
				for p := prompt; p < len(ref.Tokens); p++ {
					logits, err := dec.step([]int32{int32(ref.Tokens[p])}, []int32{int32(p)}, []bool{true})
					if err != nil {
						t.Fatal(err)
					}
					worst = max(worst, maxAbsDiff64(logits, ref.Logits[p]))
				}
				t.Logf("KV-cache decoding (%s): max |Go - PyTorch| = %.2g", name, worst)
				if worst > tol {
					t.Fatalf("KV-cache decoding (%s): max |Go - PyTorch| = %g; want ≤ %g", name, worst, tol)
				}
			}
		})
	}
}

// writeHFCheckpoint writes m to dir as a float32 Hugging Face checkpoint:
// config.json and model.safetensors, or, for shards > 1, that many shards
// and model.safetensors.index.json.
func writeHFCheckpoint(t *testing.T, dir string, m *Model, shards int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := marshalConfig(m.Config())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	vals, dims, err := m.Weights()
	if err != nil {
		t.Fatal(err)
	}
	names := m.WeightNames()
	weightMap := map[string]string{}
	per := (len(names) + shards - 1) / shards
	for s := range shards {
		part := names[s*per : min((s+1)*per, len(names))]
		file := WeightsFile
		if shards > 1 {
			file = "model-0000" + string(rune('1'+s)) + "-of-0000" + string(rune('0'+shards)) + ".safetensors"
		}
		var buf bytes.Buffer
		if err := writeSafetensors(&buf, part, vals, dims); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, n := range part {
			weightMap[n] = file
		}
	}
	if shards > 1 {
		raw, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
		if err := os.WriteFile(filepath.Join(dir, WeightsIndexFile), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// gqaTestConfig is a tiny Qwen2-shaped config: grouped-query attention,
// q/k/v biases, an untied head and llama3 rope scaling at once.
func gqaTestConfig() ModelConfig {
	return ModelConfig{
		VocabSize: 40, Dim: 24, Layers: 2, Heads: 4, FFNDim: 32, MaxSeq: 64, RopeBase: 10000, NormEps: 1e-6,
		KVHeads: 2, HeadSize: 8, QKVBias: true, UntiedHead: true,
		RopeScaling: &RopeScaling{RopeType: RopeTypeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPos: 16},
	}
}

// TestOpenWeightsRoundTrip writes a model in the sharded Hugging Face layout
// and checks that OpenHFModel reads back every weight and the same logits.
func TestOpenWeightsRoundTrip(t *testing.T) {
	tok := tinyTokenizer(t)
	cfg := gqaTestConfig()
	cfg.VocabSize = tok.VocabSize()
	m, err := NewModel(cfg, DefaultBackendConfig(), 3)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeHFCheckpoint(t, dir, m, 3)
	files, err := HFWeightFiles(dir)
	if err != nil || len(files) != 4 || files[0] != WeightsIndexFile {
		t.Fatalf("HFWeightFiles = %v, %v; want the index and 3 shards", files, err)
	}
	got, err := OpenHFModel(dir, DefaultBackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	if got.Config().Params() != m.Config().Params() {
		t.Fatalf("params %d; want %d", got.Config().Params(), m.Config().Params())
	}
	seq := [][]int{{1, 5, 9, 2, 33, 7, 7, 12}}
	want, err := m.LastLogits(seq)
	if err != nil {
		t.Fatal(err)
	}
	have, err := got.LastLogits(seq)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(have[0], want[0]); d != 0 {
		t.Fatalf("logits differ by %g after the round trip", d)
	}
	// Parley's registry layout keeps the architecture too.
	version := filepath.Join(t.TempDir(), "npc", "v1")
	if err := SaveCheckpoint(version, got, tok, testManifest()); err != nil {
		t.Fatal(err)
	}
	saved, _, _, err := LoadCheckpoint(version, DefaultBackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(saved.Config(), m.Config()) {
		t.Fatalf("LoadCheckpoint config %+v; want %+v", saved.Config(), m.Config())
	}
	if have, err = saved.LastLogits(seq); err != nil || maxAbsDiff(have[0], want[0]) != 0 {
		t.Fatalf("logits after SaveCheckpoint/LoadCheckpoint differ (err %v)", err)
	}
	ecfg := DefaultEngineConfig()
	ecfg.Decoder = DecoderCPU
	e, err := NewEngine(got, tok, ecfg, nil)
	if err != nil {
		t.Fatalf("NewEngine with decoder cpu: %v", err)
	}
	e.Close()
}

// TestOpenWeightsRefusesCorrupt checks that damaged checkpoints are refused
// with ErrBadWeights and an error naming the problem.
func TestOpenWeightsRefusesCorrupt(t *testing.T) {
	untied, tied := t.TempDir(), t.TempDir()
	for dir, cfg := range map[string]ModelConfig{untied: gqaTestConfig(), tied: tinyConfig()} {
		m, err := NewModel(cfg, DefaultBackendConfig(), 4)
		if err != nil {
			t.Fatal(err)
		}
		writeHFCheckpoint(t, dir, m, 2)
	}
	shard := "model-00002-of-00002.safetensors"
	tests := []struct {
		name, file string
		edit       func([]byte) []byte
		mention    string
		src        string // default: untied
	}{
		{"truncated shard", shard, func(d []byte) []byte { return d[:len(d)-6] }, shard, ""},
		{"shard with trailing bytes", shard, func(d []byte) []byte { return append(d, 0, 0, 0, 0) }, shard, ""},
		{"corrupt header", shard, func(d []byte) []byte { d[9] = '!'; return d }, shard, ""},
		{"header length past the end", shard, func(d []byte) []byte { d[5] = 0x7f; return d }, shard, ""},
		{"empty shard", shard, func([]byte) []byte { return nil }, shard, ""},
		{"missing shard", shard, nil, shard, ""},
		{"index unlike the shards", WeightsIndexFile, func(d []byte) []byte {
			return bytes.Replace(d, []byte(`"model.norm.weight":"`+shard), []byte(`"model.norm.weight":"model-00001-of-00002.safetensors`), 1)
		}, "model.norm.weight", ""},
		{"shape unlike the config", ConfigFile, func(d []byte) []byte {
			return bytes.Replace(d, []byte(`"intermediate_size": 32`), []byte(`"intermediate_size": 16`), 1)
		}, "shape", ""},
		{"bias the config lacks", ConfigFile, func(d []byte) []byte {
			d = bytes.Replace(d, []byte(`"Qwen2ForCausalLM"`), []byte(`"LlamaForCausalLM"`), 1)
			return bytes.Replace(d, []byte(`"qwen2"`), []byte(`"llama"`), 1)
		}, "k_proj.bias", ""},
		{"missing tensor", ConfigFile, func(d []byte) []byte {
			return bytes.Replace(d, []byte(`"tie_word_embeddings": true`), []byte(`"tie_word_embeddings": false`), 1)
		}, `"lm_head.weight" missing`, tied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, src := t.TempDir(), tc.src
			if src == "" {
				src = untied
			}
			entries, err := os.ReadDir(src)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				d, err := os.ReadFile(filepath.Join(src, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				if e.Name() == tc.file {
					if tc.edit == nil {
						continue
					}
					if edited := tc.edit(bytes.Clone(d)); !bytes.Equal(edited, d) {
						d = edited
					} else {
						t.Fatalf("the edit left %s unchanged", tc.file)
					}
				}
				if err := os.WriteFile(filepath.Join(dir, e.Name()), d, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err = OpenHFModel(dir, DefaultBackendConfig())
			if err == nil || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("OpenHFModel = %v; want an error naming %q", err, tc.mention)
			}
			if tc.name != "missing shard" && !errors.Is(err, ErrBadWeights) {
				t.Errorf("error %v does not wrap ErrBadWeights", err)
			}
			t.Logf("%v", err)
		})
	}
}

// TestOpenWeightsTrainsOnGoMLX checks that the GoMLX trainer fine-tunes the
// imported architectures (grouped-query attention, biases, untied head):
// the loss on a repeated batch falls by a quarter and the biases and lm_head move.
func TestOpenWeightsTrainsOnGoMLX(t *testing.T) {
	m, err := NewModel(gqaTestConfig(), DefaultBackendConfig(), 5)
	if err != nil {
		t.Fatal(err)
	}
	before, _, err := m.Weights()
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultTrainConfig()
	cfg.LearningRate = 1e-2
	tr, err := NewTrainer(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	batch := Batch{Tokens: [][]int{{1, 2, 3, 4, 5, 6, 7, 8}, {9, 3, 9, 3, 9, 3}}}
	first, err := tr.Step(batch)
	if err != nil {
		t.Fatal(err)
	}
	last := first
	for range 15 {
		if last, err = tr.Step(batch); err != nil {
			t.Fatal(err)
		}
	}
	if last > 0.75*first {
		t.Fatalf("loss %g after 16 steps from %g; want a quarter less at least", last, first)
	}
	after, _, err := m.Weights()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"model.layers.0.self_attn.k_proj.bias", "lm_head.weight"} {
		if maxAbsDiff(after[name], before[name]) == 0 {
			t.Errorf("%s did not change", name)
		}
	}
}

// TestOpenWeightsEngineGenerates serves an imported architecture through
// the Engine, as the gateway does: the default decoder is GoMLX and greedy
// generation matches a greedy loop over the full forward.
func TestOpenWeightsEngineGenerates(t *testing.T) {
	tok := tinyTokenizer(t)
	cfg := gqaTestConfig()
	cfg.VocabSize = tok.VocabSize()
	m, err := NewModel(cfg, DefaultBackendConfig(), 9)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(m, tok, DefaultEngineConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := e.Start()
	defer stop()
	prompt := []int{5, 17, 42, 8, 99}
	s, err := e.Generate(t.Context(), Request{Prompt: prompt, MaxTokens: 6, Stop: []int{}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Wait()
	if err != nil {
		t.Fatal(err)
	}
	seq := append([]int(nil), prompt...)
	for range 6 {
		l, err := m.LastLogits([][]int{seq})
		if err != nil {
			t.Fatal(err)
		}
		seq = append(seq, argmax(l[0]))
	}
	if !slices.Equal(res.Tokens, seq[len(prompt):]) {
		t.Fatalf("engine generated %v; the full forward greedily gives %v", res.Tokens, seq[len(prompt):])
	}
}
