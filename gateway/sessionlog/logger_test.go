package sessionlog

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/parleyhq/parley/internal/otelkafka"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

func TestConfigValidate(t *testing.T) {
	valid := testConfig([]string{"127.0.0.1:9"}, "topic", "/tmp/spool")
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"valid", func(*Config) {}, ""},
		{"no brokers", func(c *Config) { c.Brokers = nil }, "broker is required"},
		{"bad broker", func(c *Config) { c.Brokers = []string{"kafka"} }, "not host:port"},
		{"no topic", func(c *Config) { c.Topic = "" }, "topic is required"},
		{"no spool dir", func(c *Config) { c.SpoolDir = "" }, "spool dir is required"},
		{"zero max bytes", func(c *Config) { c.SpoolMaxBytes = 0 }, "spool max bytes"},
		{"segment above max", func(c *Config) { c.SegmentBytes = c.SpoolMaxBytes + 1 }, "segment bytes"},
		{"no batch events", func(c *Config) { c.BatchMaxEvents = 0 }, "batch max events"},
		{"no batch bytes", func(c *Config) { c.BatchMaxBytes = 0 }, "batch max bytes"},
		{"no write timeout", func(c *Config) { c.WriteTimeout = 0 }, "write timeout"},
		{"backoff reversed", func(c *Config) { c.RetryBackoffMax = c.RetryBackoffMin / 2 }, "retry backoff"},
		{"negative close timeout", func(c *Config) { c.CloseTimeout = -time.Second }, "close timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.mutate(&c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v; want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate() = %v; want an error containing %q", err, tt.wantErr)
			}
		})
	}
	if got := DefaultConfig().Topic; got != schema.SessionsTopic {
		t.Errorf("DefaultConfig().Topic = %q; want %q", got, schema.SessionsTopic)
	}
}

func TestPublishDeliversWithKeyAndTraceContext(t *testing.T) {
	k := testenv.StartKafka(t)
	topic := k.Topic("sessions")
	h := newHarness(t, testConfig(k.Addrs, topic, t.TempDir()))
	h.run(t)

	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:  trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	evs := makeEvents(t, k.Prefix, 4, 3)
	publishAll(t, ctx, h.Logger, evs)
	h.waitDrained(t)

	got := readTopic(t, k.Addrs, topic)
	checkDelivered(t, got, evs)
	for _, m := range got {
		if tp := otelkafka.NewMessageCarrier(&m).Get("traceparent"); tp == "" {
			t.Fatalf("record %d/%d has no traceparent header; headers %v", m.Partition, m.Offset, m.Headers)
		}
		gotSC := trace.SpanContextFromContext(otelkafka.Extract(context.Background(), propagation.TraceContext{}, m))
		if gotSC.TraceID() != sc.TraceID() {
			t.Fatalf("record %d/%d trace id = %s; want %s", m.Partition, m.Offset, gotSC.TraceID(), sc.TraceID())
		}
	}
	for name, want := range map[string]int64{
		"parley.sessionlog.events.published": int64(len(evs)),
		"parley.sessionlog.events.delivered": int64(len(evs)),
		"parley.sessionlog.delivery.latency": int64(len(evs)),
		"parley.sessionlog.spool.events":     0,
		"parley.sessionlog.spool.full":       0,
	} {
		if got := h.metric(t, name); got != want {
			t.Errorf("metric %s = %d; want %d", name, got, want)
		}
	}
}

func TestPublishRejects(t *testing.T) {
	cfg := testConfig([]string{"127.0.0.1:9"}, "topic", t.TempDir())
	h := newHarness(t, cfg)
	evs := makeEvents(t, "p", 1, 1)

	bad := evs[0]
	bad.SessionID = ""
	if err := h.Publish(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "session_id is required") {
		t.Errorf("Publish(event without session id) = %v; want a validation error", err)
	}
	huge := evs[1]
	huge.UserText = strings.Repeat("a", maxRecordBytes)
	if err := h.Publish(context.Background(), huge); !errors.Is(err, ErrEventTooLarge) {
		t.Errorf("Publish(%d-byte event) = %v; want ErrEventTooLarge", len(huge.UserText), err)
	}
	if events, _ := h.Backlog(); events != 0 {
		t.Errorf("Backlog() = %d events after rejected publishes; want 0", events)
	}
	cfg.CloseTimeout = 0
	if err := h.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := h.Publish(context.Background(), evs[2]); !errors.Is(err, ErrClosed) {
		t.Errorf("Publish after Close = %v; want ErrClosed", err)
	}
	if err := h.Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close = %v; want ErrClosed", err)
	}
}

// TestBrokerDownSpoolsThenDelivers is the acceptance test: broker
// down → events spooled → broker up → every event delivered exactly once by
// event_id, in each session's order.
func TestBrokerDownSpoolsThenDelivers(t *testing.T) {
	k := testenv.StartKafka(t)
	topic := k.Topic("sessions")
	h := newHarness(t, testConfig(k.Addrs, topic, t.TempDir()))
	h.run(t)
	ctx := context.Background()

	before := makeEvents(t, k.Prefix+"a", 3, 2)
	publishAll(t, ctx, h.Logger, before)
	h.waitDrained(t)

	k.Stop()
	during := makeEvents(t, k.Prefix+"b", 5, 4)
	publishAll(t, ctx, h.Logger, during)
	if events, _ := h.Backlog(); events != len(during) {
		t.Fatalf("Backlog() with the broker down = %d events; want %d", events, len(during))
	}
	// Wait until the logger has tried and failed, so the test covers a
	// failed write being kept and retried, not just a late first write.
	deadline := time.Now().Add(30 * time.Second)
	for h.metric(t, "parley.sessionlog.send.errors") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no failed write recorded within 30s of stopping the broker")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if events, _ := h.Backlog(); events != len(during) {
		t.Fatalf("Backlog() after failed writes = %d events; want %d", events, len(during))
	}

	restarted := time.Now()
	k.Start()
	h.waitDrained(t)
	all := append(append([]schema.SessionEvent(nil), before...), during...)
	got := readTopic(t, k.Addrs, topic)
	checkDelivered(t, got, all)
	for _, m := range got {
		if !m.Time.Before(restarted) {
			t.Errorf("record %d/%d timestamp %s is not before the broker came back at %s; want the publish time",
				m.Partition, m.Offset, m.Time, restarted)
		}
	}
	if !strings.Contains(h.logs.String(), "kafka writes succeed again") {
		t.Errorf("logs do not report the recovery:\n%s", h.logs)
	}
}

// TestRestartDeliversBacklog closes a Logger with undelivered events and
// checks that a new Logger on the same spool delivers them, and only them.
func TestRestartDeliversBacklog(t *testing.T) {
	k := testenv.StartKafka(t)
	topic, dir := k.Topic("sessions"), t.TempDir()
	cfg := testConfig(k.Addrs, topic, dir)
	cfg.CloseTimeout = 300 * time.Millisecond
	ctx := context.Background()

	first := newHarness(t, cfg)
	stop := first.run(t)
	delivered := makeEvents(t, k.Prefix+"a", 2, 3)
	publishAll(t, ctx, first.Logger, delivered)
	first.waitDrained(t)
	stop()

	k.Stop()
	left := makeEvents(t, k.Prefix+"b", 3, 3)
	publishAll(t, ctx, first.Logger, left)
	if _, err := New(cfg, nil, nil, nil); err == nil {
		t.Fatal("New on a spool dir in use succeeded; want an error")
	}
	if err := first.Close(); err != nil {
		t.Fatalf("Close with the broker down: %v", err)
	}
	if !strings.Contains(first.logs.String(), "undelivered events") {
		t.Errorf("Close did not log the undelivered backlog:\n%s", first.logs)
	}

	k.Start()
	second := newHarness(t, cfg)
	if events, _ := second.Backlog(); events != len(left) {
		t.Fatalf("Backlog() of the new Logger = %d events; want %d", events, len(left))
	}
	second.run(t)
	second.waitDrained(t)
	all := append(append([]schema.SessionEvent(nil), delivered...), left...)
	checkDelivered(t, readTopic(t, k.Addrs, topic), all)
}

// TestSpoolFull fills a small spool while nothing drains it and checks that
// Publish refuses with ErrSpoolFull, counts it, keeps what it accepted, and
// accepts again once the backlog is delivered.
func TestSpoolFull(t *testing.T) {
	k := testenv.StartKafka(t)
	topic := k.Topic("sessions")
	cfg := testConfig(k.Addrs, topic, t.TempDir())
	cfg.SpoolMaxBytes, cfg.SegmentBytes = 8<<10, 2<<10
	h := newHarness(t, cfg)
	ctx := context.Background()

	evs := makeEvents(t, k.Prefix, 4, 50)
	var accepted []schema.SessionEvent
	refused := 0
	for _, ev := range evs {
		err := h.Publish(ctx, ev)
		switch {
		case err == nil && refused == 0:
			accepted = append(accepted, ev)
		case errors.Is(err, ErrSpoolFull):
			refused++
		default:
			t.Fatalf("Publish #%d = %v after %d refusals; want nil before the spool fills and ErrSpoolFull after", len(accepted)+refused, err, refused)
		}
	}
	if refused == 0 || len(accepted) == 0 {
		t.Fatalf("accepted %d and refused %d of %d events; want both", len(accepted), refused, len(evs))
	}
	if got := h.metric(t, "parley.sessionlog.spool.full"); got != int64(refused) {
		t.Errorf("metric spool.full = %d; want %d", got, refused)
	}
	events, bytes := h.Backlog()
	if events != len(accepted) || bytes > cfg.SpoolMaxBytes {
		t.Errorf("Backlog() = %d events, %d bytes; want %d events within %d bytes", events, bytes, len(accepted), cfg.SpoolMaxBytes)
	}
	if got := h.metric(t, "parley.sessionlog.spool.bytes"); got != bytes {
		t.Errorf("metric spool.bytes = %d; want %d", got, bytes)
	}

	h.run(t)
	h.waitDrained(t)
	checkDelivered(t, readTopic(t, k.Addrs, topic), accepted)
	if err := h.Publish(ctx, evs[len(evs)-1]); err != nil {
		t.Errorf("Publish after the spool drained = %v; want nil", err)
	}
}

// TestSegmentsRotateAndAreDeleted checks that a long backlog spans many
// segments and that delivered segments are removed from disk.
func TestSegmentsRotateAndAreDeleted(t *testing.T) {
	k := testenv.StartKafka(t)
	topic, dir := k.Topic("sessions"), t.TempDir()
	cfg := testConfig(k.Addrs, topic, dir)
	cfg.SegmentBytes, cfg.BatchMaxEvents = 4<<10, 7
	h := newHarness(t, cfg)
	evs := makeEvents(t, k.Prefix, 5, 20)
	publishAll(t, context.Background(), h.Logger, evs)
	if n := len(segmentFiles(t, dir)); n < 5 {
		t.Fatalf("%d segment files for %d events of 4 KiB segments; want at least 5", n, len(evs))
	}
	h.run(t)
	h.waitDrained(t)
	checkDelivered(t, readTopic(t, k.Addrs, topic), evs)
	if files := segmentFiles(t, dir); len(files) != 1 {
		t.Errorf("segment files after draining = %v; want only the active one", files)
	}
}

func TestWriterSettingsKeepOrder(t *testing.T) {
	h := newHarness(t, testConfig([]string{"127.0.0.1:9"}, "topic", t.TempDir()))
	w := h.writer
	if _, ok := w.Balancer.(*kafka.Hash); !ok || w.RequiredAcks != kafka.RequireAll || w.MaxAttempts != 1 {
		t.Errorf("writer balancer %T, acks %v, attempts %d; want *kafka.Hash, RequireAll, 1", w.Balancer, w.RequiredAcks, w.MaxAttempts)
	}
	if w.BatchSize < h.cfg.BatchMaxEvents || w.BatchBytes < h.cfg.BatchMaxBytes+maxRecordBytes {
		t.Errorf("writer batch %d events / %d bytes; want room for a whole drain batch (%d events, %d bytes plus one record)",
			w.BatchSize, w.BatchBytes, h.cfg.BatchMaxEvents, h.cfg.BatchMaxBytes)
	}
}
