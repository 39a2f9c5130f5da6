package sessionlog

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

// harness is one Logger under test with its metrics and logs.
type harness struct {
	*Logger
	metrics *sdkmetric.ManualReader
	logs    *testenv.LogBuffer
}

func testConfig(brokers []string, topic, dir string) Config {
	cfg := DefaultConfig()
	cfg.Brokers = brokers
	cfg.Topic = topic
	cfg.SpoolDir = dir
	cfg.WriteTimeout = 5 * time.Second
	cfg.RetryBackoffMin = 20 * time.Millisecond
	cfg.RetryBackoffMax = 200 * time.Millisecond
	cfg.CloseTimeout = 2 * time.Second
	return cfg
}

// newHarness opens a Logger; it is closed when the test ends unless the test
// closes it first.
func newHarness(t testing.TB, cfg Config) *harness {
	t.Helper()
	h := &harness{metrics: sdkmetric.NewManualReader(), logs: &testenv.LogBuffer{}}
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.metrics)).Meter("sessionlog-test")
	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l, err := New(cfg, log, meter, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.Logger = l
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if t.Failed() {
			t.Logf("logger output:\n%s", h.logs)
		}
	})
	return h
}

// run starts Run and returns a function that stops it and checks its result.
func (h *harness) run(t testing.TB) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v; want nil", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitDrained waits until Kafka acknowledged every spooled event.
func (h *harness) waitDrained(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		events, bytes := h.Backlog()
		if events == 0 && bytes == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backlog still %d events (%d bytes) after 30s", events, bytes)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metric returns the sum of the int64 counter or the value of the int64
// gauge called name, and for a histogram its count.
func (h *harness) metric(t testing.TB, name string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			var v int64
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					v += dp.Value
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					v += dp.Value
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					v += int64(dp.Count)
				}
			default:
				t.Fatalf("metric %s has data %T", name, m.Data)
			}
			return v
		}
	}
	return 0
}

// makeEvents returns, for each of n sessions, session_started, turns 1..turns
// and session_ended, interleaved across sessions as a busy gateway would
// publish them.
func makeEvents(t testing.TB, prefix string, sessions, turns int) []schema.SessionEvent {
	t.Helper()
	base := func(session int, typ schema.EventType) schema.SessionEvent {
		id, err := uuid.NewV7()
		if err != nil {
			t.Fatal(err)
		}
		return schema.SessionEvent{
			Schema: schema.SessionEventSchema, EventID: id.String(), Type: typ,
			SessionID: fmt.Sprintf("%s-session-%d", prefix, session), PlayerID: fmt.Sprintf("player-%d", session),
			NPCID: "innkeeper", Deployment: "test", PolicyVersion: "v1", TS: time.Now().UTC(),
		}
	}
	var evs []schema.SessionEvent
	for step := 0; step <= turns+1; step++ {
		for s := range sessions {
			switch {
			case step == 0:
				ev := base(s, schema.SessionStarted)
				ev.Client = &schema.ClientMeta{GameBuild: "1.0", Locale: "en"}
				evs = append(evs, ev)
			case step <= turns:
				ev := base(s, schema.TurnEvent)
				ev.Turn, ev.Safety = step, schema.SafetyNone
				ev.UserText, ev.NPCText = fmt.Sprintf("hello %d", step), "well met, traveller"
				evs = append(evs, ev)
			default:
				ev := base(s, schema.SessionEnded)
				ev.Turns, ev.Reason = turns, schema.EndPlayerEnded
				evs = append(evs, ev)
			}
		}
	}
	return evs
}

func publishAll(t testing.TB, ctx context.Context, l *Logger, evs []schema.SessionEvent) {
	t.Helper()
	for _, ev := range evs {
		if err := l.Publish(ctx, ev); err != nil {
			t.Fatalf("Publish(%s %s) = %v; want nil", ev.Type, ev.EventID, err)
		}
	}
}

// readTopic returns every record in topic, partition by partition in offset
// order, reading each partition up to its high watermark.
func readTopic(t testing.TB, brokers []string, topic string) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := kafka.DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		t.Fatalf("dial %s: %v", brokers[0], err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		t.Fatalf("read partitions of %s: %v", topic, err)
	}
	var out []kafka.Message
	for _, p := range parts {
		lc, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, p.ID)
		if err != nil {
			t.Fatalf("dial leader of %s/%d: %v", topic, p.ID, err)
		}
		first, err1 := lc.ReadFirstOffset()
		last, err2 := lc.ReadLastOffset()
		lc.Close()
		if err1 != nil || err2 != nil {
			t.Fatalf("offsets of %s/%d: %v, %v", topic, p.ID, err1, err2)
		}
		if first == last {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p.ID, MaxWait: 100 * time.Millisecond})
		if err := r.SetOffset(first); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("read %s/%d after %d records: %v", topic, p.ID, len(out), err)
			}
			out = append(out, m)
			if m.Offset >= last-1 {
				break
			}
		}
		r.Close()
	}
	return out
}

// checkDelivered checks that the topic holds each of want exactly once, keyed
// by session id, with every session's events in the order published.
func checkDelivered(t testing.TB, got []kafka.Message, want []schema.SessionEvent) {
	t.Helper()
	checkDeliveredSome(t, got, want, nil)
}

// checkDeliveredSome is checkDelivered where want[i] for which optional(i)
// holds may also be missing (it was being published when a process died).
func checkDeliveredSome(t testing.TB, got []kafka.Message, want []schema.SessionEvent, optional func(i int) bool) {
	t.Helper()
	index := make(map[string]int, len(want))
	for i, ev := range want {
		index[ev.EventID] = i
	}
	seen := make(map[string]int)
	lastIndex := make(map[string]int) // session id → index in want of its latest record
	for _, m := range got {
		var ev schema.SessionEvent
		if err := json.Unmarshal(m.Value, &ev); err != nil {
			t.Fatalf("record at %d/%d is not a session event: %v", m.Partition, m.Offset, err)
		}
		i, ok := index[ev.EventID]
		if !ok {
			t.Errorf("record %s at %d/%d was never published", ev.EventID, m.Partition, m.Offset)
			continue
		}
		seen[ev.EventID]++
		if string(m.Key) != ev.SessionID {
			t.Errorf("record %s key = %q; want session id %q", ev.EventID, m.Key, ev.SessionID)
		}
		if last, ok := lastIndex[ev.SessionID]; ok && i < last {
			t.Errorf("session %s: event %d (%s) arrived after event %d; want publish order", ev.SessionID, i, ev.Type, last)
		}
		lastIndex[ev.SessionID] = i
	}
	for i, ev := range want {
		n := seen[ev.EventID]
		if n == 1 || n == 0 && optional != nil && optional(i) {
			continue
		}
		t.Errorf("event %s (%s turn %d of %s) delivered %d times; want exactly once", ev.EventID, ev.Type, ev.Turn, ev.SessionID, n)
	}
}
