package schema

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the JSON Schema files in schema/jsonschema")

func TestJSONSchemaFilesAreFresh(t *testing.T) {
	docs, err := JSONSchemas()
	if err != nil {
		t.Fatal(err)
	}
	dir := "jsonschema"
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range docs {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, want := range docs {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%v; run `make schemas` to generate", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("schema/jsonschema/%s is stale; run `make schemas`", name)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) != len(docs) {
		t.Errorf("schema/jsonschema has %d files; want %d (remove files of deleted types)", len(files), len(docs))
	}
}

var ts = time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)

func validEvent(typ EventType) SessionEvent {
	e := SessionEvent{
		Schema: SessionEventSchema, EventID: "01938a6b-7c2d-7def-8abc-0123456789ab", Type: typ,
		SessionID: "s1", PlayerID: "p1", NPCID: "aria", Deployment: "default",
		PolicyVersion: "v1", ExperimentID: "exp1", Arm: ArmStable, TS: ts,
	}
	switch typ {
	case SessionStarted:
		e.Client = &ClientMeta{GameBuild: "1.2.3", Locale: "en-US"}
	case TurnEvent:
		e.Turn, e.UserText, e.NPCText, e.Safety = 1, "hi", "hello, traveller", SafetyNone
		e.LatencyMS, e.TokensIn, e.TokensOut = 12, 30, 5
	case SessionEnded:
		e.Turns, e.Reason = 3, EndPlayerEnded
	}
	return e
}

func i64(v int64) *int64     { return &v }
func f64(v float64) *float64 { return &v }

// validator is what every wire type implements.
type validator interface{ Validate() error }

func TestValidValuesRoundTrip(t *testing.T) {
	cases := map[string]validator{
		"session_started": validEvent(SessionStarted),
		"turn":            validEvent(TurnEvent),
		"session_ended":   validEvent(SessionEnded),
		"create session":  CreateSessionRequest{PlayerID: "player-7", NPCID: "aria", Client: &ClientMeta{Locale: "zh-CN"}},
		"created":         CreateSessionResponse{SessionID: "s1", Greeting: "Hi!", PolicyVersion: "v1", Arm: ArmCanary},
		"message":         MessageRequest{Text: "你好, want to go fishing? 🎣"},
		"reply":           MessageResponse{Reply: "Sure!", Turn: 2, Safety: SafetyNone},
		"view": SessionView{SessionID: "s1", PlayerID: "p", NPCID: "aria", PolicyVersion: "v1", Turns: 2,
			Transcript: []Exchange{{Turn: 1, User: "a", NPC: "b"}, {Turn: 2, User: "c", NPC: "d"}}},
		"error": ErrorBody{Error: ErrorDetail{Code: "rate_limited", Message: "slow down"}},
		"chat request": ChatCompletionRequest{Model: "npc", Messages: []ChatMessage{{Role: "system", Content: "be kind"}, {Role: "user", Content: "hi"}},
			Temperature: f64(0.7), TopP: f64(0.9), Stream: true},
		"chat response": ChatCompletionResponse{ID: "c1", Object: "chat.completion", Created: 1, Model: "v1",
			Choices: []ChatChoice{{Message: ChatMessage{Role: "assistant", Content: "hey"}, FinishReason: "stop"}}, Usage: ChatUsage{1, 2, 3}},
		"chat chunk": ChatCompletionChunk{ID: "c1", Object: "chat.completion.chunk", Created: 1, Model: "v1",
			Choices: []ChatChunkChoice{{Delta: ChatDelta{Content: "he"}}}},
		"manifest": Manifest{Model: "npc", Version: "v1", Algorithm: "sft", Hyperparameters: map[string]any{"lr": 2e-5},
			DataWindow: &DataWindow{From: ts, To: ts, Sessions: 10}, Metrics: map[string]float64{"ppl": 12.5},
			Files: map[string]string{"config.json": strings.Repeat("ab", 32)}, CreatedAt: ts},
		"steady": RolloutState{Deployment: "default", Stable: "v1", State: PhaseSteady, Generation: 4, UpdatedBy: "ops", UpdatedAt: ts},
		"canary": RolloutState{Deployment: "default", Stable: "v1", Canary: "v2", CanaryWeight: 50, ExperimentID: "e1",
			State: PhaseCanary, Generation: 5, UpdatedBy: "ops", UpdatedAt: ts},
		"canary request": CanaryRequest{Version: "v2", Weight: 10, Generation: i64(4)},
		"change": RolloutChange{Action: "canary", By: "ops", At: ts,
			From: RolloutState{Deployment: "d", Stable: "v1", State: PhaseSteady, Generation: 1},
			To:   RolloutState{Deployment: "d", Stable: "v1", Canary: "v2", CanaryWeight: 5, State: PhaseCanary, Generation: 2}},
	}
	for name, v := range cases {
		t.Run(name, func(t *testing.T) {
			if err := v.Validate(); err != nil {
				t.Fatalf("Validate() = %v; want nil", err)
			}
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			back := reflect.New(reflect.TypeOf(v))
			if err := json.Unmarshal(b, back.Interface()); err != nil {
				t.Fatal(err)
			}
			if got := back.Elem().Interface(); !reflect.DeepEqual(got, v) {
				t.Errorf("round trip of %s:\n got %#v\nwant %#v", b, got, v)
			}
		})
	}
}

func TestInvalidValuesAreRejected(t *testing.T) {
	mod := func(typ EventType, f func(*SessionEvent)) SessionEvent { e := validEvent(typ); f(&e); return e }
	cases := map[string]struct {
		v    validator
		want string
	}{
		"wrong schema":        {mod(TurnEvent, func(e *SessionEvent) { e.Schema = "v0" }), "schema"},
		"bad event id":        {mod(TurnEvent, func(e *SessionEvent) { e.EventID = "123" }), "event_id"},
		"no session":          {mod(TurnEvent, func(e *SessionEvent) { e.SessionID = "" }), "session_id"},
		"turn zero":           {mod(TurnEvent, func(e *SessionEvent) { e.Turn = 0 }), "turn 0"},
		"unknown safety":      {mod(TurnEvent, func(e *SessionEvent) { e.Safety = "maybe" }), "safety"},
		"unknown reason":      {mod(SessionEnded, func(e *SessionEvent) { e.Reason = "bored" }), "reason"},
		"unknown type":        {mod(TurnEvent, func(e *SessionEvent) { e.Type = "ping" }), "unknown type"},
		"no ts":               {mod(SessionStarted, func(e *SessionEvent) { e.TS = time.Time{} }), "ts"},
		"player id with \\n":  {CreateSessionRequest{PlayerID: "p\n1"}, "player_id"},
		"empty text":          {MessageRequest{}, "text is required"},
		"invalid utf-8":       {MessageRequest{Text: "\xff\xfe"}, "UTF-8"},
		"no messages":         {ChatCompletionRequest{}, "messages"},
		"bad role":            {ChatCompletionRequest{Messages: []ChatMessage{{Role: "root", Content: "x"}}}, "role"},
		"last not user":       {ChatCompletionRequest{Messages: []ChatMessage{{Role: "assistant", Content: "x"}}}, "last message"},
		"temperature 3":       {ChatCompletionRequest{Messages: []ChatMessage{{Role: "user"}}, Temperature: f64(3)}, "temperature"},
		"manifest bad sha":    {Manifest{Model: "npc", Version: "v1", Algorithm: "sft", Files: map[string]string{"a": "xyz"}, CreatedAt: ts}, "sha256"},
		"manifest bad name":   {Manifest{Model: "../etc", Version: "v1"}, "model"},
		"steady with canary":  {RolloutState{Deployment: "d", Stable: "v1", Canary: "v2", State: PhaseSteady}, "steady"},
		"weight 101":          {RolloutState{Deployment: "d", Stable: "v1", Canary: "v2", CanaryWeight: 101, State: PhaseCanary}, "canary_weight"},
		"canary weight 0":     {CanaryRequest{Version: "v2"}, "weight"},
		"change not forward":  {RolloutChange{Action: "promote", By: "x", At: ts}, "generation"},
		"transcript reversed": {SessionView{SessionID: "s", PlayerID: "p", PolicyVersion: "v", Transcript: []Exchange{{Turn: 2}, {Turn: 1}}}, "order"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := c.v.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Validate() = %v; want an error mentioning %q", err, c.want)
			}
		})
	}
}

func TestEndReasonPlayerEnded(t *testing.T) {
	for r, want := range map[EndReason]bool{EndPlayerEnded: true, EndIdleTimeout: true, EndMaxTurns: false, EndSafety: false, EndError: false} {
		if got := r.PlayerEnded(); got != want {
			t.Errorf("%s.PlayerEnded() = %v; want %v", r, got, want)
		}
	}
}
