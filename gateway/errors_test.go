package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
)

func TestBadInputGetsItsStatusAndJSONError(t *testing.T) {
	e := newEnv(t, FromEngine(startEngine(t, inference.DefaultEngineConfig())))
	other := e.newKey("game-b", RolePlayerClient)
	s := e.createSession(e.key, "player-1")
	ended := e.createSession(e.key, "player-2")
	e.do("POST", "/v1/sessions/"+ended.SessionID+"/end", e.key, nil).decode(t, http.StatusOK, nil)
	msgs := "/v1/sessions/" + s.SessionID + "/messages"
	big := strings.Repeat("a", int(e.srv.cfg.MaxBodyBytes)+1)

	cases := []struct {
		name         string
		method, path string
		key          string
		body         any
		status       int
		code         string
	}{
		{"malformed json", "POST", msgs, e.key, `{"text":`, 400, "bad_request"},
		{"invalid utf-8", "POST", msgs, e.key, []byte("{\"text\":\"caf\xe9\"}"), 400, "bad_request"},
		{"wrong type", "POST", msgs, e.key, `{"text":42}`, 400, "bad_request"},
		{"empty body", "POST", msgs, e.key, ``, 400, "bad_request"},
		{"blank text", "POST", msgs, e.key, `{"text":"   "}`, 400, "bad_request"},
		{"missing player", "POST", "/v1/sessions", e.key, `{}`, 400, "bad_request"},
		{"bad player id", "POST", "/v1/sessions", e.key, `{"player_id":"a b"}`, 400, "bad_request"},
		{"unknown npc", "POST", "/v1/sessions", e.key, `{"player_id":"p","npc_id":"dragon"}`, 400, "bad_request"},
		{"chat without messages", "POST", "/v1/chat/completions", e.key, `{"messages":[]}`, 400, "bad_request"},
		{"no key", "POST", msgs, "", `{"text":"hi"}`, 401, "unauthorized"},
		{"unknown key", "POST", msgs, "pk_nope", `{"text":"hi"}`, 401, "unauthorized"},
		{"other client's session", "POST", msgs, other, `{"text":"hi"}`, 403, "forbidden"},
		{"other client reads", "GET", "/v1/sessions/" + s.SessionID, other, nil, 403, "forbidden"},
		{"other client ends", "POST", "/v1/sessions/" + s.SessionID + "/end", other, nil, 403, "forbidden"},
		{"player key on admin", "GET", "/admin/v1/status", e.key, nil, 403, "forbidden"},
		{"unknown session", "GET", "/v1/sessions/0190b7d2-0000-7000-8000-000000000000", e.key, nil, 404, "not_found"},
		{"malformed session id", "GET", "/v1/sessions/nope", e.key, nil, 404, "not_found"},
		{"unknown route", "GET", "/v2/nothing", e.key, nil, 404, "not_found"},
		{"ended session", "POST", "/v1/sessions/" + ended.SessionID + "/messages", e.key, `{"text":"hi"}`, 409, "session_ended"},
		{"end twice", "POST", "/v1/sessions/" + ended.SessionID + "/end", e.key, nil, 409, "session_ended"},
		{"body too large", "POST", msgs, e.key, `{"text":"` + big + `"}`, 413, "too_large"},
		{"message too large", "POST", msgs, e.key, `{"text":"` + strings.Repeat("b", e.srv.cfg.MaxMessageBytes+1) + `"}`, 413, "too_large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assertError(t, e.do(c.method, c.path, c.key, c.body), c.status, c.code)
		})
	}
	var v schema.SessionView
	e.do("GET", "/v1/sessions/"+s.SessionID, e.key, nil).decode(t, http.StatusOK, &v)
	if v.Turns != 0 {
		t.Errorf("after only bad requests the session has %d turns; want 0", v.Turns)
	}
}

func TestRateLimit(t *testing.T) {
	e := newEnv(t, FromEngine(startEngine(t, inference.DefaultEngineConfig())), func(c *Config, _ *Deps) {
		c.PlayerRate, c.PlayerBurst = 0.01, 2
	})
	s := e.createSession(e.key, "player-1") // takes the first token
	e.say(e.key, s.SessionID, "one")        // the second
	r := e.do("POST", "/v1/sessions/"+s.SessionID+"/messages", e.key, schema.MessageRequest{Text: "two"})
	assertError(t, r, http.StatusTooManyRequests, "rate_limited")
	if after, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || after < 1 {
		t.Errorf("Retry-After = %q; want a positive number of seconds", r.header.Get("Retry-After"))
	}
	// Another player of the same client has a bucket of its own.
	e.createSession(e.key, "player-2")
	// Time refills the bucket.
	e.clock.Advance(200 * time.Second)
	e.say(e.key, s.SessionID, "three")
}

func TestClientRateLimit(t *testing.T) {
	e := newEnv(t, FromEngine(startEngine(t, inference.DefaultEngineConfig())), func(c *Config, _ *Deps) {
		c.ClientRate, c.ClientBurst = 0.01, 2
	})
	e.createSession(e.key, "p1")
	e.createSession(e.key, "p2")
	assertError(t, e.do("POST", "/v1/sessions", e.key, schema.CreateSessionRequest{PlayerID: "p3"}), http.StatusTooManyRequests, "rate_limited")
	other := e.newKey("game-b", RolePlayerClient)
	e.createSession(other, "p3")
}

func TestEngineBackpressure(t *testing.T) {
	tok := testTokenizer(t)
	cases := []struct {
		name   string
		engine func() *inference.Engine
		status int
		code   string
	}{
		{"queue full", func() *inference.Engine {
			// Not running and no queue: every Generate is refused as full.
			m, err := inference.NewModel(inference.ModelConfig{VocabSize: tok.VocabSize(), Dim: 16, Layers: 1, Heads: 2,
				FFNDim: 32, MaxSeq: 256, RopeBase: 10000, NormEps: 1e-5}, inference.DefaultBackendConfig(), 1)
			if err != nil {
				t.Fatal(err)
			}
			e, err := inference.NewEngine(m, tok, inference.EngineConfig{MaxBatch: 1, QueueSize: 0, ScoreBatch: 1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			return e
		}, http.StatusTooManyRequests, "overloaded"},
		{"closed", func() *inference.Engine {
			e := startEngine(t, inference.DefaultEngineConfig())
			_ = e.Close()
			return e
		}, http.StatusServiceUnavailable, "unavailable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, FromEngine(c.engine()))
			s := e.createSession(e.key, "player-1")
			r := e.do("POST", "/v1/sessions/"+s.SessionID+"/messages", e.key, schema.MessageRequest{Text: "hello"})
			assertError(t, r, c.status, c.code)
			if r.header.Get("Retry-After") == "" {
				t.Errorf("no Retry-After on %d", r.status)
			}
			// The refused message left no turn and released the session.
			r = e.do("POST", "/v1/sessions/"+s.SessionID+"/messages", e.key, schema.MessageRequest{Text: "hello"})
			assertError(t, r, c.status, c.code)
		})
	}
}

func TestNoEngineIsNotReady(t *testing.T) {
	e := newEnv(t, nil)
	assertError(t, e.do("GET", "/readyz", "", nil), http.StatusServiceUnavailable, "unavailable")
	assertError(t, e.do("POST", "/v1/sessions", e.key, schema.CreateSessionRequest{PlayerID: "p"}), http.StatusServiceUnavailable, "unavailable")
	if err := e.srv.SetEngine("v7", FromEngine(startEngine(t, inference.DefaultEngineConfig()))); err != nil {
		t.Fatal(err)
	}
	if r := e.do("GET", "/readyz", "", nil); r.status != http.StatusOK {
		t.Errorf("readyz after SetEngine = %d; want 200", r.status)
	}
	if s := e.createSession(e.key, "p"); s.PolicyVersion != "v7" {
		t.Errorf("policy version = %q; want v7", s.PolicyVersion)
	}
}

func TestUnloggedEventsAreAnError(t *testing.T) {
	e := newEnv(t, FromEngine(startEngine(t, inference.DefaultEngineConfig())))
	e.events.fail = errors.New("spool full")
	assertError(t, e.do("POST", "/v1/sessions", e.key, schema.CreateSessionRequest{PlayerID: "p"}), http.StatusServiceUnavailable, "unavailable")
	n, err := e.redis.Client.ZCard(context.Background(), e.srv.activeKey()).Result()
	if err != nil || n != 0 {
		t.Errorf("active sessions after a failed start = %d, %v; want 0", n, err)
	}
}

// redisError is a reply error as go-redis returns it (redis.Error).
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// TestStoreUnreachable: the errors of a Redis that is failing over answer
// 503, and a body the client cut short does not.
func TestStoreUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"refused", fmt.Errorf("create session: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), true},
		{"closed mid-reply", fmt.Errorf("append turn: %w", io.EOF), true},
		{"replica", fmt.Errorf("lock session: %w", redisError("READONLY You can't write against a read only replica.")), true},
		{"loading", redisError("LOADING Redis is loading the dataset in memory"), true},
		{"script error", redisError("ERR user_script:1: bad argument"), false},
		{"body cut short", echo.NewHTTPError(http.StatusBadRequest, "bad body").SetInternal(io.ErrUnexpectedEOF), false},
		{"other", errors.New("boom"), false},
	} {
		if got := storeUnreachable(tc.err); got != tc.want {
			t.Errorf("%s: storeUnreachable(%v) = %v; want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
