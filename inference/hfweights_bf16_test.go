package inference

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
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
	all, err := d.prefill([]int{0, 1, 2}, prompts)
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
