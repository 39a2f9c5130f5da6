package inference

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func TestEngineMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, tok := tinyChatModel(t, 64)
	cfg := DefaultEngineConfig()
	cfg.Meter = mp.Meter("inference-test")
	cfg.ModelVersion = "v7"
	e := startEngine(t, m, tok, cfg)
	total := 0
	for _, n := range []int{3, 5} {
		s, err := e.Generate(context.Background(), greedy(tok.Encode("The guard"), n))
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Wait()
		if err != nil {
			t.Fatal(err)
		}
		total += len(res.Tokens)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			got[mt.Name] = mt.Data
		}
	}
	sumOf := func(name string) int64 {
		s, ok := got[name].(metricdata.Sum[int64])
		if !ok {
			t.Fatalf("metric %s: %T; want an int64 sum", name, got[name])
		}
		var v int64
		for _, dp := range s.DataPoints {
			v += dp.Value
		}
		return v
	}
	countOf := func(name string) uint64 {
		var c uint64
		switch h := got[name].(type) {
		case metricdata.Histogram[float64]:
			for _, dp := range h.DataPoints {
				c += dp.Count
			}
		case metricdata.Histogram[int64]:
			for _, dp := range h.DataPoints {
				c += dp.Count
			}
		default:
			t.Fatalf("metric %s: %T; want a histogram", name, got[name])
		}
		return c
	}
	if v := sumOf("parley.inference.tokens"); v != int64(total) {
		t.Errorf("tokens = %d; want %d", v, total)
	}
	if v := sumOf("parley.inference.requests"); v != 2 {
		t.Errorf("requests = %d; want 2", v)
	}
	if c := countOf("parley.inference.time_to_first_token"); c != 2 {
		t.Errorf("TTFT observations = %d; want 2", c)
	}
	// Every token but each request's first comes from a decode step.
	if c := countOf("parley.inference.token_latency"); c != uint64(total-2) {
		t.Errorf("decode steps = %d; want %d", c, total-2)
	}
	if c := countOf("parley.inference.batch_size"); c != uint64(total-2) {
		t.Errorf("batch size observations = %d; want %d", c, total-2)
	}
	if _, ok := got["parley.inference.queue_depth"].(metricdata.Gauge[int64]); !ok {
		t.Errorf("queue_depth: %T; want an int64 gauge", got["parley.inference.queue_depth"])
	}
	if _, ok := got["parley.inference.requests_running"].(metricdata.Gauge[int64]); !ok {
		t.Errorf("requests_running: %T; want an int64 gauge", got["parley.inference.requests_running"])
	}
	if g, ok := got["parley.inference.kv_cache_usage"].(metricdata.Gauge[float64]); !ok || g.DataPoints[0].Value < 0 || g.DataPoints[0].Value > 1 {
		t.Errorf("kv_cache_usage: %+v; want a float64 gauge in [0, 1]", got["parley.inference.kv_cache_usage"])
	}
	for _, dp := range got["parley.inference.tokens"].(metricdata.Sum[int64]).DataPoints {
		if v, _ := dp.Attributes.Value("model_version"); v.AsString() != "v7" {
			t.Errorf("tokens labelled %v; want model_version v7", dp.Attributes.ToSlice())
		}
	}
}
