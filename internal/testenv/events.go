package testenv

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/parleyhq/parley/schema"
)

// ReadSessionEvents reads n session events from topic, from its first
// offset, and checks that each is valid and keyed by its session id.
func (k *Kafka) ReadSessionEvents(ctx context.Context, t testing.TB, topic string, n int) []schema.SessionEvent {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: k.Addrs, Topic: topic, GroupID: k.Prefix + "check",
		StartOffset: kafka.FirstOffset, MaxWait: 200 * time.Millisecond})
	defer r.Close()
	var out []schema.SessionEvent
	for len(out) < n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read event %d of %d: %v", len(out)+1, n, err)
		}
		var ev schema.SessionEvent
		if err := json.Unmarshal(m.Value, &ev); err != nil {
			t.Fatal(err)
		}
		if err := ev.Validate(); err != nil {
			t.Errorf("event on the topic: %v", err)
		}
		if string(m.Key) != ev.SessionID {
			t.Errorf("record key %q; want the session id %q", m.Key, ev.SessionID)
		}
		out = append(out, ev)
	}
	return out
}
