package gateway

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
)

// roundTrips counts what a go-redis client sends: each command outside a
// pipeline and each pipeline (or transaction) is one round trip.
type roundTrips struct {
	mu   sync.Mutex
	n    int
	cmds []string
}

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.add(cmd.Name())
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name()
		}
		r.add("pipeline[" + strings.Join(names, " ") + "]")
		return next(ctx, cmds)
	}
}

func (r *roundTrips) add(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	r.cmds = append(r.cmds, what)
}

// reset returns the round trips so far and starts counting again.
func (r *roundTrips) reset() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, cmds := r.n, r.cmds
	r.n, r.cmds = 0, nil
	return n, cmds
}

// withCountedRedis gives the server its own client on the same Redis, counted by rt.
func withCountedRedis(t *testing.T, rt *roundTrips) envOpt {
	return func(_ *Config, d *Deps) {
		rdb := redis.NewClient(&redis.Options{Addr: d.Redis.(*redis.Client).Options().Addr})
		rdb.AddHook(rt)
		t.Cleanup(func() { _ = rdb.Close() })
		d.Redis = rdb
	}
}

// TestMessageRedisRoundTrips checks the hot path's budget: a message on a
// live session with a cached API key costs at most three Redis round trips
// (load and lock; rate limits and activity; append and unlock), plain or
// streamed, with the limits on.
func TestMessageRedisRoundTrips(t *testing.T) {
	rt := &roundTrips{}
	e := newEnv(t, FromEngine(startEngine(t, inference.DefaultEngineConfig())), withCountedRedis(t, rt))
	s := e.createSession(e.key, "player-1")
	e.say(e.key, s.SessionID, "hello") // warms the key cache and the script cache
	for _, sse := range []bool{false, true} {
		rt.reset()
		if sse {
			r := e.do("POST", "/v1/sessions/"+s.SessionID+"/messages", e.key, schema.MessageRequest{Text: "again"},
				"Accept", "text/event-stream")
			if r.status != http.StatusOK || !strings.Contains(string(r.body), "event: done") {
				t.Fatalf("streamed message = %d %s; want 200 ending with done", r.status, r.body)
			}
		} else {
			e.say(e.key, s.SessionID, "how are you?")
		}
		if n, cmds := rt.reset(); n > 3 {
			t.Errorf("message (sse %v) took %d Redis round trips %v; want at most 3", sse, n, cmds)
		} else {
			t.Logf("message (sse %v): %d round trips %v", sse, n, cmds)
		}
	}
}

// TestMessageRedisRoundTripsWithoutLimits checks that with the rate limits
// off a message still marks its session active, with the ZADD alone
// between the lock and the append.
func TestMessageRedisRoundTripsWithoutLimits(t *testing.T) {
	rt := &roundTrips{}
	noLimits := func(c *Config, _ *Deps) { c.ClientRate, c.PlayerRate = 0, 0 }
	e := newEnv(t, FromEngine(startEngine(t, inference.DefaultEngineConfig())), withCountedRedis(t, rt), noLimits)
	s := e.createSession(e.key, "player-1")
	e.say(e.key, s.SessionID, "hello")
	rt.reset()
	e.say(e.key, s.SessionID, "how are you?")
	if n, cmds := rt.reset(); n != 3 || fmt.Sprint(cmds) != "[evalsha zadd evalsha]" {
		t.Errorf("message without limits took %d Redis round trips %v; want [evalsha zadd evalsha]", n, cmds)
	}
}

// TestRevokedKeyStopsWithinCacheTTL checks that a cached API key keeps
// working only until its entry expires.
func TestRevokedKeyStopsWithinCacheTTL(t *testing.T) {
	e := newEnv(t, nil, func(c *Config, _ *Deps) { c.KeyCacheTTL = 2 * time.Second })
	k := e.newKey("studio", RoleAdmin)
	if r := e.do("GET", "/admin/v1/status", k, nil); r.status != http.StatusOK {
		t.Fatalf("admin key = %d; want 200", r.status)
	}
	if err := RevokeKey(context.Background(), e.redis.Client, e.redis.Prefix, k); err != nil {
		t.Fatal(err)
	}
	if r := e.do("GET", "/admin/v1/status", k, nil); r.status != http.StatusOK {
		t.Errorf("revoked key within the cache TTL = %d; want 200 from the cache", r.status)
	}
	e.clock.Advance(2 * time.Second)
	assertError(t, e.do("GET", "/admin/v1/status", k, nil), http.StatusUnauthorized, "unauthorized")
}

func TestKeyCacheIsBounded(t *testing.T) {
	c := newKeyCache(time.Minute, 3)
	now := time.Now()
	for i := range 10 {
		c.put(string(rune('a'+i)), principal{ClientID: "c"}, now)
	}
	if len(c.entries) != 3 {
		t.Errorf("cache holds %d entries; want its bound 3", len(c.entries))
	}
	if _, ok := c.get("j", now); !ok {
		t.Error("the newest entry is missing")
	}
	if _, ok := c.get("j", now.Add(time.Minute)); ok {
		t.Error("an entry outlived its TTL")
	}
}

// queuedGenerator holds every request as if it waited in the engine queue
// until release is closed, then generates with the wrapped engine.
type queuedGenerator struct {
	Generator
	release chan struct{}
}

func (g queuedGenerator) Generate(ctx context.Context, req GenerateRequest) (TokenStream, error) {
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Generator.Generate(ctx, req)
}

// TestSSEKeepAliveWhileQueued checks that a stream whose request waits in
// the engine queue gets keep-alive comments, and its reply after them.
func TestSSEKeepAliveWhileQueued(t *testing.T) {
	gen := queuedGenerator{Generator: FromEngine(startEngine(t, inference.DefaultEngineConfig())), release: make(chan struct{})}
	e := newEnv(t, gen, func(c *Config, _ *Deps) { c.SSEKeepAlive = 20 * time.Millisecond })
	s := e.createSession(e.key, "player-1")
	req, _ := http.NewRequest("POST", e.http.URL+"/v1/sessions/"+s.SessionID+"/messages",
		strings.NewReader(`{"text":"hello"}`))
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := e.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q; want a 200 event stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	rd := bufio.NewReader(resp.Body)
	line, err := rd.ReadString('\n')
	if err != nil || line != ": keep-alive\n" {
		t.Fatalf("first line %q, %v; want the keep-alive comment", line, err)
	}
	close(gen.release)
	rest := new(strings.Builder)
	if _, err := rd.WriteTo(rest); err != nil {
		t.Fatalf("read the stream: %v", err)
	}
	if !strings.Contains(rest.String(), "event: token") || !strings.Contains(rest.String(), "event: done") {
		t.Errorf("stream after keep-alive = %q; want tokens and done", rest.String())
	}
}
