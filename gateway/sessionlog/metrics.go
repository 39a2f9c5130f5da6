package sessionlog

import (
	"context"

	"go.opentelemetry.io/otel/metric"
)

// instruments are the Logger's metrics. None has attributes: the topic is
// fixed per process, and no player data goes into metrics.
type instruments struct {
	published    metric.Int64Counter
	delivered    metric.Int64Counter
	spoolFull    metric.Int64Counter
	sendErrors   metric.Int64Counter
	truncated    metric.Int64Counter
	latency      metric.Float64Histogram
	registration metric.Registration
}

func newInstruments(meter metric.Meter, sp *spool) (instruments, error) {
	var m instruments
	var err error
	counter := func(name, unit, desc string) metric.Int64Counter {
		var c metric.Int64Counter
		if err == nil {
			c, err = meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		}
		return c
	}
	m.published = counter("parley.sessionlog.events.published", "{event}",
		"Session events accepted by Publish, durable in the spool.")
	m.delivered = counter("parley.sessionlog.events.delivered", "{event}",
		"Session events acknowledged by Kafka (all in-sync replicas).")
	m.spoolFull = counter("parley.sessionlog.spool.full", "{event}",
		"Session events refused because the spool was full.")
	m.sendErrors = counter("parley.sessionlog.send.errors", "{write}",
		"Failed writes to Kafka; each is retried.")
	m.truncated = counter("parley.sessionlog.spool.truncated", "By",
		"Torn or corrupt bytes cut from the spool's segments at startup.")
	if err != nil {
		return m, err
	}
	m.latency, err = meter.Float64Histogram("parley.sessionlog.delivery.latency",
		metric.WithUnit("s"),
		metric.WithDescription("Time from Publish to Kafka's acknowledgement."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600))
	if err != nil {
		return m, err
	}
	events, err := meter.Int64ObservableGauge("parley.sessionlog.spool.events", metric.WithUnit("{event}"),
		metric.WithDescription("Session events in the spool not yet acknowledged by Kafka."))
	if err != nil {
		return m, err
	}
	bytes, err := meter.Int64ObservableGauge("parley.sessionlog.spool.bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes of session events in the spool not yet acknowledged by Kafka."))
	if err != nil {
		return m, err
	}
	m.registration, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		n, b := sp.backlog()
		o.ObserveInt64(events, int64(n))
		o.ObserveInt64(bytes, b)
		return nil
	}, events, bytes)
	return m, err
}
