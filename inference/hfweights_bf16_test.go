package inference

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// writeBF16Checkpoint writes m as a Hugging Face checkpoint of one
// model.safetensors whose matrices are bfloat16 (m's weights rounded) and
// whose norms and biases stay float32, as mixed checkpoints do.
func writeBF16Checkpoint(t *testing.T, dir string, m *Model) {
	t.Helper()
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
	header := map[string]safetensorsEntry{}
	var data bytes.Buffer
	for _, name := range m.WeightNames() {
		e := safetensorsEntry{DType: "F32", Shape: dims[name]}
		e.DataOffsets[0] = int64(data.Len())
		for _, v := range vals[name] {
			if len(dims[name]) == 2 {
				e.DType = "BF16"
				_ = binary.Write(&data, binary.LittleEndian, bfloat16.FromFloat32(v).Bits())
			} else {
				_ = binary.Write(&data, binary.LittleEndian, math.Float32bits(v))
			}
		}
		e.DataOffsets[1] = int64(data.Len())
		header[name] = e
	}
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	var file bytes.Buffer
	_ = binary.Write(&file, binary.LittleEndian, uint64(len(h)))
	file.Write(h)
	file.Write(data.Bytes())
	if err := os.WriteFile(filepath.Join(dir, WeightsFile), file.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// decodeLogits prefills three prompts of different lengths (so the
// batched kernels see blocks of four tokens and leftovers) and decodes four
// steps with a fresh CPU decoder, returning every logit and the decoder.
func decodeLogits(t *testing.T, m *Model) ([]float32, *cpuDecoder) {
	t.Helper()
	d := newCPUDecoder(m)
	t.Cleanup(d.close)
	if err := d.resize([]int{-1, -1, -1}, 3, 16); err != nil {
		t.Fatal(err)
	}
	prompts := [][]int{{1, 5, 9, 2, 33}, {7, 7, 12, 3, 0, 39}, {11, 2, 8, 30, 21, 4, 6}}
	all, _, err := d.prefill([]int{0, 1, 2}, prompts)
	if err != nil {
		t.Fatal(err)
	}
	for s := range int32(4) {
		logits, err := d.step([]int32{3 + s, 17, 38 - s}, []int32{5 + s, 6 + s, 7 + s}, []bool{true, s != 2, true})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, logits...)
	}
	return all, d
}

// TestOpenWeightsDecodesBF16 loads a bfloat16 checkpoint and checks that
// the CPU decoder multiplies by its bfloat16 matrices by default, with the
// logits of the float32 path on the same (bf16-rounded) weights to 1e-4
// relative, on each kernel path; that f32 can be chosen; and that once the
// weights change (training) the decoder reads the float32 ones.
func TestOpenWeightsDecodesBF16(t *testing.T) {
	src, err := newRandomModel(gqaTestConfig(), 0.3, 4)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeBF16Checkpoint(t, dir, src)
	m, err := OpenHFModel(dir, DefaultBackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Running the GoMLX graph reads the weights without replacing them.
	if _, err := m.LastLogits([][]int{{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	if w, err := m.DecodeWeights(); err != nil || w != DecodeWeightsBF16 {
		t.Fatalf("DecodeWeights() = %q, %v; want %q", w, err, DecodeWeightsBF16)
	}
	forEachDecodeKernel(t, func(t *testing.T) {
		if err := m.SetDecodeWeights(DecodeWeightsAuto); err != nil {
			t.Fatal(err)
		}
		got, d := decodeLogits(t, m)
		if d.w.embBF16 == nil || d.w.layers[0].qkv.bf16 == nil {
			t.Fatal("decoder holds float32 weights; want the checkpoint's bfloat16")
		}
		if err := m.SetDecodeWeights(DecodeWeightsF32); err != nil {
			t.Fatal(err)
		}
		want, d32 := decodeLogits(t, m)
		if d32.w.embBF16 != nil {
			t.Fatal("decoder holds bfloat16 weights after SetDecodeWeights(f32)")
		}
		if d := maxRelDiff(got, want); d > 1e-4 {
			t.Fatalf("bf16 logits differ from float32 by %g relative", d)
		}
		t.Logf("bf16 vs f32 decoder logits: max relative difference %.2g", maxRelDiff(got, want))
	})

	// A new value for one variable, as a training step gives: the
	// checkpoint's matrices no longer serve.
	if err := m.SetDecodeWeights(DecodeWeightsBF16); err != nil {
		t.Fatal(err)
	}
	v := m.Context().GetVariableByScopeAndName("/model/embed_tokens", "weight")
	old, err := v.Value()
	if err != nil {
		t.Fatal(err)
	}
	emb, err := tensors.CopyFlatData[float32](old)
	if err != nil {
		t.Fatal(err)
	}
	emb[0]++
	if err := v.SetValue(tensors.FromFlatDataAndDimensions(emb, old.Shape().Dimensions...)); err != nil {
		t.Fatal(err)
	}
	if w, err := m.DecodeWeights(); err != nil || w != DecodeWeightsF32 {
		t.Fatalf("DecodeWeights() after a weight changed = %q, %v; want %q", w, err, DecodeWeightsF32)
	}
	if _, d := decodeLogits(t, m); d.w.embBF16 != nil || d.w.emb[0] != emb[0] {
		t.Fatal("decoder still reads the checkpoint's bfloat16 after a weight changed")
	}

	if err := src.SetDecodeWeights(DecodeWeightsBF16); err == nil {
		t.Fatal("SetDecodeWeights(bf16) on a model not loaded from a checkpoint: no error")
	}
	if _, err := ParseDecodeWeights("fp8"); err == nil {
		t.Fatal(`ParseDecodeWeights("fp8"): no error`)
	}
}

// TestOpenWeightsBF16ServesWithoutFloat32 checks that a bfloat16 checkpoint
// opened to serve holds no float32 weights while the CPU decoder serves it
// (its variables hold scalar placeholders) and decodes as the float32 path
// does; that a trainer converts them and trains exactly as a model loaded
// in float32 at once; and that a model whose weights were converted
// without a decoder unmaps the shards.
func TestOpenWeightsBF16ServesWithoutFloat32(t *testing.T) {
	src, err := newRandomModel(gqaTestConfig(), 0.3, 4)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeBF16Checkpoint(t, dir, src)
	holdsFloat32 := func(m *Model) bool {
		t.Helper()
		values, err := m.weightValues()
		if err != nil {
			t.Fatal(err)
		}
		big := 0
		for _, v := range values {
			if v.Shape().Size() > 1 {
				big++
			}
		}
		if converted := m.deferred == nil; converted != (big == len(values)) {
			t.Fatalf("%d of %d variables hold weights, converted %v", big, len(values), converted)
		}
		return big > 0
	}

	m, err := OpenHFModel(dir, DefaultBackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	if holdsFloat32(m) {
		t.Fatal("a bf16 checkpoint just opened holds float32 weights")
	}
	got, d := decodeLogits(t, m)
	if d.w.embBF16 == nil || holdsFloat32(m) {
		t.Fatal("decoding converted the weights to float32 or did not read the checkpoint's bfloat16")
	}
	if w, err := m.DecodeWeights(); err != nil || w != DecodeWeightsBF16 {
		t.Fatalf("DecodeWeights() = %q, %v; want %q", w, err, DecodeWeightsBF16)
	}
	ref, err := OpenHFModel(dir, DefaultBackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := ref.SetDecodeWeights(DecodeWeightsF32); err != nil {
		t.Fatal(err)
	}
	if !holdsFloat32(ref) {
		t.Fatal("SetDecodeWeights(f32) left the weights unconverted")
	}
	want, _ := decodeLogits(t, ref)
	if diff := maxRelDiff(got, want); diff > 1e-4 {
		t.Fatalf("unconverted bf16 logits differ from float32 by %g relative", diff)
	}

	// A trainer converts the weights, which still count as loaded; its
	// steps are those of a model loaded in float32 at once.
	w, err := openHFWeights(dir)
	if err != nil {
		t.Fatal(err)
	}
	eager, err := newModelFilled(m.Config(), DefaultBackendConfig(), w.read)
	w.close()
	if err != nil {
		t.Fatal(err)
	}
	batch := Batch{Tokens: [][]int{{1, 5, 9, 2, 33, 7}, {3, 8, 21, 39}}}
	step := func(m *Model) (float32, map[string][]float32) {
		t.Helper()
		tr, err := NewTrainer(m, DefaultTrainConfig())
		if err != nil {
			t.Fatal(err)
		}
		if !holdsFloat32(m) {
			t.Fatal("NewTrainer left the weights unconverted")
		}
		loss, err := tr.Step(batch)
		if err != nil {
			t.Fatal(err)
		}
		vals, _, err := m.Weights()
		if err != nil {
			t.Fatal(err)
		}
		return loss, vals
	}
	loss, vals := step(eager)
	tr, err := NewTrainer(m, DefaultTrainConfig())
	if err != nil {
		t.Fatal(err)
	}
	if w, err := m.DecodeWeights(); err != nil || w != DecodeWeightsBF16 {
		t.Fatalf("DecodeWeights() once converted = %q, %v; want %q", w, err, DecodeWeightsBF16)
	}
	if _, d := decodeLogits(t, m); d.w.embBF16 == nil {
		t.Fatal("decoder reads float32 once the weights were converted, before any step")
	}
	lazyLoss, err := tr.Step(batch)
	if err != nil {
		t.Fatal(err)
	}
	lazyVals, _, err := m.Weights()
	if err != nil {
		t.Fatal(err)
	}
	if lazyLoss != loss {
		t.Fatalf("first step's loss %v, %v when loaded in float32", lazyLoss, loss)
	}
	for name, v := range vals {
		if !slices.Equal(lazyVals[name], v) {
			t.Fatalf("weight %q after one step differs from the model loaded in float32", name)
		}
	}
	if w, err := m.DecodeWeights(); err != nil || w != DecodeWeightsF32 {
		t.Fatalf("DecodeWeights() after a step = %q, %v; want %q", w, err, DecodeWeightsF32)
	}

	// Converted with no decoder: the shards are unmapped, and mapped again
	// for a decoder while the weights are those loaded.
	trained, err := OpenHFModel(dir, DefaultBackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	loss2, _ := step(trained)
	if loss2 != loss {
		t.Fatalf("first step's loss %v, %v when loaded in float32", loss2, loss)
	}
	if c := bf16CheckpointOf(trained); c.files != nil {
		t.Fatal("shards still mapped after the weights were converted without a decoder")
	}
	saved, err := OpenHFModel(dir, DefaultBackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := saved.Weights(); err != nil {
		t.Fatal(err)
	}
	if bf16CheckpointOf(saved).files != nil {
		t.Fatal("shards still mapped after Weights converted them without a decoder")
	}
	if got2, d := decodeLogits(t, saved); d.w.embBF16 == nil || maxRelDiff(got2, got) != 0 {
		t.Fatal("decoder did not map the checkpoint again, or decoded differently")
	}
}
