package bots

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

func TestBotsSummaryMath(t *testing.T) {
	s := newSummary()
	for _, r := range []sessionResult{
		{arm: "stable", policy: "v1", turns: 4, reason: schema.EndPlayerEnded, retries: 1},
		{arm: "stable", policy: "v1", turns: 6, reason: schema.EndIdleTimeout},
		{arm: "canary", policy: "v2", turns: 11, reason: schema.EndMaxTurns},
		{policy: "v1", turns: 3, reason: schema.EndPlayerEnded, retries: 2},
		{arm: "canary", policy: "v2", turns: 2, errCode: "rate_limited"},
	} {
		s.add(r)
	}
	want := Summary{
		Sessions: 5, Completed: 4, Exchanges: 24, AvgL: 6, Errors: 1, Retries: 3,
		PerArm:     map[string]schema.LengthStats{"stable": {Sessions: 2, AvgL: 5}, "canary": {Sessions: 1, AvgL: 11}, "none": {Sessions: 1, AvgL: 3}},
		PerPolicy:  map[string]schema.LengthStats{"v1": {Sessions: 3, AvgL: 13.0 / 3}, "v2": {Sessions: 1, AvgL: 11}},
		EndReasons: map[string]int{"player_ended": 2, "idle_timeout": 1, "max_turns": 1, "error": 1},
		ErrorCodes: map[string]int{"rate_limited": 1},
	}
	got, _ := json.Marshal(s)
	wantJSON, _ := json.Marshal(want)
	if string(got) != string(wantJSON) {
		t.Errorf("summary = %s\nwant      %s", got, wantJSON)
	}
	var buf bytes.Buffer
	if err := s.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"canary  1         11.00", "v1      3         4.33", "rate_limited  1"} {
		if !strings.Contains(buf.String(), line) {
			t.Errorf("table lacks %q:\n%s", line, buf.String())
		}
	}
}

// contractGateway is an in-process stand-in for the gateway's player API
// (DESIGN §3 HTTP) that answers with the good scripted NPC. It rate-limits
// the first message of every session once, to exercise Retry-After.
type contractGateway struct {
	t   *testing.T
	pop *simulator.Population
	key string

	mu       sync.Mutex
	sessions map[string]*stubSession
	next     int
	ended    int
}

type stubSession struct {
	npc      *simulator.ScriptedNPC
	turns    int
	limited  bool
	ended    bool
	maxTurns int
}

func (g *contractGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, code string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(schema.ErrorBody{Error: schema.ErrorDetail{Code: code, Message: code}})
	}
	if r.Header.Get("Authorization") != "Bearer "+g.key {
		fail(http.StatusUnauthorized, "unauthorized")
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/sessions":
		var req schema.CreateSessionRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Validate() != nil {
			fail(http.StatusBadRequest, "bad_request")
			return
		}
		id := fmt.Sprintf("s%d", g.next)
		g.next++
		npc, err := simulator.NewScriptedNPC(g.pop, simulator.NPCGood, simulator.DefaultScriptConfig(), uint64(g.next))
		if err != nil {
			g.t.Error(err)
		}
		pa := [2]string{"v1", schema.ArmStable}
		if len(req.PlayerID)%2 == 0 || strings.HasSuffix(req.PlayerID, "1") {
			pa = [2]string{"v2", schema.ArmCanary}
		}
		g.sessions[id] = &stubSession{npc: npc, maxTurns: 8}
		json.NewEncoder(w).Encode(schema.CreateSessionResponse{SessionID: id, PolicyVersion: pa[0], Arm: pa[1]})
	case r.Method == http.MethodPost && len(parts) == 4 && parts[3] == "messages":
		s, ok := g.sessions[parts[2]]
		if !ok {
			fail(http.StatusNotFound, "not_found")
			return
		}
		if s.ended {
			fail(http.StatusConflict, "session_ended")
			return
		}
		if !s.limited {
			s.limited = true
			w.Header().Set("Retry-After", "0")
			fail(http.StatusTooManyRequests, "rate_limited")
			return
		}
		var req schema.MessageRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Validate() != nil {
			fail(http.StatusBadRequest, "bad_request")
			return
		}
		s.turns++
		reply, _ := s.npc.Reply(req.Text)
		resp := schema.MessageResponse{Reply: reply, Turn: s.turns}
		if s.turns >= s.maxTurns {
			s.ended = true
			resp.Ended = schema.EndMaxTurns
		}
		json.NewEncoder(w).Encode(resp)
	case r.Method == http.MethodPost && len(parts) == 4 && parts[3] == "end":
		s, ok := g.sessions[parts[2]]
		if !ok || s.ended {
			fail(http.StatusConflict, "session_ended")
			return
		}
		s.ended = true
		g.ended++
		w.WriteHeader(http.StatusNoContent)
	default:
		fail(http.StatusNotFound, "not_found")
	}
}

func TestRunBotsAgainstTheContract(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Players, cfg.Sessions, cfg.Concurrency, cfg.Seed = 10, 40, 4, 3
	cfg.MaxTurns, cfg.RetryBase, cfg.MaxRetryWait = 0, time.Millisecond, 10*time.Millisecond
	cfg.APIKey = "k-test"
	pcfg := cfg.Population
	pcfg.Size = cfg.Players
	pop, err := simulator.NewPopulation(pcfg, cfg.Seed)
	if err != nil {
		t.Fatal(err)
	}
	g := &contractGateway{t: t, pop: pop, key: cfg.APIKey, sessions: make(map[string]*stubSession)}
	srv := httptest.NewServer(g)
	defer srv.Close()
	cfg.GatewayURL = srv.URL

	sum, err := Run(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if sum.Sessions != 40 || sum.Errors != 0 || sum.Completed != 40 {
		t.Fatalf("summary %+v; want 40 sessions without errors", sum)
	}
	if sum.Retries != 40 {
		t.Errorf("retries = %d; want 40 (one 429 per session)", sum.Retries)
	}
	if sum.EndReasons["max_turns"] == 0 || sum.EndReasons["max_turns"] == 40 {
		t.Errorf("end reasons %v; want some sessions at the gateway's max turns and some ended by players", sum.EndReasons)
	}
	g.mu.Lock()
	ended := g.ended
	g.mu.Unlock()
	if want := 40 - sum.EndReasons["max_turns"]; ended != want {
		t.Errorf("gateway saw %d /end calls; want %d (every session the player ended)", ended, want)
	}
	arms := 0
	for _, a := range sum.PerArm {
		arms += a.Sessions
	}
	if arms != 40 || len(sum.PerArm) != 2 || len(sum.PerPolicy) != 2 {
		t.Errorf("per arm %v, per policy %v; want 40 sessions over 2 arms and 2 policies", sum.PerArm, sum.PerPolicy)
	}

	// A wrong key fails every session with the gateway's error code.
	cfg.APIKey, cfg.Sessions = "wrong", 3
	sum, err = Run(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Errors != 3 || sum.ErrorCodes["unauthorized"] != 3 {
		t.Errorf("with a wrong key: %+v; want 3 unauthorized errors", sum)
	}
}

// TestBotsThinkBetweenMessages runs sessions one at a time with a think
// time: the run lasts at least a think time for every message after a
// session's first.
func TestBotsThinkBetweenMessages(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Players, cfg.Sessions, cfg.Concurrency, cfg.Seed = 4, 4, 1, 5
	cfg.MaxTurns, cfg.RetryBase, cfg.MaxRetryWait = 0, time.Millisecond, 10*time.Millisecond
	cfg.ThinkTime, cfg.APIKey = 25*time.Millisecond, "k-test"
	pcfg := cfg.Population
	pcfg.Size = cfg.Players
	pop, err := simulator.NewPopulation(pcfg, cfg.Seed)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&contractGateway{t: t, pop: pop, key: cfg.APIKey, sessions: make(map[string]*stubSession)})
	defer srv.Close()
	cfg.GatewayURL = srv.URL
	sum, err := Run(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil || sum.Errors != 0 {
		t.Fatalf("Run: %+v, %v", sum, err)
	}
	messages := sum.Exchanges
	if thinks := messages - sum.Sessions; thinks < 1 || sum.Seconds < float64(thinks)*cfg.ThinkTime.Seconds() {
		t.Errorf("%d sessions of %d messages in all took %.3fs; want at least %d think times of %v", sum.Sessions, messages, sum.Seconds, thinks, cfg.ThinkTime)
	}
}

func TestBotsConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
	}{
		{"no scheme", func(c *Config) { c.GatewayURL = "localhost:8080" }},
		{"no sessions", func(c *Config) { c.Sessions = 0 }},
		{"no concurrency", func(c *Config) { c.Concurrency = 0 }},
		{"negative retries", func(c *Config) { c.MaxRetries = -1 }},
		{"negative think time", func(c *Config) { c.ThinkTime = -time.Second }},
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.change(&cfg)
			if err := cfg.Validate(); err == nil {
				t.Error("Validate() = nil; want an error")
			}
		})
	}
}
