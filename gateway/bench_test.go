package gateway

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/internal/testenv"
)

// TestRunBench runs a very short bench to check that it measures every
// point; `parley bench gateway` runs the real one.
func TestRunBench(t *testing.T) {
	r := testenv.StartRedis(t)
	cfg := DefaultBenchConfig()
	cfg.Redis = r.Client
	cfg.Engine = FromEngine(startEngine(t, inference.DefaultEngineConfig()))
	cfg.Events = &recorder{}
	cfg.Concurrency = []int{1, 4}
	cfg.Duration = 300 * time.Millisecond
	cfg.Gateway = testConfig("")
	cfg.Gateway.Sampling.MaxTokens = 8
	var out bytes.Buffer
	rep, err := RunBench(context.Background(), cfg, &out)
	if err != nil {
		t.Fatalf("RunBench: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	if len(rep.Points) != 6 || len(rep.Logging) != 2 {
		t.Fatalf("got %d points and %d logging ratios; want 6 and 2", len(rep.Points), len(rep.Logging))
	}
	for _, p := range rep.Points {
		if p.Requests == 0 || p.Errors != 0 || p.P99MS < p.P50MS {
			t.Errorf("point %+v: want requests, no errors and p99 ≥ p50", p)
		}
	}
	if len(cfg.Events.(*recorder).all()) == 0 {
		t.Error("the logging-on points published no events")
	}
	keys, _ := r.Client.Keys(context.Background(), "parley-bench-*").Result()
	if len(keys) != 0 {
		t.Errorf("bench left %d keys in Redis", len(keys))
	}
}
