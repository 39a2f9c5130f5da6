package gateway

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
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

// TestReplicaAcksWaitForTheReplica: with ReplicaAcks a saved turn is
// answered only once a replica has it. While the replica is stopped
// (SIGSTOP) the answer waits; once it runs again the answer comes and the
// replica holds the turn. A gateway with a short ReplicaAckTimeout answers
// anyway and warns.
func TestReplicaAcksWaitForTheReplica(t *testing.T) {
	if os.Getenv("REDIS_ADDR") != "" {
		t.Skip("needs a redis-server of its own to replicate")
	}
	r := testenv.StartRedis(t)
	replica := startReplica(t, r)
	clk := &clock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	gen := FromEngine(startEngine(t, inference.DefaultEngineConfig()))
	e := newEnvOn(t, r, &recorder{}, clk, gen, func(c *Config, _ *Deps) { c.ReplicaAcks, c.ReplicaAckTimeout = 1, time.Minute })
	var logs testenv.LogBuffer
	short := newEnvOn(t, r, &recorder{}, clk, gen, func(c *Config, d *Deps) {
		c.ReplicaAcks, c.ReplicaAckTimeout = 1, 100*time.Millisecond
		d.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	s := e.createSession(e.key, "player-1")

	if err := replica.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	answered := make(chan response, 1)
	go func() {
		answered <- e.do("POST", "/v1/sessions/"+s.SessionID+"/messages", e.key, schema.MessageRequest{Text: "hello"})
	}()
	select {
	case r := <-answered:
		t.Fatalf("answered %d while the replica was stopped; want the answer held until it confirms", r.status)
	case <-time.After(300 * time.Millisecond):
	}
	shortS := short.createSession(short.key, "player-2")
	short.say(short.key, shortS.SessionID, "hello")
	if !strings.Contains(logs.String(), "replicas_confirmed=0") {
		t.Errorf("a gateway answering before its replica confirmed logged %q; want a warning", logs.String())
	}
	if err := replica.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var got schema.MessageResponse
	(<-answered).decode(t, http.StatusOK, &got)
	turns, err := replica.client.HGet(context.Background(), e.srv.sessionKey(s.SessionID), "turns").Result()
	if err != nil || turns != "1" {
		t.Errorf("the replica's turns of the answered session = %q, %v; want 1", turns, err)
	}
}

// TestReplicaAcksWithoutReplicas: a primary with no replica connected (the
// one a failover just promoted) is not waited on, so answers are not slowed
// and no write is reported unconfirmed.
func TestReplicaAcksWithoutReplicas(t *testing.T) {
	var logs testenv.LogBuffer
	e := newEnv(t, FromEngine(startEngine(t, inference.DefaultEngineConfig())), func(c *Config, d *Deps) {
		c.ReplicaAcks, c.ReplicaAckTimeout = 1, 5*time.Second
		d.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	s := e.createSession(e.key, "player-1")
	e.say(e.key, s.SessionID, "hello")
	if strings.Contains(logs.String(), "replicas_confirmed") {
		t.Errorf("a primary without replicas was waited on: %s", logs.String())
	}
}

// replicaProc is a redis-server replicating another.
type replicaProc struct {
	cmd    *exec.Cmd
	client *redis.Client
}

// startReplica runs a redis-server that replicates primary and waits until it is in sync.
func startReplica(t *testing.T, primary *testenv.Redis) *replicaProc {
	t.Helper()
	// Sync at once rather than after the default 5 s wait for more replicas.
	if err := primary.Client.ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(primary.Addr)
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	_, myPort, _ := net.SplitHostPort(addr)
	p := &replicaProc{cmd: exec.Command("redis-server", "--port", myPort, "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", t.TempDir(), "--replicaof", host, port)}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start a replica: %v", err)
	}
	p.client = redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		_ = p.client.Close()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := p.client.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica at %s is not in sync after 20s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSessionScriptsAreRetrySafe: go-redis sends a command again when its
// reply was lost, so the lock and append scripts run twice with the same
// arguments must answer as the first run did: the lock is ours, the turn
// saved once, not a 409.
func TestSessionScriptsAreRetrySafe(t *testing.T) {
	e := newEnv(t, FromEngine(startEngine(t, inference.DefaultEngineConfig())))
	ctx := context.Background()
	s := e.createSession(e.key, "player-1")
	keys := []string{e.srv.sessionKey(s.SessionID), e.srv.lockKey(s.SessionID)}
	for range 2 {
		res, err := lockScript.Run(ctx, e.redis.Client, keys, "game-a", "tok-1", 60000, 0, 60000, "").Slice()
		if err != nil || res[0] != "locked" {
			t.Fatalf("lock script = %v, %v; want locked both times", res, err)
		}
	}
	hist := `[{"turn":1,"user":"hi","npc":"hello"}]`
	for range 2 {
		r, err := appendScript.Run(ctx, e.redis.Client, keys, "tok-1", 0, hist, 0, 60000, 1, 60000).Int()
		if err != nil || r != 1 {
			t.Fatalf("append script = %d, %v; want 1 (this turn reached max turns) both times", r, err)
		}
	}
	v, err := e.redis.Client.HMGet(ctx, keys[0], "turns", "ended").Result()
	if err != nil || v[0] != "1" || v[1] != "max_turns" {
		t.Errorf("session turns, ended = %v, %v; want 1, max_turns", v, err)
	}
	if r, err := appendScript.Run(ctx, e.redis.Client, keys, "tok-2", 1, hist, 0, 60000, 5, 60000).Int(); err != nil || r != -1 {
		t.Errorf("another turn's append after the end = %d, %v; want -1", r, err)
	}
}
