//go:build faults

package faulttest

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/rollout"
)

// durableRedis is a redis-server that keeps its data in an append-only file
// fsync'd on every write, so that a SIGKILL and a restart lose nothing, like
// a production Redis with persistence. (testenv's Redis keeps nothing.)
type durableRedis struct {
	t    *testing.T
	addr string
	port int
	dir  string
	proc *redisProc
}

func startDurableRedis(t *testing.T) *durableRedis {
	t.Helper()
	r := &durableRedis{t: t, port: testenv.FreePort(t), dir: t.TempDir()}
	r.addr = "127.0.0.1:" + strconv.Itoa(r.port)
	r.start()
	return r
}

// start (re)starts redis-server on its port with its data and waits until
// it answers PING.
func (r *durableRedis) start() {
	r.t.Helper()
	r.proc = startRedisProc(r.t, "redis-server", r.port, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", r.dir,
		"--logfile", filepath.Join(r.dir, "redis.log"))
}

func (r *durableRedis) kill() { r.proc.kill() }

// TestRedisDownAndBack kills Redis (SIGKILL) under a running gateway and
// starts it again with its data, without touching the gateway.
//
// What the gateway does, as asserted here: sessions, API keys and rate
// limits live in Redis, so while it is down every player request — new
// sessions and messages of known ones alike — is answered 503
// {"error":{"code":"unavailable"}} with Retry-After, /readyz answers 503 and
// /healthz 200; the process stays up and its model pool keeps the last
// rollout state it had (the rollout watch logs that it serves the last
// known versions). When Redis is back, service resumes without a restart:
// the same session takes its next message, new sessions are pinned to the
// same version, the rollout generation is unchanged and the fleet heartbeat
// returns.
func TestRedisDownAndBack(t *testing.T) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rds := startDurableRedis(t)
	k := testenv.StartKafka(t)
	s := &stack{kafka: k, registry: filepath.Join(t.TempDir(), "registry"), topic: k.Topic("sessions"), dep: "faults-redis"}
	testenv.PublishTinyModel(t, s.registry, "npc", "v1")
	spec := gatewaySpec{
		RedisAddr: rds.addr, Registry: s.registry, DataDir: t.TempDir(),
		Addr: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)), Prefix: "parley-faults:", Deployment: s.dep,
		Instance: "gw-redis", Brokers: k.Addrs, Topic: s.topic, MaxTokens: 8,
		PollInterval: 200 * time.Millisecond, FleetTTL: 2 * time.Second,
	}
	gw := startGateway(t, spec)
	rc0 := redisClient(t, rds.addr)
	key, err := gateway.CreateKey(ctx, rc0, spec.Prefix, "game", gateway.RolePlayerClient)
	if err != nil {
		t.Fatal(err)
	}
	rcfg := rollout.DefaultConfig()
	rcfg.Prefix = spec.Prefix
	ro, err := rollout.New(rc0, rcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	before, err := ro.Get(ctx, s.dep)
	if err != nil {
		t.Fatal(err)
	}
	sess, r := createSession(ctx, gw.base, key, "player-1")
	if r.status != http.StatusCreated {
		t.Fatalf("create session: %v", r)
	}
	if _, r := sendMessage(ctx, gw.base, key, sess.SessionID, "Good morning"); r.status != http.StatusOK {
		t.Fatalf("first message: %v", r)
	}

	rds.kill()
	downAt := time.Now()
	waitFor(t, 30*time.Second, "the rollout watch noticing Redis is gone", func() bool {
		return strings.Contains(gw.logText(), "rollout state unreachable; serving the last known versions")
	})
	checks := []struct {
		name   string
		do     func() apiResult
		status int
		code   string
	}{
		{"new session", func() apiResult { _, r := createSession(ctx, gw.base, key, "player-2"); return r }, 503, "unavailable"},
		{"message of a known session", func() apiResult {
			_, r := sendMessage(ctx, gw.base, key, sess.SessionID, "Are you there?")
			return r
		}, 503, "unavailable"},
		{"GET session", func() apiResult { _, r := getSession(ctx, gw.base, key, sess.SessionID); return r }, 503, "unavailable"},
		{"/readyz", func() apiResult { return call(ctx, http.MethodGet, gw.base+"/readyz", "", nil) }, 503, "unavailable"},
		{"/healthz", func() apiResult { return call(ctx, http.MethodGet, gw.base+"/healthz", "", nil) }, 200, ""},
	}
	for _, c := range checks {
		r := c.do()
		t.Logf("Redis down: %s → %v", c.name, r)
		if r.err != nil || r.status != c.status || r.code() != c.code {
			t.Errorf("Redis down: %s = %v; want %d %q", c.name, r, c.status, c.code)
		}
		if c.status == http.StatusServiceUnavailable && r.retryAfter == "" {
			t.Errorf("Redis down: %s answered 503 without Retry-After", c.name)
		}
	}
	time.Sleep(2 * time.Second) // several rollout polls and heartbeats fail
	if gw.exited() {
		t.Fatalf("gateway exited while Redis was down: %v", gw.err)
	}

	rds.start()
	upAt := time.Now()
	var msg apiResult
	waitFor(t, time.Minute, "a message of the known session answered", func() bool {
		_, msg = sendMessage(ctx, gw.base, key, sess.SessionID, "Are you there now?")
		return msg.status == http.StatusOK
	})
	recovered := time.Since(upAt)
	t.Logf("Redis down %.1fs; first answered message %.2fs after Redis was back", upAt.Sub(downAt).Seconds(), recovered.Seconds())
	view, r := getSession(ctx, gw.base, key, sess.SessionID)
	if r.status != http.StatusOK || view.Turns != 2 || len(view.Transcript) != 2 {
		t.Errorf("session after Redis came back: %v, %d turns; want 2 turns (the message during the outage not counted)", r, view.Turns)
	}
	sess2, r := createSession(ctx, gw.base, key, "player-2")
	if r.status != http.StatusCreated || sess2.PolicyVersion != before.Stable {
		t.Errorf("new session after Redis came back: %v, policy %q; want 201 on %s", r, sess2.PolicyVersion, before.Stable)
	}
	after, err := ro.Get(ctx, s.dep)
	if err != nil || after.Generation != before.Generation || after.Stable != before.Stable {
		t.Errorf("rollout state after Redis came back: %+v, %v; want generation %d stable %s", after, err, before.Generation, before.Stable)
	}
	waitFor(t, 30*time.Second, "the fleet heartbeat back", func() bool {
		fleet, err := ro.Fleet(ctx, s.dep)
		return err == nil && len(fleet) == 1 && fleet[0].Stable == before.Stable
	})
	waitFor(t, 30*time.Second, "the rollout watch saying Redis is back", func() bool {
		return strings.Contains(gw.logText(), "rollout state reachable again")
	})
	if gw.exited() {
		t.Fatalf("gateway exited: %v", gw.err)
	}
	t.Logf("runtime %.1fs", time.Since(began).Seconds())
}

// TestRedisBackEmpty restarts the gateway's Redis without its data (no
// persistence): the gateway writes its last rollout state back (same
// generation), and goes on serving it. What lived only in Redis is gone and
// the gateway says so plainly: the old API key is unknown (401), the old
// session is not found (404); a re-provisioned key works at once, without a
// gateway restart.
func TestRedisBackEmpty(t *testing.T) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := newStack(t, "faults-redis-empty")
	gw := startGateway(t, s.spec(t, "gw-redis-empty"))
	key, err := gateway.CreateKey(ctx, s.redis.Client, s.redis.Prefix, "game", gateway.RolePlayerClient)
	if err != nil {
		t.Fatal(err)
	}
	rcfg := rollout.DefaultConfig()
	rcfg.Prefix = s.redis.Prefix
	ro, err := rollout.New(s.redis.Client, rcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Move the rollout past its first generation so a restore is visible.
	testenv.PublishTinyModel(t, s.registry, "npc", "v2")
	if _, err := ro.Canary(ctx, s.dep, "v2", 50, "faulttest"); err != nil {
		t.Fatal(err)
	}
	before, _ := ro.Get(ctx, s.dep)
	waitFor(t, time.Minute, "the fleet serving the canary", func() bool {
		fleet, err := ro.Fleet(ctx, s.dep)
		return err == nil && len(fleet) == 1 && fleet[0].Generation == before.Generation
	})
	sess, r := createSession(ctx, gw.base, key, "player-1")
	if r.status != http.StatusCreated {
		t.Fatalf("create session: %v", r)
	}

	s.redis.Stop()
	time.Sleep(time.Second)
	s.redis.Start()
	waitFor(t, 30*time.Second, "the rollout state written back", func() bool {
		st, err := ro.Get(ctx, s.dep)
		return err == nil && st.Generation == before.Generation
	})
	after, _ := ro.Get(ctx, s.dep)
	t.Logf("rollout before: generation %d stable %s canary %s %d%%; written back: generation %d stable %s canary %s %d%%",
		before.Generation, before.Stable, before.Canary, before.CanaryWeight, after.Generation, after.Stable, after.Canary, after.CanaryWeight)
	if after.Stable != before.Stable || after.Canary != before.Canary || after.CanaryWeight != before.CanaryWeight {
		t.Errorf("written-back rollout state %+v; want %+v", after, before)
	}

	// A gateway honours a key it resolved before the loss for at most its key
	// cache's TTL, as it does a revoked key.
	waitFor(t, gateway.DefaultConfig().KeyCacheTTL+10*time.Second, "the old key refused (401) after Redis lost its data", func() bool {
		return call(ctx, http.MethodPost, gw.base+"/v1/sessions", key, map[string]string{"player_id": "player-2"}).status == http.StatusUnauthorized
	})
	key2, err := gateway.CreateKey(ctx, s.redis.Client, s.redis.Prefix, "game", gateway.RolePlayerClient)
	if err != nil {
		t.Fatal(err)
	}
	if _, r := getSession(ctx, gw.base, key2, sess.SessionID); r.status != http.StatusNotFound {
		t.Errorf("old session after Redis lost its data = %v; want 404", r)
	}
	versions := map[string]int{}
	for p := range 12 {
		sess, r := createSession(ctx, gw.base, key2, fmt.Sprintf("player-%d", p))
		if r.status != http.StatusCreated {
			t.Fatalf("new session with a re-provisioned key: %v", r)
		}
		versions[sess.PolicyVersion]++
		if _, r := sendMessage(ctx, gw.base, key2, sess.SessionID, "Hello"); r.status != http.StatusOK {
			t.Errorf("message: %v", r)
		}
	}
	t.Logf("new sessions after the restart by version: %v", versions)
	for v := range versions {
		if v != "v1" && v != "v2" {
			t.Errorf("a new session is pinned to %q; want v1 or v2", v)
		}
	}
	if gw.exited() {
		t.Fatalf("gateway exited: %v", gw.err)
	}
	t.Logf("runtime %.1fs", time.Since(began).Seconds())
}
