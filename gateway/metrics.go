package gateway

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/parleyhq/parley/schema"
)

// metrics are the gateway's instruments. Attributes are routes, methods,
// statuses, verdicts and reasons: never player text or ids.
type metrics struct {
	requests      metric.Int64Counter
	duration      metric.Float64Histogram
	ttft          metric.Float64Histogram
	turns         metric.Int64Counter
	started       metric.Int64Counter
	ended         metric.Int64Counter
	publishErrors metric.Int64Counter

	// The attribute sets of the measurements, built once each.
	requestAttrs attrCache[requestKey]
	safetyAttrs  attrCache[schema.Safety]
	reasonAttrs  attrCache[schema.EndReason]
}

// requestKey is what a request's measurements are attributed to.
type requestKey struct {
	route, method string
	status        int
}

// maxCachedAttrs bounds an attrCache: a method is the client's to choose,
// so unmatched requests can make any number of combinations.
const maxCachedAttrs = 1024

// attrCache keeps the measurement option of each attribute combination
// seen (up to maxCachedAttrs), so that a measurement does not build and
// hash its attribute set again.
type attrCache[K comparable] struct {
	mu   sync.RWMutex
	opts map[K]metric.MeasurementOption
}

// option returns the cached option of k, or metric.WithAttributes(attrs()...).
func (c *attrCache[K]) option(k K, attrs func() []attribute.KeyValue) metric.MeasurementOption {
	c.mu.RLock()
	o, ok := c.opts[k]
	c.mu.RUnlock()
	if ok {
		return o
	}
	o = metric.WithAttributes(attrs()...)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opts == nil {
		c.opts = make(map[K]metric.MeasurementOption)
	}
	if len(c.opts) < maxCachedAttrs {
		c.opts[k] = o
	}
	return o
}

func newMetrics(m metric.Meter) (*metrics, error) {
	var ms metrics
	var err error
	mk := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	mk(func() (e error) {
		ms.requests, e = m.Int64Counter("parley.gateway.requests", metric.WithDescription("HTTP requests by route and status"))
		return
	})
	mk(func() (e error) {
		ms.duration, e = m.Float64Histogram("parley.gateway.request.duration", metric.WithUnit("s"),
			metric.WithDescription("HTTP request duration by route and status"))
		return
	})
	mk(func() (e error) {
		ms.ttft, e = m.Float64Histogram("parley.gateway.time_to_first_token", metric.WithUnit("s"),
			metric.WithDescription("time from a message to its first reply token"))
		return
	})
	mk(func() (e error) {
		ms.turns, e = m.Int64Counter("parley.gateway.turns", metric.WithDescription("exchanges by safety verdict"))
		return
	})
	mk(func() (e error) {
		ms.started, e = m.Int64Counter("parley.gateway.sessions.started", metric.WithDescription("sessions started"))
		return
	})
	mk(func() (e error) {
		ms.ended, e = m.Int64Counter("parley.gateway.sessions.ended", metric.WithDescription("sessions ended by reason"))
		return
	})
	mk(func() (e error) {
		ms.publishErrors, e = m.Int64Counter("parley.gateway.event_publish_errors",
			metric.WithDescription("session events the sink refused"))
		return
	})
	if err != nil {
		return nil, fmt.Errorf("gateway metrics: %w", err)
	}
	return &ms, nil
}

func (m *metrics) request(ctx context.Context, route, method string, status int, d time.Duration) {
	attrs := m.requestAttrs.option(requestKey{route, method, status}, func() []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("route", route), attribute.String("method", method),
			attribute.String("status", strconv.Itoa(status))}
	})
	m.requests.Add(ctx, 1, attrs)
	m.duration.Record(ctx, d.Seconds(), attrs)
}

func (m *metrics) turn(ctx context.Context, safety schema.Safety) {
	m.turns.Add(ctx, 1, m.safetyAttrs.option(safety, func() []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("safety", string(safety))}
	}))
}

func (m *metrics) sessionsEnded(ctx context.Context, reason schema.EndReason) {
	m.ended.Add(ctx, 1, m.reasonAttrs.option(reason, func() []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("reason", string(reason))}
	}))
}

// observeActive reports the sessions not yet ended (all gateways together)
// at each collection.
func (m *metrics) observeActive(meter metric.Meter, count func(context.Context) (int64, error)) error {
	_, err := meter.Int64ObservableGauge("parley.gateway.sessions.active",
		metric.WithDescription("sessions not yet ended, across the gateways sharing the Redis"),
		metric.WithInt64Callback(func(ctx context.Context, o metric.Int64Observer) error {
			n, err := count(ctx)
			if err != nil {
				return fmt.Errorf("count active sessions: %w", err)
			}
			o.Observe(n)
			return nil
		}))
	if err != nil {
		return fmt.Errorf("gateway metrics: %w", err)
	}
	return nil
}
