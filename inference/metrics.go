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

// engineMetrics are the Engine's OpenTelemetry instruments. Labels carry only
// the finish reason: never prompt or player text.
type engineMetrics struct {
	queueDepth   atomic.Int64
	batchSize    metric.Int64Histogram
	tokens       metric.Int64Counter
	promptTokens metric.Int64Counter
	requests     metric.Int64Counter
	ttft         metric.Float64Histogram
	tokenLatency metric.Float64Histogram
	reg          metric.Registration
}

func newEngineMetrics(meter metric.Meter) (*engineMetrics, error) {
	if meter == nil {
		meter = noop.NewMeterProvider().Meter("")
	}
	em := &engineMetrics{}
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
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	em.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(qd, em.queueDepth.Load())
		return nil
	}, qd)
	if err != nil {
		return nil, err
	}
	return em, nil
}

func (em *engineMetrics) finished(reason string) {
	em.requests.Add(context.Background(), 1, metric.WithAttributes(attribute.String("finish_reason", reason)))
}

func (em *engineMetrics) step(batch int, d time.Duration) {
	ctx := context.Background()
	em.batchSize.Record(ctx, int64(batch))
	em.tokenLatency.Record(ctx, d.Seconds())
}

func (em *engineMetrics) close() {
	if em.reg != nil {
		_ = em.reg.Unregister()
	}
}
