//go:build faults

package faulttest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/internal/redisconn"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

// sentinelMaster is the name under which the test's sentinels watch the primary.
const sentinelMaster = "parley"

// redisProc is one redis-server or redis-sentinel process of the test.
type redisProc struct {
	addr string
	cmd  *exec.Cmd
}

// startRedisProc runs bin (redis-server or redis-sentinel) with args and
// waits until it answers PING.
func startRedisProc(t *testing.T, bin string, port int, args ...string) *redisProc {
	t.Helper()
	if _, err := exec.LookPath(bin); err != nil {
		t.Fatalf("%s is not installed (apt-get install -y redis-server redis-sentinel)", bin)
	}
	p := &redisProc{addr: "127.0.0.1:" + strconv.Itoa(port), cmd: exec.Command(bin, args...)}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(p.kill)
	c := redisClient(t, p.addr)
	waitFor(t, 10*time.Second, bin+" at "+p.addr+" answering PING", func() bool {
		return c.Ping(context.Background()).Err() == nil
	})
	return p
}

func (p *redisProc) kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

// sentinelSet is a primary, its replica and three sentinels that watch them.
type sentinelSet struct {
	primary, replica *redisProc
	sentinels        []*redisProc
}

func startSentinelSet(t *testing.T) *sentinelSet {
	t.Helper()
	dir := t.TempDir()
	server := func(name string, port int, extra ...string) *redisProc {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "yes", "--appendfsync", "always", "--repl-diskless-sync-delay", "0", "--dir", d, "--logfile", filepath.Join(d, "redis.log")}, extra...)
		return startRedisProc(t, "redis-server", port, args...)
	}
	pPort, rPort := testenv.FreePort(t), testenv.FreePort(t)
	s := &sentinelSet{primary: server("primary", pPort)}
	s.replica = server("replica", rPort, "--replicaof", "127.0.0.1", strconv.Itoa(pPort))
	rc := redisClient(t, s.replica.addr)
	waitFor(t, 20*time.Second, "the replica in sync", func() bool {
		info, err := rc.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	for i := range 3 {
		port := testenv.FreePort(t)
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", i))
		// The sentinel rewrites its file with what it learns: it must be writable.
		text := strings.Join([]string{
			fmt.Sprintf("port %d", port), "bind 127.0.0.1", "dir " + dir,
			"logfile " + filepath.Join(dir, fmt.Sprintf("sentinel-%d.log", i)),
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", sentinelMaster, pPort),
			"sentinel down-after-milliseconds " + sentinelMaster + " 1000",
			"sentinel failover-timeout " + sentinelMaster + " 10000",
			"sentinel parallel-syncs " + sentinelMaster + " 1",
		}, "\n") + "\n"
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		s.sentinels = append(s.sentinels, startRedisProc(t, "redis-sentinel", port, conf))
	}
	for _, sp := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sp.addr})
		t.Cleanup(func() { sc.Close() })
		waitFor(t, 30*time.Second, "sentinel "+sp.addr+" knowing the replica and the other sentinels", func() bool {
			ctx := context.Background()
			reps, err1 := sc.Replicas(ctx, sentinelMaster).Result()
			sens, err2 := sc.Sentinels(ctx, sentinelMaster).Result()
			return err1 == nil && err2 == nil && len(reps) == 1 && len(sens) == 2
		})
	}
	return s
}

// sentinelAddrs is the comma list a gateway is given.
func (s *sentinelSet) sentinelAddrs() string {
	var addrs []string
	for _, sp := range s.sentinels {
		addrs = append(addrs, sp.addr)
	}
	return strings.Join(addrs, ",")
}

// masterAddr is the primary the first live sentinel names.
func (s *sentinelSet) masterAddr(ctx context.Context) string {
	for _, sp := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sp.addr})
		a, err := sc.GetMasterAddrByName(ctx, sentinelMaster).Result()
		sc.Close()
		if err == nil && len(a) == 2 {
			return a[0] + ":" + a[1]
		}
	}
	return ""
}

// loadResult is one request of the bot load.
type loadResult struct {
	start, end time.Time
	ok         bool
	what       string // the error: status and code, or transport
}

// ackedTurn is a message the gateway answered 200.
type ackedTurn struct {
	session string
	turn    int
	reply   string
}

// TestRedisSentinelFailover runs a gateway on a Redis primary with one
// replica and three sentinels (Debian's redis-sentinel), kills the primary
// (SIGKILL) under bot load and reports the errors players saw, the time
// until a request sent after the kill is answered again, and checks that no
// acknowledged turn is missing from its transcript or from Kafka and no
// started session's event is lost. The gateway follows the failover
// through go-redis' Sentinel client, without a restart, and answers only
// what the replica confirmed (ReplicaAcks 1, the default with Sentinel).
func TestRedisSentinelFailover(t *testing.T) {
	began := time.Now()
	// The processes' logs are printed when the test fails; the failures are
	// repeated after them, where a log's tail still shows them.
	var failures []string
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		failures = append(failures, msg)
		t.Error(msg)
	}
	t.Cleanup(func() {
		if len(failures) > 0 {
			t.Logf("FAILURES (%d):\n%s", len(failures), strings.Join(failures, "\n"))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	set := startSentinelSet(t)
	k := testenv.StartKafka(t)
	registry, dep := filepath.Join(t.TempDir(), "registry"), "faults-sentinel"
	testenv.PublishTinyModel(t, registry, "npc", "v1")
	spec := gatewaySpec{
		RedisAddr: set.sentinelAddrs(), RedisMaster: sentinelMaster, Registry: registry, DataDir: t.TempDir(),
		Addr: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)), Prefix: "parley-sentinel:", Deployment: dep,
		Instance: "gw-sentinel", Brokers: k.Addrs, Topic: k.Topic("sessions"), MaxTokens: 8,
		PollInterval: 200 * time.Millisecond, FleetTTL: 2 * time.Second,
	}
	gw := startGateway(t, spec)
	rdb := redisconn.Config{Addr: spec.RedisAddr, MasterName: sentinelMaster}.Open()
	t.Cleanup(func() { rdb.Close() })
	key, err := gateway.CreateKey(ctx, rdb, spec.Prefix, "game", gateway.RolePlayerClient)
	if err != nil {
		t.Fatal(err)
	}
	oldPrimary := set.masterAddr(ctx)

	const workers, turnsPerSession = 8, 4
	var (
		mu       sync.Mutex
		results  []loadResult
		acked    []ackedTurn
		sessions []string // created (201)
	)
	record := func(r loadResult) {
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for n := 0; loadCtx.Err() == nil; n++ {
				start := time.Now()
				sess, r := createSession(loadCtx, gw.base, key, fmt.Sprintf("player-%d", w))
				if loadCtx.Err() != nil {
					return
				}
				if r.status != http.StatusCreated {
					record(loadResult{start: start, end: time.Now(), what: failure(r)})
					time.Sleep(50 * time.Millisecond)
					continue
				}
				record(loadResult{start: start, end: time.Now(), ok: true})
				mu.Lock()
				sessions = append(sessions, sess.SessionID)
				mu.Unlock()
				for i := 0; i < turnsPerSession && loadCtx.Err() == nil; i++ {
					start := time.Now()
					msg, r := sendMessage(loadCtx, gw.base, key, sess.SessionID, fmt.Sprintf("Worker %d, message %d", w, i))
					if loadCtx.Err() != nil {
						return
					}
					if r.status != http.StatusOK {
						record(loadResult{start: start, end: time.Now(), what: failure(r)})
						time.Sleep(50 * time.Millisecond)
						continue
					}
					record(loadResult{start: start, end: time.Now(), ok: true})
					mu.Lock()
					acked = append(acked, ackedTurn{session: sess.SessionID, turn: msg.Turn, reply: msg.Reply})
					mu.Unlock()
				}
			}
		})
	}

	time.Sleep(3 * time.Second)
	set.primary.kill()
	killAt := time.Now()
	waitFor(t, time.Minute, "the sentinels promoting the replica", func() bool {
		a := set.masterAddr(ctx)
		return a != "" && a != oldPrimary
	})
	promotedAfter := time.Since(killAt)
	// Load goes on until requests flow again, and a few seconds more.
	waitFor(t, time.Minute, "a request sent after the kill answered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(results, func(r loadResult) bool { return r.ok && r.start.After(killAt) })
	})
	time.Sleep(3 * time.Second)
	stopLoad()
	wg.Wait()

	var before, after int
	var firstOK, lastErr time.Duration
	errs := map[string]int{}
	for _, r := range results {
		switch {
		case r.end.Before(killAt):
			before++
		case r.ok:
			after++
			if d := r.end.Sub(killAt); r.start.After(killAt) && (firstOK == 0 || d < firstOK) {
				firstOK = d
			}
		}
		if !r.ok {
			errs[r.what]++
			lastErr = max(lastErr, r.end.Sub(killAt))
		}
	}
	nErr := 0
	for what, n := range errs {
		nErr += n
		if !strings.HasPrefix(what, "503 unavailable") {
			fail("players saw %d × %s during the failover; want only 503 unavailable with Retry-After", n, what)
		}
	}
	t.Logf("FAILOVER: primary %s killed; sentinels promoted %s after %.2fs; first request sent after the kill answered %.2fs after it; "+
		"last error %.2fs after it; client errors %d of %d requests %v; %d requests answered before the kill, %d after",
		oldPrimary, set.masterAddr(ctx), promotedAfter.Seconds(), firstOK.Seconds(), lastErr.Seconds(),
		nErr, len(results), errs, before, after)

	// No acknowledged turn is lost: each is in its transcript, read through
	// the gateway from the promoted replica ...
	var lost int
	transcripts := map[string][]schema.Exchange{}
	for _, a := range acked {
		x, ok := transcripts[a.session]
		if !ok {
			view, r := getSession(ctx, gw.base, key, a.session)
			if r.status != http.StatusOK {
				fail("TURN LOST: session %s of an acknowledged turn: %v", a.session, r)
				lost++
				continue
			}
			x = view.Transcript
			transcripts[a.session] = x
		}
		if !slices.ContainsFunc(x, func(e schema.Exchange) bool { return e.Turn == a.turn && e.NPC == a.reply }) {
			fail("TURN LOST: session %s turn %d was answered 200 but its transcript lacks it", a.session, a.turn)
			lost++
		}
	}
	// ... and each is on the topic, with every session's start, once the
	// gateway has flushed its spool.
	if err := gw.stop(); err != nil {
		fail("gateway stop: %v", err)
	}
	c := countEvents(topicRecords(ctx, t, k.Addrs, spec.Topic))
	var lostEvents int
	for _, id := range sessions {
		evs := c.sessions[id]
		if !slices.ContainsFunc(evs, func(e schema.SessionEvent) bool { return e.Type == schema.SessionStarted }) {
			fail("EVENT LOST: session_started of %s", id)
			lostEvents++
		}
		if x, ok := transcripts[id]; ok {
			checkTurnEvents(t, "session "+id, evs, x)
		}
	}
	for _, a := range acked {
		if !slices.ContainsFunc(c.sessions[a.session], func(e schema.SessionEvent) bool {
			return e.Type == schema.TurnEvent && e.Turn == a.turn && e.NPCText == a.reply
		}) {
			fail("EVENT LOST: turn %d of session %s was answered 200 but has no event on the topic", a.turn, a.session)
			lostEvents++
		}
	}
	t.Logf("DURABILITY: %d sessions created, %d turns acknowledged; lost turns %d, lost events %d; topic %d records, %d duplicates",
		len(sessions), len(acked), lost, lostEvents, c.records, c.duplicates)
	if len(acked) == 0 || after == 0 {
		fail("the load made %d acknowledged turns, %d answers after the kill; want both > 0", len(acked), after)
	}
	t.Logf("runtime %.1fs", time.Since(began).Seconds())
}

// failure names a failed request: its status and error code, or the
// transport error.
func failure(r apiResult) string {
	if r.err != nil {
		return "transport error"
	}
	s := fmt.Sprintf("%d %s", r.status, r.code())
	if r.status == http.StatusServiceUnavailable && r.retryAfter == "" {
		s += " without Retry-After"
	}
	return s
}
