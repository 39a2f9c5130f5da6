package abtest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

func TestFollowFeedsTheCollectorFromKafka(t *testing.T) {
	k := testenv.StartKafka(t)
	topic := k.Topic("sessions")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	ts := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var msgs []kafka.Message
	for i := range 4 {
		base := schema.SessionEvent{Schema: schema.SessionEventSchema, SessionID: fmt.Sprintf("s%d", i),
			PlayerID: fmt.Sprintf("p%d", i), NPCID: "mira", Deployment: "npc", PolicyVersion: "v1",
			ExperimentID: "e1", Arm: []string{schema.ArmStable, schema.ArmCanary}[i%2], TS: ts}
		start, turn, end := base, base, base
		start.Type, start.EventID = schema.SessionStarted, fmt.Sprintf("00000000-0000-7000-8000-%012d", 3*i)
		turn.Type, turn.EventID, turn.Turn, turn.Safety = schema.TurnEvent, fmt.Sprintf("00000000-0000-7000-8000-%012d", 3*i+1), 1, schema.SafetyNone
		end.Type, end.EventID, end.Turns, end.Reason = schema.SessionEnded, fmt.Sprintf("00000000-0000-7000-8000-%012d", 3*i+2), 1, schema.EndPlayerEnded
		for _, ev := range []schema.SessionEvent{start, turn, end, turn} { // the duplicate turn is absorbed
			b, _ := json.Marshal(ev)
			msgs = append(msgs, kafka.Message{Key: []byte(ev.SessionID), Value: b})
		}
	}
	msgs = append(msgs, kafka.Message{Key: []byte("junk"), Value: []byte("not json")})
	w := &kafka.Writer{Addr: kafka.TCP(k.Addrs...), Topic: topic, Balancer: &kafka.Hash{}, AllowAutoTopicCreation: true}
	for w.WriteMessages(ctx, msgs...) != nil && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond) // topic creation is asynchronous
	}
	w.Close()

	c := NewCollector()
	done := make(chan error, 1)
	go func() {
		done <- Follow(ctx, FollowConfig{Brokers: k.Addrs, Topic: topic}, c, slog.New(slog.DiscardHandler))
	}()
	for len(endedSessions(c)) < 4 {
		if ctx.Err() != nil {
			t.Fatalf("collector has %d ended sessions after 60s; want 4", len(endedSessions(c)))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, s := range c.Sessions("e1") {
		if s.Turns != 1 {
			t.Errorf("session %s has %d turns; want 1 (duplicates absorbed)", s.SessionID, s.Turns)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Follow after cancel = %v; want nil", err)
	}
}

func endedSessions(c *Collector) []Session {
	var out []Session
	for _, s := range c.Sessions("e1") {
		if !s.Ended.IsZero() {
			out = append(out, s)
		}
	}
	return out
}
