package simulator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/parleyhq/parley/schema"
)

func smallCorpusConfig() CorpusConfig {
	cfg := DefaultCorpusConfig()
	cfg.Players, cfg.DialoguesPerPlayer, cfg.Seed, cfg.MaxTurns = 30, 4, 7, 12
	cfg.Population.AdversarialRate = 0.3
	return cfg
}

func TestGenerateCorpusRoundTrip(t *testing.T) {
	cfg := smallCorpusConfig()
	var buf bytes.Buffer
	stats, err := GenerateCorpus(context.Background(), cfg, &buf)
	if err != nil {
		t.Fatalf("GenerateCorpus: %v", err)
	}
	if want := (cfg.Players - stats.HeldOut) * cfg.DialoguesPerPlayer; stats.Dialogues != want || stats.Players != cfg.Players-stats.HeldOut {
		t.Fatalf("stats: %d players, %d dialogues, %d held out; want %d dialogues", stats.Players, stats.Dialogues, stats.HeldOut, want)
	}
	if stats.HeldOut == 0 {
		t.Error("no held-out persona among 30 at rate 0.2")
	}

	// Every line is one valid event; sessions are contiguous.
	uuid7 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	sc := bufio.NewScanner(bytes.NewReader(buf.Bytes()))
	done := make(map[string]bool)
	current, lines := "", 0
	for sc.Scan() {
		lines++
		var e schema.SessionEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %d: %v", lines, err)
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("line %d: %v", lines, err)
		}
		if !uuid7.MatchString(e.EventID) {
			t.Fatalf("line %d: event id %q is not a UUIDv7", lines, e.EventID)
		}
		if e.SessionID != current {
			if done[e.SessionID] {
				t.Fatalf("line %d: session %s is not contiguous", lines, e.SessionID)
			}
			done[current] = true
			current = e.SessionID
		}
	}
	if lines != stats.Events {
		t.Errorf("wrote %d lines; stats say %d events", lines, stats.Events)
	}

	ds, err := ReadCorpus(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("ReadCorpus: %v", err)
	}
	if len(ds) != stats.Dialogues {
		t.Fatalf("ReadCorpus got %d dialogues; want %d", len(ds), stats.Dialogues)
	}
	reasons := make(map[schema.EndReason]int)
	exchanges := 0
	for _, d := range ds {
		reasons[d.Reason]++
		exchanges += len(d.Exchanges)
		if len(d.Exchanges) == 0 || len(d.Exchanges) > cfg.MaxTurns {
			t.Errorf("session %s has %d exchanges; want 1..%d", d.SessionID, len(d.Exchanges), cfg.MaxTurns)
		}
		if d.Reason == schema.EndMaxTurns && len(d.Exchanges) != cfg.MaxTurns {
			t.Errorf("session %s ended max_turns after %d exchanges", d.SessionID, len(d.Exchanges))
		}
	}
	if !reflect.DeepEqual(reasons, stats.Reasons) || exchanges != stats.Exchanges {
		t.Errorf("read back reasons %v, %d exchanges; generator said %v, %d", reasons, exchanges, stats.Reasons, stats.Exchanges)
	}
	if stats.SafetyCrisis == 0 || stats.SafetyRefused == 0 {
		t.Errorf("%d crisis and %d refused exchanges; want some of each with 30%% adversarial players", stats.SafetyCrisis, stats.SafetyRefused)
	}
	for _, r := range []schema.EndReason{schema.EndPlayerEnded, schema.EndIdleTimeout, schema.EndMaxTurns, schema.EndSafety} {
		if reasons[r] == 0 {
			t.Errorf("no session ended with %s: %v", r, reasons)
		}
	}

	// Writing the dialogues again gives the same dialogues.
	var again bytes.Buffer
	rng := rand.New(rand.NewPCG(1, 1))
	enc := json.NewEncoder(&again)
	for _, d := range ds {
		evs, err := DialogueEvents(d, rng)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if err := enc.Encode(e); err != nil {
				t.Fatal(err)
			}
		}
	}
	ds2, err := ReadCorpus(&again)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normalizeTimes(ds), normalizeTimes(ds2)) {
		t.Error("dialogues → events → dialogues changed the dialogues")
	}
}

func normalizeTimes(ds []schema.Dialogue) []schema.Dialogue {
	out := make([]schema.Dialogue, len(ds))
	for i, d := range ds {
		d.Started, d.Ended = d.Started.UTC(), d.Ended.UTC()
		out[i] = d
	}
	return out
}

func TestGenerateCorpusDeterministic(t *testing.T) {
	cfg := smallCorpusConfig()
	cfg.Players = 10
	var a, b, c bytes.Buffer
	if _, err := GenerateCorpus(context.Background(), cfg, &a); err != nil {
		t.Fatal(err)
	}
	if _, err := GenerateCorpus(context.Background(), cfg, &b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("the same config gave different corpora")
	}
	cfg.Seed++
	if _, err := GenerateCorpus(context.Background(), cfg, &c); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.Bytes(), c.Bytes()) {
		t.Error("seeds 7 and 8 gave the same corpus")
	}
}

func TestGenerateCorpusCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var buf bytes.Buffer
	if _, err := GenerateCorpus(ctx, smallCorpusConfig(), &buf); err == nil {
		t.Error("GenerateCorpus with a cancelled context = nil error; want context.Canceled")
	}
}

func TestCorpusConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*CorpusConfig)
	}{
		{"no players", func(c *CorpusConfig) { c.Players = 0 }},
		{"no turns", func(c *CorpusConfig) { c.MaxTurns = 0 }},
		{"zero weights", func(c *CorpusConfig) { c.Qualities = []QualityWeight{{NPCGood, 0}} }},
		{"unknown quality", func(c *CorpusConfig) { c.Qualities = []QualityWeight{{"chatty", 1}} }},
		{"no npc ids", func(c *CorpusConfig) { c.NPCIDs = nil }},
		{"zero turn gap", func(c *CorpusConfig) { c.TurnGap = 0 }},
	}
	if err := DefaultCorpusConfig().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultCorpusConfig()
			tt.change(&cfg)
			if err := cfg.Validate(); err == nil {
				t.Error("Validate() = nil; want an error")
			}
		})
	}
}

func TestDialogueEvents(t *testing.T) {
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	d := schema.Dialogue{
		SessionID: "s1", PlayerID: "p1", NPCID: "aria", Deployment: "default", PolicyVersion: "v3",
		ExperimentID: "exp", Arm: schema.ArmCanary, Reason: schema.EndIdleTimeout,
		Exchanges: []schema.Exchange{{Turn: 1, User: "hi", NPC: "hello"}, {Turn: 2, User: "bye", NPC: "farewell", Safety: schema.SafetyRefused}},
		Started:   start, Ended: start.Add(30 * time.Second),
	}
	evs, err := DialogueEvents(d, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	wantTypes := []schema.EventType{schema.SessionStarted, schema.TurnEvent, schema.TurnEvent, schema.SessionEnded}
	for i, e := range evs {
		if e.Type != wantTypes[i] {
			t.Errorf("event %d type %s; want %s", i, e.Type, wantTypes[i])
		}
		if i > 0 && !e.TS.After(evs[i-1].TS) {
			t.Errorf("event %d at %v is not after event %d at %v", i, e.TS, i-1, evs[i-1].TS)
		}
	}
	if e := evs[3]; e.Turns != 2 || e.Reason != schema.EndIdleTimeout || !e.TS.Equal(d.Ended) {
		t.Errorf("session_ended = %+v; want 2 turns, idle_timeout at %v", e, d.Ended)
	}
	// At-least-once delivery: duplicates count once.
	got, err := schema.DialoguesFromEvents(append(evs, evs[1], evs[3]))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0], d) {
		t.Errorf("DialoguesFromEvents = %+v; want %+v", got, d)
	}
	// The same turn under a different event id: the later event wins.
	retry := evs[1]
	retry.EventID = NewEventID(rand.New(rand.NewPCG(9, 9)), retry.TS)
	retry.NPCText, retry.TS = "hello again", retry.TS.Add(time.Millisecond)
	got, err = schema.DialoguesFromEvents(append(evs, retry))
	if err != nil {
		t.Fatalf("a turn repeated under a new event id: %v; want the later one kept", err)
	}
	if len(got) != 1 || got[0].Exchanges[0].NPC != retry.NPCText {
		t.Errorf("DialoguesFromEvents with a retried turn = %+v; want turn 1 NPC %q", got, retry.NPCText)
	}
	// A missing turn is an error, not a silent gap.
	if _, err := schema.DialoguesFromEvents([]schema.SessionEvent{evs[0], evs[2], evs[3]}); err == nil {
		t.Error("turn 2 without turn 1 = nil error; want an error")
	}
}

// BenchmarkGenerateCorpus reports the speed of the bootstrap corpus
// generator in dialogues per second.
func BenchmarkGenerateCorpus(b *testing.B) {
	cfg := DefaultCorpusConfig()
	cfg.Players, cfg.DialoguesPerPlayer = 100, 5
	var dialogues int
	for b.Loop() {
		var buf bytes.Buffer
		stats, err := GenerateCorpus(context.Background(), cfg, &buf)
		if err != nil {
			b.Fatal(err)
		}
		dialogues += stats.Dialogues
		b.SetBytes(int64(buf.Len()))
	}
	b.ReportMetric(float64(dialogues)/b.Elapsed().Seconds(), "dialogues/s")
}
