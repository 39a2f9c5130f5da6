package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
)

func TestRunInferenceTiny(t *testing.T) {
	cfg := DefaultInferenceConfig()
	cfg.Model.VocabSize, cfg.Model.Dim, cfg.Model.Layers, cfg.Model.Heads, cfg.Model.FFNDim = 512, 32, 2, 2, 64
	cfg.Model.MaxSeq = 64
	cfg.Batches = []int{1, 4}
	cfg.PromptTokens, cfg.DecodeTokens, cfg.NaiveTokens = 8, 8, 4
	cfg.TrainBatch, cfg.TrainSeq, cfg.TrainSteps = 2, 16, 1
	cfg.MinDecodeSeconds = 0
	var out bytes.Buffer
	rep, err := RunInference(context.Background(), cfg, &out)
	if err != nil {
		t.Fatalf("RunInference: %v", err)
	}
	if len(rep.Decode) != 2 || rep.Decode[1].Batch != 4 {
		t.Fatalf("decode rows = %+v; want batches 1 and 4", rep.Decode)
	}
	for _, d := range rep.Decode {
		if !(d.TokensPerSec > 0 && d.FLOPS > 0 && d.Fraction > 0 && d.Fraction < 1) {
			t.Errorf("decode batch %d: %+v; want positive rates and a fraction below 1", d.Batch, d)
		}
	}
	if rep.NaiveTokensPerSec <= 0 || rep.TTFTMillis <= 0 || rep.Train == nil || rep.Train.TokensPerSec <= 0 {
		t.Errorf("report %+v: want naive, TTFT and train figures", rep)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Errorf("json.Marshal(report): %v", err)
	}
	if !strings.Contains(out.String(), "decode batch 4") {
		t.Errorf("table lacks the batch-4 row:\n%s", out.String())
	}
	if len(rep.Decoders) != 2 || rep.Decoders[0].Decoder != inference.DecoderCPU || rep.Decoders[1].Decoder != inference.DecoderGoMLX || rep.Decoder != inference.DecoderCPU {
		t.Fatalf("decoder runs = %+v; want cpu (headline) then gomlx", rep.Decoders)
	}
	for _, run := range rep.Decoders {
		if len(run.Decode) != 2 || len(run.HeadlineSpeedup) != 2 || !(run.HeadlineSpeedup[0] > 0) || run.TTFTMillis <= 0 {
			t.Errorf("decoder %s: %+v; want two decode rows, speedups and a TTFT", run.Decoder, run)
		}
	}
	if k := rep.DecodeKernels; k != inference.DecodeKernels() || k == "" {
		t.Errorf("decode kernels %q; want %q", k, inference.DecodeKernels())
	}
	if !strings.Contains(out.String(), "decoders compared") || !strings.Contains(out.String(), inference.DecoderGoMLX) {
		t.Errorf("table lacks the decoder comparison:\n%s", out.String())
	}
}

// TestRunInferenceHFModel benchmarks a Hugging Face checkpoint directory
// of an open-weight architecture on its default (CPU) decoder, without the
// naive and training figures, and reports the peak RSS.
func TestRunInferenceHFModel(t *testing.T) {
	mc := inference.DefaultModelConfig()
	mc.VocabSize, mc.Dim, mc.Layers, mc.Heads, mc.FFNDim, mc.MaxSeq = 512, 32, 2, 4, 64, 64
	mc.KVHeads, mc.HeadSize, mc.QKVBias = 2, 16, true
	m, err := inference.NewModel(mc, inference.DefaultBackendConfig(), 3)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := inference.TrainTokenizer([]string{"bench"}, 300)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "v1")
	man := schema.Manifest{Model: "npc", Version: "v1", Algorithm: "sft", CreatedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	if err := inference.SaveCheckpoint(dir, m, tok, man); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultInferenceConfig()
	cfg.HFModel, cfg.Decoders = dir, nil
	cfg.Batches = []int{1, 4}
	cfg.PromptTokens, cfg.DecodeTokens, cfg.NaiveTokens, cfg.TrainSteps = 8, 8, 0, 0
	cfg.MinDecodeSeconds = 0
	var out bytes.Buffer
	rep, err := RunInference(context.Background(), cfg, &out)
	if err != nil {
		t.Fatalf("RunInference: %v", err)
	}
	if rep.Model.KVHeads != 2 || rep.Decoder != inference.DecoderCPU || len(rep.Decode) != 2 {
		t.Fatalf("report %+v; want the checkpoint's config decoded on %s at 2 batch sizes", rep, inference.DecoderCPU)
	}
	if rep.NaiveTokensPerSec != 0 || rep.Train != nil || !(rep.PeakRSSMB > 0) {
		t.Errorf("report %+v; want no naive or train figures and a peak RSS", rep)
	}
	if strings.Contains(out.String(), "naive recompute") {
		t.Errorf("table has a naive row though none was measured:\n%s", out.String())
	}
}
