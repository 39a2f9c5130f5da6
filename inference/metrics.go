package inference

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// engineMetrics are the Engine's OpenTelemetry instruments, the series an
// operator of vLLM watches. Labels carry only the model version and the
// finish reason: never prompt or player text.
type engineMetrics struct {
	queueDepth   atomic.Int64
	running      atomic.Int64
	kvTokens     atomic.Int64
	kvCapacity   int64
	version      []attribute.KeyValue
	labels       metric.MeasurementOption
	batchSize    metric.Int64Histogram
	tokens       metric.Int64Counter
	promptTokens metric.Int64Counter
	reusedTokens metric.Int64Counter
	requests     metric.Int64Counter
	ttft         metric.Float64Histogram
	tokenLatency metric.Float64Histogram
	reg          metric.Registration
}

// newEngineMetrics labels every series with version when it is set;
// kvCapacity is the number of token positions of the KV cache.
func newEngineMetrics(meter metric.Meter, version string, kvCapacity int) (*engineMetrics, error) {
	if meter == nil {
		meter = noop.NewMeterProvider().Meter("")
	}
	em := &engineMetrics{kvCapacity: int64(kvCapacity)}
	if version != "" {
		em.version = []attribute.KeyValue{attribute.String("model_version", version)}
	}
	em.labels = metric.WithAttributes(em.version...)
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	em.batchSize, err = meter.Int64Histogram("parley.inference.batch_size",
		metric.WithDescription("Sequences decoded together per step."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128))
	add(err)
	em.tokens, err = meter.Int64Counter("parley.inference.tokens",
		metric.WithDescription("Tokens generated; its rate is the engine's tokens/s."), metric.WithUnit("{token}"))
	add(err)
	em.promptTokens, err = meter.Int64Counter("parley.inference.prompt_tokens",
		metric.WithDescription("Prompt tokens prefilled."), metric.WithUnit("{token}"))
	add(err)
	em.reusedTokens, err = meter.Int64Counter("parley.inference.prompt_tokens_reused",
		metric.WithDescription("Prompt tokens whose keys and values were copied from a kept sequence instead of run (a subset of prompt_tokens)."),
		metric.WithUnit("{token}"))
	add(err)
	em.requests, err = meter.Int64Counter("parley.inference.requests",
		metric.WithDescription("Finished generations by finish reason."))
	add(err)
	em.ttft, err = meter.Float64Histogram("parley.inference.time_to_first_token",
		metric.WithDescription("From Generate to the first token, queueing included."), metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	add(err)
	em.tokenLatency, err = meter.Float64Histogram("parley.inference.token_latency",
		metric.WithDescription("Duration of one decode step, i.e. the time between two tokens of a sequence."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1))
	add(err)
	qd, err := meter.Int64ObservableGauge("parley.inference.queue_depth",
		metric.WithDescription("Requests waiting for a batch slot."))
	add(err)
	running, err := meter.Int64ObservableGauge("parley.inference.requests_running",
		metric.WithDescription("Sequences in the running batch."))
	add(err)
	kv, err := meter.Float64ObservableGauge("parley.inference.kv_cache_usage",
		metric.WithDescription("Fraction of the KV cache's token positions held by running sequences (0-1)."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	em.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(qd, em.queueDepth.Load(), em.labels)
		o.ObserveInt64(running, em.running.Load(), em.labels)
		if em.kvCapacity > 0 {
			o.ObserveFloat64(kv, float64(em.kvTokens.Load())/float64(em.kvCapacity), em.labels)
		}
		return nil
	}, qd, running, kv)
	if err != nil {
		return nil, err
	}
	return em, nil
}

func (em *engineMetrics) finished(reason string) {
	attrs := append([]attribute.KeyValue{attribute.String("finish_reason", reason)}, em.version...)
	em.requests.Add(context.Background(), 1, metric.WithAttributes(attrs...))
}

func (em *engineMetrics) step(batch int, d time.Duration) {
	ctx := context.Background()
	em.batchSize.Record(ctx, int64(batch), em.labels)
	em.tokenLatency.Record(ctx, d.Seconds(), em.labels)
}

// load records the running batch: its sequences and the cache positions
// they hold.
func (em *engineMetrics) load(running, kvTokens int) {
	em.running.Store(int64(running))
	em.kvTokens.Store(int64(kvTokens))
}

func (em *engineMetrics) firstToken(d time.Duration) {
	em.ttft.Record(context.Background(), d.Seconds(), em.labels)
}

func (em *engineMetrics) generated(tokens int) {
	em.tokens.Add(context.Background(), int64(tokens), em.labels)
}

func (em *engineMetrics) prefilled(tokens int) {
	em.promptTokens.Add(context.Background(), int64(tokens), em.labels)
}

func (em *engineMetrics) reused(tokens int) {
	if tokens > 0 {
		em.reusedTokens.Add(context.Background(), int64(tokens), em.labels)
	}
}

func (em *engineMetrics) close() {
	if em.reg != nil {
		_ = em.reg.Unregister()
	}
}
