package otelkafka

import (
	"context"
	"slices"
	"testing"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func TestCarrier(t *testing.T) {
	tests := []struct {
		name     string
		headers  []kafka.Header
		set      [][2]string
		wantGet  map[string]string
		wantKeys []string
	}{
		{name: "empty", wantGet: map[string]string{"traceparent": ""}, wantKeys: []string{}},
		{
			name:     "set adds",
			set:      [][2]string{{"traceparent", "a"}},
			wantGet:  map[string]string{"traceparent": "a", "tracestate": ""},
			wantKeys: []string{"traceparent"},
		},
		{
			name:     "set replaces every duplicate and keeps other headers",
			headers:  []kafka.Header{{Key: "traceparent", Value: []byte("old")}, {Key: "app", Value: []byte("x")}, {Key: "traceparent", Value: []byte("older")}},
			set:      [][2]string{{"traceparent", "new"}},
			wantGet:  map[string]string{"traceparent": "new", "app": "x"},
			wantKeys: []string{"app", "traceparent"},
		},
		{
			name:     "get returns the first of duplicates and keys are distinct",
			headers:  []kafka.Header{{Key: "k", Value: []byte("1")}, {Key: "k", Value: []byte("2")}},
			wantGet:  map[string]string{"k": "1", "K": ""},
			wantKeys: []string{"k"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := kafka.Message{Headers: slices.Clone(tt.headers)}
			c := NewMessageCarrier(&msg)
			for _, kv := range tt.set {
				c.Set(kv[0], kv[1])
			}
			for k, want := range tt.wantGet {
				if got := c.Get(k); got != want {
					t.Errorf("Get(%q) = %q; want %q", k, got, want)
				}
			}
			if got := c.Keys(); !slices.Equal(got, tt.wantKeys) {
				t.Errorf("Keys() = %q; want %q", got, tt.wantKeys)
			}
		})
	}
}

func TestSetDoesNotMutateSharedHeaders(t *testing.T) {
	shared := []kafka.Header{{Key: "traceparent", Value: []byte("a")}, {Key: "app", Value: []byte("x")}}
	a := kafka.Message{Headers: shared}
	NewMessageCarrier(&a).Set("traceparent", "b")
	if got := string(shared[0].Value); got != "a" || shared[0].Key != "traceparent" {
		t.Fatalf("shared header after Set = %s=%q; want traceparent=%q", shared[0].Key, got, "a")
	}
}

func TestInjectExtractRoundTrip(t *testing.T) {
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	member, err := baggage.NewMember("deployment", "eu-1")
	if err != nil {
		t.Fatal(err)
	}
	bag, err := baggage.New(member)
	if err != nil {
		t.Fatal(err)
	}
	ctx := baggage.ContextWithBaggage(trace.ContextWithSpanContext(context.Background(), sc), bag)

	msg := kafka.Message{Key: []byte("s1"), Value: []byte("{}")}
	Inject(ctx, prop, &msg)
	wantParent := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if got := NewMessageCarrier(&msg).Get("traceparent"); got != wantParent {
		t.Fatalf("traceparent header = %q; want %q", got, wantParent)
	}

	got := Extract(context.Background(), prop, msg)
	gotSC := trace.SpanContextFromContext(got)
	if gotSC.TraceID() != sc.TraceID() || gotSC.SpanID() != sc.SpanID() || !gotSC.IsSampled() || !gotSC.IsRemote() {
		t.Errorf("extracted span context = %v/%v sampled=%v remote=%v; want %v/%v sampled remote",
			gotSC.TraceID(), gotSC.SpanID(), gotSC.IsSampled(), gotSC.IsRemote(), sc.TraceID(), sc.SpanID())
	}
	if v := baggage.FromContext(got).Member("deployment").Value(); v != "eu-1" {
		t.Errorf("extracted baggage deployment = %q; want %q", v, "eu-1")
	}
}

func TestExtractWithoutHeadersHasNoSpan(t *testing.T) {
	got := Extract(context.Background(), propagation.TraceContext{}, kafka.Message{Value: []byte("{}")})
	if sc := trace.SpanContextFromContext(got); sc.IsValid() {
		t.Fatalf("Extract of a message without headers = %v; want no span context", sc)
	}
}
