// Package otelkafka carries OpenTelemetry context (W3C trace context and
// baggage) in the headers of segmentio/kafka-go messages, so a trace that
// starts in the gateway continues in the learner that consumes its events.
//
// [MessageCarrier] adapts a message to a [propagation.TextMapCarrier];
// [Inject] and [Extract] are the two calls producers and consumers need.
package otelkafka

import (
	"context"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/propagation"
)

// MessageCarrier is a [propagation.TextMapCarrier] over the headers of one
// kafka-go message. Keys are matched exactly, as the W3C propagators write
// them in lowercase.
type MessageCarrier struct {
	msg *kafka.Message
}

var _ propagation.TextMapCarrier = MessageCarrier{}

// NewMessageCarrier returns a carrier that reads and writes msg's headers.
func NewMessageCarrier(msg *kafka.Message) MessageCarrier {
	return MessageCarrier{msg: msg}
}

// Get returns the value of the first header named key, or "" when there is none.
func (c MessageCarrier) Get(key string) string {
	for _, h := range c.msg.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Set replaces every header named key with one header holding value.
func (c MessageCarrier) Set(key, value string) {
	// A new slice, so a header slice shared with another message is not mutated.
	headers := make([]kafka.Header, 0, len(c.msg.Headers)+1)
	for _, h := range c.msg.Headers {
		if h.Key != key {
			headers = append(headers, h)
		}
	}
	c.msg.Headers = append(headers, kafka.Header{Key: key, Value: []byte(value)})
}

// Keys lists the distinct header names in the order they first appear.
func (c MessageCarrier) Keys() []string {
	keys := make([]string, 0, len(c.msg.Headers))
	seen := make(map[string]bool, len(c.msg.Headers))
	for _, h := range c.msg.Headers {
		if !seen[h.Key] {
			seen[h.Key] = true
			keys = append(keys, h.Key)
		}
	}
	return keys
}

// Inject writes the trace context and baggage of ctx into msg's headers.
func Inject(ctx context.Context, p propagation.TextMapPropagator, msg *kafka.Message) {
	p.Inject(ctx, NewMessageCarrier(msg))
}

// Extract returns ctx carrying the trace context and baggage found in msg's
// headers; a consumer starts its span from it to join the producer's trace.
func Extract(ctx context.Context, p propagation.TextMapPropagator, msg kafka.Message) context.Context {
	return p.Extract(ctx, NewMessageCarrier(&msg))
}
