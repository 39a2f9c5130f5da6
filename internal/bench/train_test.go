package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/parleyhq/parley/inference"
)

func TestRunTrainTiny(t *testing.T) {
	small := inference.DefaultModelConfig()
	small.VocabSize, small.Dim, small.Layers, small.Heads, small.FFNDim, small.MaxSeq = 256, 32, 1, 2, 64, 32
	larger := small
	larger.Dim, larger.FFNDim = 64, 96
	cfg := DefaultTrainConfig()
	cfg.Sizes = []inference.ModelConfig{small, larger}
	cfg.Batch, cfg.Seq, cfg.Rounds, cfg.NativeSteps, cfg.GoMLXSteps, cfg.GoMLXLargerSteps = 2, 16, 1, 1, 1, 0
	cfg.CeilingTool = "" // the native kernel's peak
	var out bytes.Buffer
	rep, err := RunTrain(context.Background(), cfg, &out)
	if err != nil {
		t.Fatalf("RunTrain: %v", err)
	}
	if rep.CeilingGFLOPS <= 0 || !strings.HasPrefix(rep.CeilingSource, "native-") {
		t.Errorf("ceiling %g GFLOP/s from %q; want a positive native-kernel figure", rep.CeilingGFLOPS, rep.CeilingSource)
	}
	if len(rep.Sizes) != 2 || rep.Sizes[0].Params != small.Params() {
		t.Fatalf("sizes = %+v; want the default size first, then the larger", rep.Sizes)
	}
	first, second := rep.Sizes[0], rep.Sizes[1]
	if !(first.NativeTokensPerSec > 0 && first.GoMLXTokensPerSec > 0 && first.NativeShareOfCeiling > 0 && first.PeakRSSMB > 0) {
		t.Errorf("first size %+v: want native and GoMLX rates, a share and a peak RSS", first)
	}
	if second.GoMLXSteps != 0 || second.GoMLXTokensPerSec != 0 || second.NativeTokensPerSec <= 0 {
		t.Errorf("second size %+v: want native only (GoMLX skipped)", second)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatalf("json.Marshal(report): %v", err)
	}
	for _, key := range []string{`"ceiling_gflops"`, `"sizes"`, `"params"`, `"native_tokens_per_s"`, `"gomlx_tokens_per_s"`, `"native_share_of_ceiling"`, `"peak_rss_mb"`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("JSON lacks %s: %s", key, b)
		}
	}
	if !strings.Contains(out.String(), "native tok/s") {
		t.Errorf("table lacks its header:\n%s", out.String())
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %g; want %g", c.in, got, c.want)
		}
	}
}
