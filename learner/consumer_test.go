package learner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"os"

	"github.com/segmentio/kafka-go"

	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// testDialogues builds n dialogues of a few players with 1..6 exchanges
// and a mix of end reasons.
func testDialogues(n int, seed uint64) []schema.Dialogue {
	rng := rand.New(rand.NewPCG(seed, 7))
	reasons := []schema.EndReason{schema.EndPlayerEnded, schema.EndIdleTimeout, schema.EndMaxTurns, schema.EndSafety}
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	out := make([]schema.Dialogue, n)
	for i := range out {
		d := schema.Dialogue{
			SessionID: fmt.Sprintf("s-%03d", i), PlayerID: fmt.Sprintf("p-%d", i%5), NPCID: "blacksmith",
			Deployment: "dev", PolicyVersion: "v1", Reason: reasons[rng.IntN(len(reasons))],
			Started: t0.Add(time.Duration(i) * time.Minute),
		}
		for k := range 1 + rng.IntN(6) {
			d.Exchanges = append(d.Exchanges, schema.Exchange{Turn: k + 1,
				User: fmt.Sprintf("user %d says %d", i, k), NPC: fmt.Sprintf("npc answers %d/%d", i, k)})
		}
		d.Ended = d.Started.Add(time.Duration(len(d.Exchanges)+1) * time.Second)
		out[i] = d
	}
	return out
}

// shuffledEvents returns the events of ds in a random order with about a
// fifth of them repeated (same event_id) later on.
func shuffledEvents(t *testing.T, ds []schema.Dialogue, seed uint64) []schema.SessionEvent {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 11))
	var events []schema.SessionEvent
	for _, d := range ds {
		es, err := simulator.DialogueEvents(d, rng)
		if err != nil {
			t.Fatalf("Events(%s): %v", d.SessionID, err)
		}
		events = append(events, es...)
	}
	rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
	for i := range len(events) / 5 {
		events = slices.Insert(events, rng.IntN(len(events)+1), events[i*3%len(events)])
	}
	return events
}

func produce(t *testing.T, k *testenv.Kafka, topic string, events []schema.SessionEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := &kafka.Writer{Addr: kafka.TCP(k.Addrs...), Topic: topic, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, AllowAutoTopicCreation: true, BatchTimeout: 5 * time.Millisecond}
	defer w.Close()
	msgs := make([]kafka.Message, len(events))
	for i, e := range events {
		raw, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		msgs[i] = kafka.Message{Key: []byte(e.SessionID), Value: raw}
	}
	msgs = append(msgs, kafka.Message{Key: []byte("junk"), Value: []byte("not json")})
	for {
		err := w.WriteMessages(ctx, msgs...)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("produce: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // the topic is created asynchronously
	}
}

func testConsumerConfig(k *testenv.Kafka, topic string) ConsumerConfig {
	cfg := DefaultConsumerConfig()
	cfg.Brokers, cfg.Topic, cfg.GroupID = k.Addrs, topic, k.Prefix+"learner"
	cfg.BatchSize, cfg.BatchWait = 16, 100*time.Millisecond
	cfg.SessionTimeout = 24 * time.Hour
	cfg.JournalCompactEvents = 20
	return cfg
}

// runUntil runs c until the store holds want dialogues (or 60 s pass) and
// returns Run's error.
func runUntil(t *testing.T, c *Consumer, s *Store, want int) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	for {
		select {
		case err := <-done:
			return err
		case <-time.After(50 * time.Millisecond):
			if s.Len() >= want {
				cancel()
				return <-done
			}
		}
	}
}

func checkStored(t *testing.T, s *Store, want []schema.Dialogue) {
	t.Helper()
	if got := s.Len(); got != len(want) {
		t.Errorf("store holds %d dialogues; want %d", got, len(want))
	}
	got := s.Range(0, s.Len())
	count := map[string]int{}
	for _, d := range got {
		count[d.SessionID]++
	}
	for _, w := range want {
		if count[w.SessionID] != 1 {
			t.Errorf("session %s stored %d times; want once", w.SessionID, count[w.SessionID])
			continue
		}
		var d schema.Dialogue
		for _, g := range got {
			if g.SessionID == w.SessionID {
				d = g
			}
		}
		if !slices.Equal(d.Exchanges, w.Exchanges) || d.Reason != w.Reason || d.PlayerID != w.PlayerID ||
			!d.Started.Equal(w.Started) || !d.Ended.Equal(w.Ended) {
			t.Errorf("session %s stored as %+v; want %+v", w.SessionID, d, w)
		}
	}
}

var errCrash = errors.New("simulated crash")

// TestConsumerCrashAndRestart kills a consumer after a batch is durable but
// before its offsets are committed, restarts it on the reopened store, and
// checks that every dialogue ends up stored exactly once although events
// came shuffled, duplicated and partly redelivered.
func TestConsumerCrashAndRestart(t *testing.T) {
	k := testenv.StartKafka(t)
	topic := k.Topic("sessions")
	want := testDialogues(40, 1)
	produce(t, k, topic, shuffledEvents(t, want, 2))
	dir := t.TempDir()

	s1, err := OpenStore(dir, 2048, nil) // small segments: several rotations
	if err != nil {
		t.Fatal(err)
	}
	c1, err := NewConsumer(testConsumerConfig(k, topic), s1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c1.beforeCommit = func(batch int) error {
		if batch == 6 {
			return errCrash
		}
		return nil
	}
	if err := runUntil(t, c1, s1, len(want)); !errors.Is(err, errCrash) {
		t.Fatalf("first consumer returned %v; want the simulated crash", err)
	}
	st1 := c1.Stats()
	if st1.Stored == 0 || st1.Stored >= len(want) {
		t.Fatalf("first consumer stored %d dialogues before the crash; want some but not all %d", st1.Stored, len(want))
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	s2, err := OpenStore(dir, 2048, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.Len() != st1.Stored {
		t.Fatalf("reopened store holds %d dialogues; the first consumer stored %d", s2.Len(), st1.Stored)
	}
	c2, err := NewConsumer(testConsumerConfig(k, topic), s2, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := runUntil(t, c2, s2, len(want)); err != nil {
		t.Fatalf("second consumer: %v", err)
	}
	checkStored(t, s2, want)
	st2 := c2.Stats()
	t.Logf("first run %+v; second run %+v", st1, st2)
	if st2.Duplicate+st2.Late == 0 {
		t.Errorf("second consumer absorbed no redelivered events; the uncommitted batch should have come again")
	}
	if st1.Invalid+st2.Invalid == 0 {
		t.Errorf("no invalid record counted; want the junk record skipped and counted")
	}
	if segs, _ := segmentIndexes(dir); len(segs) < 2 {
		t.Errorf("store has %d segments; want rotation into several", len(segs))
	}
}

// TestConsumerResumesOpenSessions stops a consumer cleanly while sessions
// are half delivered: the events it committed live on in the journal, so
// the dialogues that end after the restart are whole.
func TestConsumerResumesOpenSessions(t *testing.T) {
	k := testenv.StartKafka(t)
	topic := k.Topic("sessions")
	want := testDialogues(10, 3)
	var first, second []schema.SessionEvent
	rng := rand.New(rand.NewPCG(4, 4))
	for _, d := range want {
		es, err := simulator.DialogueEvents(d, rng)
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, es[:len(es)-1]...) // all but session_ended
		second = append(second, es[len(es)-1])
	}
	produce(t, k, topic, first)
	dir := t.TempDir()
	s1, err := OpenStore(dir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	c1, err := NewConsumer(testConsumerConfig(k, topic), s1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c1.Run(ctx) }()
	deadline := time.Now().Add(60 * time.Second)
	for c1.Stats().Committed < len(first)+1 && time.Now().Before(deadline) { // +1: the junk record
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s1.Len() != 0 {
		t.Fatalf("stored %d dialogues before any ended", s1.Len())
	}
	s1.Close()

	produce(t, k, topic, second)
	s2, err := OpenStore(dir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	c2, err := NewConsumer(testConsumerConfig(k, topic), s2, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := runUntil(t, c2, s2, len(want)); err != nil {
		t.Fatal(err)
	}
	checkStored(t, s2, want)
	if got := c2.Stats().Records; got != len(second)+1 {
		t.Errorf("second consumer fetched %d records; want only the %d new ones and 1 junk", got, len(second))
	}
}

func TestAssemblerExpiresAbandonedSessions(t *testing.T) {
	d := testDialogues(1, 5)[0]
	d.Reason = ""
	rng := rand.New(rand.NewPCG(1, 1))
	es, err := simulator.DialogueEvents(d, rng)
	if err != nil {
		t.Fatal(err)
	}
	a := newAssembler(func(string) bool { return false })
	now := d.Started
	for _, e := range es {
		if got, _ := a.apply(e, now); got != nil {
			t.Fatalf("apply completed a session without session_ended")
		}
	}
	if got := a.expire(now.Add(time.Minute), time.Hour, schema.EndError); len(got) != 0 {
		t.Fatalf("expired %d sessions after a minute; want none", len(got))
	}
	got := a.expire(now.Add(2*time.Hour), time.Hour, schema.EndError)
	if len(got) != 1 {
		t.Fatalf("expired %d sessions after two hours; want 1", len(got))
	}
	if got[0].Reason != schema.EndError || !slices.Equal(got[0].Exchanges, d.Exchanges) {
		t.Errorf("expired dialogue = %+v; want reason error and all %d exchanges", got[0], len(d.Exchanges))
	}
	if len(a.open) != 0 {
		t.Errorf("%d sessions still open after expiry", len(a.open))
	}
}

func TestStoreCutsTornRecord(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	ds := testDialogues(3, 9)
	if n, err := s.Append(append(ds, ds[0])); err != nil || n != 3 {
		t.Fatalf("Append = %d, %v; want 3, nil", n, err)
	}
	s.Close()
	path := s.segmentPath(1)
	if err := appendBytes(path, []byte(`0badc0de {"session_id":"torn`)); err != nil {
		t.Fatal(err)
	}
	s, err = OpenStore(dir, 0, nil)
	if err != nil {
		t.Fatalf("reopen after a torn write: %v", err)
	}
	if s.Len() != 3 || len(s.ByPlayer(ds[1].PlayerID)) != 1 {
		t.Errorf("reopened store: %d dialogues, %d of player %s; want 3 and 1", s.Len(), len(s.ByPlayer(ds[1].PlayerID)), ds[1].PlayerID)
	}
	if n, err := s.Append(testDialogues(4, 9)); err != nil || n != 1 {
		t.Errorf("Append after reopen = %d, %v; want only the 1 new session", n, err)
	}
	s.Close()
	s, err = OpenStore(dir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Len() != 4 {
		t.Errorf("store holds %d dialogues; want 4", s.Len())
	}
}

func appendBytes(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	return errors.Join(werr, f.Close())
}
