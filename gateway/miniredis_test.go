package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

// TestOnMiniredis runs a session, the rate limiter and the idle sweeper on
// miniredis, the embedded Redis of `parley dev`: its Lua and commands must
// be enough for the gateway's scripts.
func TestOnMiniredis(t *testing.T) {
	rdb := testenv.StartMiniredis(t)
	r := &testenv.Redis{Addr: rdb.Options().Addr, Client: rdb, Prefix: "parley:"}
	e := newEnvOn(t, r, &recorder{}, &clock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)},
		FromEngine(startEngine(t, inference.DefaultEngineConfig())), func(c *Config, _ *Deps) {
			c.PlayerRate, c.PlayerBurst = 0.01, 3
		})
	s := e.createSession(e.key, "player-1")
	if got := e.say(e.key, s.SessionID, "hello"); got.Turn != 1 {
		t.Errorf("turn = %d; want 1", got.Turn)
	}
	e.say(e.key, s.SessionID, "again")
	assertError(t, e.do("POST", "/v1/sessions/"+s.SessionID+"/messages", e.key, schema.MessageRequest{Text: "more"}),
		http.StatusTooManyRequests, "rate_limited")
	e.clock.Advance(e.srv.cfg.IdleTimeout + time.Second)
	if n, err := e.srv.Sweep(context.Background()); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1", n, err)
	}
	ended := e.events.ofType(schema.SessionEnded)
	if len(ended) != 1 || ended[0].Reason != schema.EndIdleTimeout || ended[0].Turns != 2 {
		t.Errorf("session_ended = %+v; want idle_timeout after 2 turns", ended)
	}
}
