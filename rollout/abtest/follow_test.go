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

func TestFollowCheckpointsAndResumes(t *testing.T) {
	k := testenv.StartKafka(t)
	topic := k.Topic("sessions")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	ts := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	session := func(i int) []kafka.Message {
		base := schema.SessionEvent{Schema: schema.SessionEventSchema, SessionID: fmt.Sprintf("s%d", i),
			PlayerID: fmt.Sprintf("p%d", i), NPCID: "mira", Deployment: "npc", PolicyVersion: "v1",
			ExperimentID: "e1", Arm: []string{schema.ArmStable, schema.ArmCanary}[i%2], Salt: "5a17", Generation: 3, TS: ts}
		start, turn, end := base, base, base
		start.Type, start.EventID = schema.SessionStarted, fmt.Sprintf("00000000-0000-7000-8000-%012d", 3*i)
		turn.Type, turn.EventID, turn.Turn, turn.Safety = schema.TurnEvent, fmt.Sprintf("00000000-0000-7000-8000-%012d", 3*i+1), 1, schema.SafetyNone
		end.Type, end.EventID, end.Turns, end.Reason = schema.SessionEnded, fmt.Sprintf("00000000-0000-7000-8000-%012d", 3*i+2), 1, schema.EndPlayerEnded
		var msgs []kafka.Message
		for _, ev := range []schema.SessionEvent{start, turn, end, turn} { // the duplicate turn is absorbed
			b, _ := json.Marshal(ev)
			msgs = append(msgs, kafka.Message{Key: []byte(ev.SessionID), Value: b})
		}
		return msgs
	}
	w := &kafka.Writer{Addr: kafka.TCP(k.Addrs...), Topic: topic, Balancer: &kafka.Hash{}, AllowAutoTopicCreation: true}
	defer w.Close()
	write := func(msgs ...kafka.Message) {
		for w.WriteMessages(ctx, msgs...) != nil && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond) // topic creation is asynchronous
		}
	}
	var msgs []kafka.Message
	for i := range 4 {
		msgs = append(msgs, session(i)...)
	}
	write(append(msgs, kafka.Message{Key: []byte("junk"), Value: []byte("not json")})...)

	// follow runs Follow until the collector has n ended sessions, then
	// stops it; the checkpoint is kept in saved.
	cfg := FollowConfig{Brokers: k.Addrs, Topic: topic, GroupID: k.Prefix + "abtest", CheckpointEvery: 100 * time.Millisecond}
	var saved Snapshot
	follow := func(c *Collector, n int) {
		fctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- Follow(fctx, cfg, c, func() error { saved = c.Snapshot(); return nil }, slog.New(slog.DiscardHandler))
		}()
		for len(endedSessions(c)) < n {
			if ctx.Err() != nil {
				t.Fatalf("collector has %d ended sessions after 60s; want %d", len(endedSessions(c)), n)
			}
			time.Sleep(50 * time.Millisecond)
		}
		stop()
		if err := <-done; err != nil {
			t.Errorf("Follow after cancel = %v; want nil", err)
		}
	}
	follow(NewCollector(), 4)
	if len(saved.Sessions) != 4 {
		t.Fatalf("checkpoint on the way out holds %d sessions; want 4", len(saved.Sessions))
	}

	// A restart restores the checkpoint and resumes from the committed
	// offsets: the new session comes in, nothing is counted twice.
	write(session(4)...)
	c := NewCollector()
	c.Restore(saved)
	follow(c, 5)
	for _, s := range c.Sessions("e1") {
		if s.Turns != 1 || len(s.Exchanges) != 1 || s.Salt != "5a17" || s.Generation != 3 {
			t.Errorf("session %s: %d turns, %d exchanges, salt %q, generation %d; want 1, 1, 5a17, 3 (duplicates absorbed)",
				s.SessionID, s.Turns, len(s.Exchanges), s.Salt, s.Generation)
		}
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
