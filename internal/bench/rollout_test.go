package bench

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/parleyhq/parley/internal/testenv"
)

// TestTwoGatewaysSwapUnderLoad runs RunRollout on a tiny model: two pools,
// each following the rollout state in one Redis through its own watcher,
// under request load through ten canary-then-promote swaps. Every request
// must succeed and both pools must serve every generation; the times are
// logged, not asserted.
func TestTwoGatewaysSwapUnderLoad(t *testing.T) {
	r := testenv.StartRedis(t)
	cfg := DefaultRolloutConfig()
	cfg.Model.Dim, cfg.Model.Layers, cfg.Model.Heads, cfg.Model.FFNDim, cfg.Model.MaxSeq = 32, 1, 2, 64, 64
	cfg.Steady, cfg.MaxTokens = 200*time.Millisecond, 4
	cfg.Prefix, cfg.WorkDir = r.Prefix, t.TempDir()
	rep, err := RunRollout(context.Background(), cfg, r.Client, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatalf("RunRollout: %v", err)
	}
	out, _ := json.Marshal(rep)
	t.Logf("report: %s", out)
	if rep.Failed != 0 {
		t.Errorf("%d of %d requests failed during the swaps (first: %s); want 0", rep.Failed, rep.Requests, rep.FirstError)
	}
	if rep.PromoteMS.N != 10 || rep.CanaryMS.N != 10 {
		t.Errorf("measured %d promotes and %d canaries; want 10 each", rep.PromoteMS.N, rep.CanaryMS.N)
	}
	if rep.SteadyLatencyMS.N == 0 || rep.SwapLatencyMS.N == 0 {
		t.Errorf("latency samples: %d steady, %d during swaps; want both > 0", rep.SteadyLatencyMS.N, rep.SwapLatencyMS.N)
	}
}

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := summarize(ds)
	want := Summary{N: 100, Mean: 50.5, P50: 50.5, P95: 95.05, P99: 99.01, Max: 100} // interpolated percentiles
	if got != want {
		t.Errorf("summarize(1..100 ms) = %+v; want %+v", got, want)
	}
	if got := summarize(nil); got != (Summary{}) {
		t.Errorf("summarize(nil) = %+v; want zero", got)
	}
}

// BenchmarkRolloutSwap runs RunRollout with the default model (three swaps)
// and reports its medians: go test -run '^$' -bench RolloutSwap -benchtime 1x ./internal/bench
func BenchmarkRolloutSwap(b *testing.B) {
	r := testenv.StartRedis(b)
	cfg := DefaultRolloutConfig()
	cfg.Swaps, cfg.Steady = 3, 2*time.Second
	cfg.Prefix, cfg.WorkDir = r.Prefix, b.TempDir()
	for b.Loop() {
		rep, err := RunRollout(context.Background(), cfg, r.Client, nil)
		if err != nil {
			b.Fatal(err)
		}
		if rep.Failed != 0 {
			b.Fatalf("%d requests failed: %s", rep.Failed, rep.FirstError)
		}
		b.ReportMetric(rep.CanaryMS.P50, "canary-ms-p50")
		b.ReportMetric(rep.PromoteMS.P50, "promote-ms-p50")
		b.ReportMetric(rep.PromoteMS.Max, "promote-ms-max")
		b.ReportMetric(rep.SteadyLatencyMS.P95, "steady-req-ms-p95")
		b.ReportMetric(rep.SwapLatencyMS.P95, "swap-req-ms-p95")
	}
}
