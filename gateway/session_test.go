package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

// TestSweepDropsAnActiveIDWithoutState covers a gateway that died between
// adding a new session to the active set and writing its hash: the sweeper
// drops the id without an event or an error.
func TestSweepDropsAnActiveIDWithoutState(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	id := uuid.NewString()
	z := redis.Z{Score: float64(e.clock.Now().UnixMilli()), Member: id}
	if err := e.redis.Client.ZAdd(ctx, e.srv.activeKey(), z).Err(); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(e.srv.cfg.IdleTimeout + 1)
	if n, err := e.srv.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v; want 0, nil", n, err)
	}
	if err := e.redis.Client.ZScore(ctx, e.srv.activeKey(), id).Err(); err != redis.Nil {
		t.Errorf("ZSCORE of the dropped id: %v; want redis.Nil", err)
	}
	if ended := e.events.ofType(schema.SessionEnded); len(ended) != 0 {
		t.Errorf("session_ended events = %+v; want none", ended)
	}
}

// TestSweepTrustsTheSessionHash checks that a session whose active-set score
// is older than its hash's last activity is not ended, and is ended once it
// is idle by its hash.
func TestSweepTrustsTheSessionHash(t *testing.T) {
	e := newEnv(t, FromEngine(startEngine(t, inference.DefaultEngineConfig())))
	ctx := context.Background()
	s := e.createSession(e.key, "player-1")
	created := float64(e.clock.Now().UnixMilli())
	e.clock.Advance(e.srv.cfg.IdleTimeout)
	e.say(e.key, s.SessionID, "still here")
	// A stale score, as if the turn's ZADD had been lost.
	if err := e.redis.Client.ZAdd(ctx, e.srv.activeKey(), redis.Z{Score: created, Member: s.SessionID}).Err(); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(e.srv.cfg.IdleTimeout / 2)
	if n, err := e.srv.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep of a session active by its hash = %d, %v; want 0, nil", n, err)
	}
	if score, err := e.redis.Client.ZScore(ctx, e.srv.activeKey(), s.SessionID).Result(); err != nil || score <= created {
		t.Errorf("active score after the sweep = %v, %v; want moved up from %v to the last activity", score, err, created)
	}
	e.clock.Advance(e.srv.cfg.IdleTimeout/2 + 1)
	if n, err := e.srv.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep once idle by its hash = %d, %v; want 1, nil", n, err)
	}
}

// TestStrandedLockIsTakenOver covers a turn whose Redis went away while the
// reply was generated (a Sentinel failover, say): its save and its unlock
// both fail, so the lock stays in Redis. Once Redis answers again, the
// session's next message on this gateway takes that lock over rather than
// answering 409 turn_in_progress until it expires; another turn's live lock
// still answers 409.
func TestStrandedLockIsTakenOver(t *testing.T) {
	r := testenv.StartRedis(t)
	proxy := startTCPProxy(t, r.Addr)
	slow := newSlow(FromEngine(startEngine(t, inference.DefaultEngineConfig())))
	e := newEnvOn(t, r, &recorder{}, &clock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}, slow,
		func(_ *Config, d *Deps) { d.Redis = redis.NewClient(&redis.Options{Addr: proxy.addr}) })
	s := e.createSession(e.key, "player-1")
	path := "/v1/sessions/" + s.SessionID + "/messages"

	first := make(chan response, 1)
	go func() { first <- e.do("POST", path, e.key, schema.MessageRequest{Text: "hello"}) }()
	<-slow.started
	proxy.setCut(true)
	close(slow.release)
	assertError(t, <-first, http.StatusServiceUnavailable, "unavailable")
	proxy.setCut(false)
	ctx := context.Background()
	if n, err := r.Client.Exists(ctx, e.srv.lockKey(s.SessionID)).Result(); err != nil || n != 1 {
		t.Fatalf("the failed turn's lock exists = %d, %v; want it stranded in Redis", n, err)
	}

	got := e.say(e.key, s.SessionID, "hello again")
	if got.Turn != 1 {
		t.Errorf("the message after Redis returned is turn %d; want 1", got.Turn)
	}
	if err := r.Client.Set(ctx, e.srv.lockKey(s.SessionID), "another-turn", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	assertError(t, e.do("POST", path, e.key, schema.MessageRequest{Text: "and again"}), http.StatusConflict, "turn_in_progress")
}
