package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
)

func TestSessionLifecycle(t *testing.T) {
	e := newEnv(t, FromEngine(startEngine(t, inference.DefaultEngineConfig())))
	created := e.createSession(e.key, "player-1")
	if created.Greeting != "Welcome back, traveller!" || created.PolicyVersion != "v0" {
		t.Errorf("create session = %+v; want the persona's greeting and policy v0", created)
	}
	for i, text := range []string{"Hello there! Where are we going?", "Tell me about the dragon."} {
		got := e.say(e.key, created.SessionID, text)
		if got.Turn != i+1 || got.Safety != schema.SafetyNone || got.Ended != "" {
			t.Errorf("message %d = %+v; want turn %d, safety none, not ended", i+1, got, i+1)
		}
	}
	var v schema.SessionView
	e.do("GET", "/v1/sessions/"+created.SessionID, e.key, nil).decode(t, http.StatusOK, &v)
	if v.Turns != 2 || len(v.Transcript) != 2 || v.Transcript[1].User != "Tell me about the dragon." || v.PlayerID != "player-1" {
		t.Errorf("GET session = %+v; want 2 turns of player-1 with the transcript", v)
	}
	if err := v.Validate(); err != nil {
		t.Errorf("session view: %v", err)
	}
	e.do("POST", "/v1/sessions/"+created.SessionID+"/end", e.key, nil).decode(t, http.StatusOK, &v)
	if v.Ended != schema.EndPlayerEnded {
		t.Errorf("end session: ended %q; want player_ended", v.Ended)
	}
	if r := e.do("POST", "/v1/sessions/"+created.SessionID+"/messages", e.key, schema.MessageRequest{Text: "hi"}); r.status != http.StatusConflict {
		t.Errorf("message after end: status %d; want 409", r.status)
	}

	evs := e.events.all()
	wantTypes := []schema.EventType{schema.SessionStarted, schema.TurnEvent, schema.TurnEvent, schema.SessionEnded}
	if len(evs) != len(wantTypes) {
		t.Fatalf("got %d events; want %d: %+v", len(evs), len(wantTypes), evs)
	}
	for i, ev := range evs {
		if ev.Type != wantTypes[i] || ev.SessionID != created.SessionID || ev.PlayerID != "player-1" || ev.NPCID != "mira" {
			t.Errorf("event %d = %s of %s/%s/%s; want %s of this session", i, ev.Type, ev.SessionID, ev.PlayerID, ev.NPCID, wantTypes[i])
		}
		if err := ev.Validate(); err != nil {
			t.Errorf("event %d: %v", i, err)
		}
	}
	if got := evs[2]; got.Turn != 2 || got.UserText != "Tell me about the dragon." || got.NPCText != v.Transcript[1].NPC || got.TokensIn == 0 {
		t.Errorf("turn event = %+v; want turn 2 with the texts and token counts", got)
	}
	if got := evs[3]; got.Reason != schema.EndPlayerEnded || got.Turns != 2 {
		t.Errorf("ended event: reason %q turns %d; want player_ended after 2", got.Reason, got.Turns)
	}
}

// TestEndSessionReason: a game ends a session with the reason its own
// limit on exchanges gives (max_turns), which the session_ended event
// carries; a reason a client may not give, or a body that is not the
// request, is a 400 that leaves the session open.
func TestEndSessionReason(t *testing.T) {
	e := newEnv(t, FromEngine(startEngine(t, inference.DefaultEngineConfig())))
	created := e.createSession(e.key, "player-cap")
	e.say(e.key, created.SessionID, "Hello there!")
	end := "/v1/sessions/" + created.SessionID + "/end"
	for _, body := range []string{`{"reason":"safety"}`, `{"reason":"idle_timeout"}`, `{"reason":7}`, `not json`} {
		assertError(t, e.do("POST", end, e.key, body), http.StatusBadRequest, "bad_request")
	}
	var v schema.SessionView
	e.do("GET", "/v1/sessions/"+created.SessionID, e.key, nil).decode(t, http.StatusOK, &v)
	if v.Ended != "" {
		t.Fatalf("after refused ends the session ended %q; want it open", v.Ended)
	}
	e.do("POST", end, e.key, schema.EndSessionRequest{Reason: schema.EndMaxTurns}).decode(t, http.StatusOK, &v)
	if v.Ended != schema.EndMaxTurns {
		t.Errorf("end with max_turns: ended %q; want max_turns", v.Ended)
	}
	evs := e.events.all()
	if last := evs[len(evs)-1]; last.Type != schema.SessionEnded || last.Reason != schema.EndMaxTurns || last.Turns != 1 {
		t.Errorf("last event = %s %q after %d turns; want session_ended max_turns after 1", last.Type, last.Reason, last.Turns)
	}
}

func TestSSEAssemblesToTheJSONReply(t *testing.T) {
	e := newEnv(t, FromEngine(startEngine(t, inference.DefaultEngineConfig())))
	const text = "Where are we heading today?"
	a := e.createSession(e.key, "player-a")
	want := e.say(e.key, a.SessionID, text)
	if want.Reply == "" {
		t.Fatal("greedy JSON reply is empty; the test needs a model that says something")
	}

	b := e.createSession(e.key, "player-b")
	r := e.do("POST", "/v1/sessions/"+b.SessionID+"/messages", e.key, schema.MessageRequest{Text: text}, "Accept", "text/event-stream")
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("SSE message: status %d, content type %q; want 200 text/event-stream", r.status, r.header.Get("Content-Type"))
	}
	evs := parseSSE(t, r.body)
	var assembled strings.Builder
	var done schema.MessageResponse
	for i, ev := range evs {
		switch ev.name {
		case "token":
			var tk tokenEvent
			if err := json.Unmarshal([]byte(ev.data), &tk); err != nil {
				t.Fatalf("token event %q: %v", ev.data, err)
			}
			assembled.WriteString(tk.Text)
		case "done":
			if i != len(evs)-1 {
				t.Errorf("done is event %d of %d; want the last", i+1, len(evs))
			}
			if err := json.Unmarshal([]byte(ev.data), &done); err != nil {
				t.Fatalf("done event %q: %v", ev.data, err)
			}
		default:
			t.Errorf("unexpected event %q: %s", ev.name, ev.data)
		}
	}
	if assembled.String() != want.Reply || done.Reply != want.Reply || done.Turn != 1 {
		t.Errorf("SSE tokens %q, done %+v; want both to be the JSON reply %q at turn 1", assembled.String(), done, want.Reply)
	}
	if len(evs) < 3 {
		t.Errorf("got %d events; want the reply in several token events", len(evs))
	}
}

func TestTwoGatewaysShareSessions(t *testing.T) {
	gen := FromEngine(startEngine(t, inference.DefaultEngineConfig()))
	a := newEnv(t, gen)
	b := newEnvOn(t, a.redis, a.events, a.clock, gen)
	s := a.createSession(a.key, "player-1")
	if got := b.say(a.key, s.SessionID, "Hello from the second gateway"); got.Turn != 1 {
		t.Errorf("turn on gateway B = %d; want 1", got.Turn)
	}
	if got := a.say(a.key, s.SessionID, "And back to the first"); got.Turn != 2 {
		t.Errorf("turn on gateway A = %d; want 2", got.Turn)
	}
	var v schema.SessionView
	b.do("GET", "/v1/sessions/"+s.SessionID, a.key, nil).decode(t, http.StatusOK, &v)
	if v.Turns != 2 || v.Transcript[0].User != "Hello from the second gateway" {
		t.Errorf("session on B = %+v; want both turns", v)
	}
}

func TestIdleSessionsEndOnce(t *testing.T) {
	gen := FromEngine(startEngine(t, inference.DefaultEngineConfig()))
	a := newEnv(t, gen)
	b := newEnvOn(t, a.redis, a.events, a.clock, gen)
	idle := a.createSession(a.key, "player-idle")
	a.say(a.key, idle.SessionID, "Hello")
	a.clock.Advance(a.srv.cfg.IdleTimeout / 2)
	active := a.createSession(a.key, "player-active")

	ctx := context.Background()
	if n, err := a.srv.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep before the timeout = %d, %v; want 0", n, err)
	}
	a.clock.Advance(a.srv.cfg.IdleTimeout/2 + time.Second)
	// Both gateways sweep; exactly one ends the session.
	na, errA := a.srv.Sweep(ctx)
	nb, errB := b.srv.Sweep(ctx)
	if errA != nil || errB != nil || na+nb != 1 {
		t.Fatalf("Sweep on A, B = %d (%v), %d (%v); want one session ended in all", na, errA, nb, errB)
	}
	ended := a.events.ofType(schema.SessionEnded)
	if len(ended) != 1 || ended[0].SessionID != idle.SessionID || ended[0].Reason != schema.EndIdleTimeout || ended[0].Turns != 1 {
		t.Fatalf("session_ended events = %+v; want one idle_timeout of %s after 1 turn", ended, idle.SessionID)
	}
	r := a.do("POST", "/v1/sessions/"+idle.SessionID+"/messages", a.key, schema.MessageRequest{Text: "still there?"})
	assertError(t, r, http.StatusConflict, "session_ended")
	if got := a.say(a.key, active.SessionID, "I am still here"); got.Turn != 1 {
		t.Errorf("active session turn = %d; want 1", got.Turn)
	}
}

func TestMaxTurnsEndsTheSession(t *testing.T) {
	e := newEnv(t, FromEngine(startEngine(t, inference.DefaultEngineConfig())), func(c *Config, _ *Deps) { c.MaxTurns = 2 })
	s := e.createSession(e.key, "player-1")
	if got := e.say(e.key, s.SessionID, "one"); got.Ended != "" {
		t.Errorf("turn 1 ended = %q; want not ended", got.Ended)
	}
	if got := e.say(e.key, s.SessionID, "two"); got.Ended != schema.EndMaxTurns || got.Turn != 2 {
		t.Errorf("turn 2 = %+v; want ended max_turns", got)
	}
	assertError(t, e.do("POST", "/v1/sessions/"+s.SessionID+"/messages", e.key, schema.MessageRequest{Text: "three"}),
		http.StatusConflict, "session_ended")
	ended := e.events.ofType(schema.SessionEnded)
	if len(ended) != 1 || ended[0].Reason != schema.EndMaxTurns || ended[0].Turns != 2 {
		t.Errorf("session_ended events = %+v; want one max_turns after 2 turns", ended)
	}
	if n, _ := e.srv.Sweep(context.Background()); n != 0 {
		e.clock.Advance(time.Hour)
		t.Errorf("Sweep ended %d sessions; want 0 (already ended)", n)
	}
}

// assertError checks an error response's status and JSON body.
func assertError(t *testing.T, r response, status int, code string) {
	t.Helper()
	var b schema.ErrorBody
	if err := json.Unmarshal(r.body, &b); err != nil {
		t.Fatalf("error body %q is not JSON: %v", r.body, err)
	}
	if r.status != status || b.Error.Code != code || b.Error.Message == "" {
		t.Errorf("got %d %+v; want %d with code %q and a message", r.status, b, status, code)
	}
}
