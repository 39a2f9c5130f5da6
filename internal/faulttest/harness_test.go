//go:build faults

package faulttest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/parleyhq/parley/internal/gatewayd"
	"github.com/parleyhq/parley/internal/telemetry"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

// childEnv names the environment variable that makes the test binary run
// one helper process (a gateway or a learner) instead of the tests; its
// value is the JSON of the helper's configuration.
const (
	childEnv     = "PARLEY_FAULTTEST_CHILD"
	childCfgEnv  = "PARLEY_FAULTTEST_CONFIG"
	childGateway = "gateway"
	childLearner = "learner"
)

// TestHelperProcess is not a test: run by a re-executed test binary with
// childEnv set, it becomes a gateway or learner process that the tests can
// SIGKILL for real. It exits when its work is done or on SIGTERM.
func TestHelperProcess(t *testing.T) {
	kind := os.Getenv(childEnv)
	if kind == "" {
		t.Skip("helper process for the fault tests; runs only when re-executed")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	switch kind {
	case childGateway:
		err = runGatewayChild(ctx, os.Getenv(childCfgEnv))
	case childLearner:
		err = runLearnerChild(ctx, os.Getenv(childCfgEnv))
	default:
		err = fmt.Errorf("unknown helper %q", kind)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper failed:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// gatewaySpec is what a gateway child needs; the rest is gatewayd's defaults.
type gatewaySpec struct {
	RedisAddr      string        `json:"redis_addr"`
	RedisMaster    string        `json:"redis_master,omitempty"` // Sentinel's name of the primary; RedisAddr lists the sentinels
	Registry       string        `json:"registry"`
	DataDir        string        `json:"data_dir"`
	Addr           string        `json:"addr"`
	Prefix         string        `json:"prefix"`
	Deployment     string        `json:"deployment"`
	Instance       string        `json:"instance"`
	Brokers        []string      `json:"brokers"`
	Topic          string        `json:"topic"`
	SpoolMaxBytes  int64         `json:"spool_max_bytes"`
	SegmentBytes   int64         `json:"segment_bytes"`
	MaxTokens      int           `json:"max_tokens"`
	Greedy         bool          `json:"greedy"`
	RequestTimeout time.Duration `json:"request_timeout"`
	PollInterval   time.Duration `json:"poll_interval"`
	FleetTTL       time.Duration `json:"fleet_ttl"`
}

func runGatewayChild(ctx context.Context, raw string) error {
	var s gatewaySpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return fmt.Errorf("gateway spec: %w", err)
	}
	cfg := gatewayd.DefaultConfig()
	cfg.RedisAddr, cfg.Registry, cfg.DataDir, cfg.Instance = s.RedisAddr, s.Registry, s.DataDir, s.Instance
	cfg.RedisMasterName = s.RedisMaster
	cfg.SessionLog.Brokers, cfg.SessionLog.Topic = s.Brokers, s.Topic
	cfg.SessionLog.RetryBackoffMax = time.Second
	if s.SpoolMaxBytes > 0 {
		cfg.SessionLog.SpoolMaxBytes, cfg.SessionLog.SegmentBytes = s.SpoolMaxBytes, s.SegmentBytes
	}
	cfg.Gateway.Addr, cfg.Gateway.KeyPrefix, cfg.Gateway.Deployment = s.Addr, s.Prefix, s.Deployment
	cfg.Gateway.Sampling.MaxTokens = s.MaxTokens
	if s.Greedy {
		cfg.Gateway.Sampling.Temperature = 0
	}
	cfg.Gateway.PlayerRate, cfg.Gateway.ClientRate = 0, 0
	if s.RequestTimeout > 0 {
		cfg.Gateway.RequestTimeout = s.RequestTimeout
	}
	if s.PollInterval > 0 {
		cfg.Rollout.PollInterval = s.PollInterval
	}
	if s.FleetTTL > 0 {
		cfg.Rollout.FleetTTL = s.FleetTTL
	}
	tcfg := telemetry.DefaultConfig()
	tcfg.LogLevel = "info"
	tel, err := telemetry.New(ctx, tcfg, os.Stderr)
	if err != nil {
		return err
	}
	return gatewayd.Run(ctx, cfg, tel)
}

// child is a helper process started from the test binary.
type child struct {
	t    *testing.T
	cmd  *exec.Cmd
	log  string // its stderr and stdout
	done chan struct{}
	err  error // of Wait, once done is closed
}

// startChild re-executes the test binary as helper kind with cfg.
func startChild(t *testing.T, kind, name string, cfg any) *child {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+kind, childCfgEnv+"="+string(raw))
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	c := &child{t: t, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		f.Close()
		close(c.done)
	}()
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			t.Logf("--- log of %s (last 4 KiB) ---\n%s", name, c.tail(4096))
		}
	})
	return c
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *child) kill() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// stop sends SIGTERM and waits up to 30 s for a clean exit.
func (c *child) stop() error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.err
	case <-time.After(30 * time.Second):
		c.kill()
		return errors.New("did not stop within 30s of SIGTERM")
	}
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *child) logText() string {
	b, _ := os.ReadFile(c.log)
	return string(b)
}

func (c *child) tail(n int) string {
	s := c.logText()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// stack is the servers of one test: Redis, a broker, a registry with v1.
type stack struct {
	redis    *testenv.Redis
	kafka    *testenv.Kafka
	registry string
	topic    string
	dep      string
}

func newStack(t *testing.T, dep string) *stack {
	t.Helper()
	s := &stack{redis: testenv.StartRedis(t), kafka: testenv.StartKafka(t),
		registry: filepath.Join(t.TempDir(), "registry"), dep: dep}
	s.topic = s.kafka.Topic("sessions")
	testenv.PublishTinyModel(t, s.registry, "npc", "v1")
	return s
}

// spec returns the gateway spec of instance on the stack's servers.
func (s *stack) spec(t *testing.T, instance string) gatewaySpec {
	return gatewaySpec{
		RedisAddr: s.redis.Addr, Registry: s.registry, DataDir: t.TempDir(),
		Addr:   "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)),
		Prefix: s.redis.Prefix, Deployment: s.dep, Instance: instance,
		Brokers: s.kafka.Addrs, Topic: s.topic, MaxTokens: 8,
		PollInterval: 200 * time.Millisecond, FleetTTL: 2 * time.Second,
	}
}

// gatewayProc is a gateway child process and its base URL.
type gatewayProc struct {
	*child
	spec gatewaySpec
	base string
}

// startGateway starts a gateway child and waits until /readyz answers 200.
func startGateway(t *testing.T, spec gatewaySpec) *gatewayProc {
	t.Helper()
	g := &gatewayProc{child: startChild(t, childGateway, spec.Instance, spec), spec: spec, base: "http://" + spec.Addr}
	g.waitReady(t, 90*time.Second)
	return g
}

func (g *gatewayProc) waitReady(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if g.exited() {
			t.Fatalf("gateway %s exited before ready: %v\n%s", g.spec.Instance, g.err, g.tail(4096))
		}
		if resp, err := http.Get(g.base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("gateway %s not ready within %v", g.spec.Instance, within)
}

// apiResult is one answer of the player API.
type apiResult struct {
	status     int
	retryAfter string // the Retry-After header
	body       []byte
	err        error // transport error
}

func (r apiResult) code() string {
	var eb schema.ErrorBody
	if json.Unmarshal(r.body, &eb) == nil {
		return eb.Error.Code
	}
	return ""
}

func (r apiResult) String() string {
	if r.err != nil {
		return "transport error: " + r.err.Error()
	}
	return fmt.Sprintf("%d %.300s", r.status, bytes.TrimSpace(r.body))
}

// call sends one JSON request with the key and returns the answer.
func call(ctx context.Context, method, url, key string, body any) apiResult {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return apiResult{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return apiResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return apiResult{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: b, err: err}
}

func createSession(ctx context.Context, base, key, player string) (schema.CreateSessionResponse, apiResult) {
	r := call(ctx, http.MethodPost, base+"/v1/sessions", key, schema.CreateSessionRequest{PlayerID: player})
	var out schema.CreateSessionResponse
	if r.err == nil && r.status == http.StatusCreated {
		_ = json.Unmarshal(r.body, &out)
	}
	return out, r
}

func sendMessage(ctx context.Context, base, key, id, text string) (schema.MessageResponse, apiResult) {
	r := call(ctx, http.MethodPost, base+"/v1/sessions/"+id+"/messages", key, schema.MessageRequest{Text: text})
	var out schema.MessageResponse
	if r.err == nil && r.status == http.StatusOK {
		_ = json.Unmarshal(r.body, &out)
	}
	return out, r
}

func getSession(ctx context.Context, base, key, id string) (schema.SessionView, apiResult) {
	r := call(ctx, http.MethodGet, base+"/v1/sessions/"+id, key, nil)
	var out schema.SessionView
	if r.err == nil && r.status == http.StatusOK {
		_ = json.Unmarshal(r.body, &out)
	}
	return out, r
}

// metric returns the sum of the samples of a Prometheus metric in the
// gateway's /metrics text (name without labels, e.g.
// "parley_sessionlog_spool_full_total"); -1 when it is absent.
func (g *gatewayProc) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(g.base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sum, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err == nil {
			sum, found = sum+v, true
		}
	}
	if !found {
		return -1
	}
	return sum
}

// waitFor polls cond every 100 ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// topicRecords reads every record of topic from the start of each
// partition to its current end.
func topicRecords(ctx context.Context, t *testing.T, brokers []string, topic string) []schema.SessionEvent {
	t.Helper()
	conn, err := kafka.DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		t.Fatalf("dial broker: %v", err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		t.Fatalf("partitions of %s: %v", topic, err)
	}
	var (
		mu  sync.Mutex
		out []schema.SessionEvent
		wg  sync.WaitGroup
	)
	for _, p := range parts {
		wg.Go(func() {
			lc, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, p.ID)
			if err != nil {
				t.Errorf("dial partition %d: %v", p.ID, err)
				return
			}
			first, last, err := lc.ReadOffsets()
			lc.Close()
			if err != nil {
				t.Errorf("offsets of partition %d: %v", p.ID, err)
				return
			}
			if last <= first {
				return
			}
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p.ID, MaxWait: 200 * time.Millisecond})
			defer r.Close()
			if err := r.SetOffset(first); err != nil {
				t.Errorf("seek partition %d: %v", p.ID, err)
				return
			}
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					t.Errorf("read partition %d at offset %d of %d: %v", p.ID, r.Offset(), last, err)
					return
				}
				var ev schema.SessionEvent
				if err := json.Unmarshal(m.Value, &ev); err != nil {
					t.Errorf("record %d/%d is not an event: %v", p.ID, m.Offset, err)
				} else {
					mu.Lock()
					out = append(out, ev)
					mu.Unlock()
				}
				if m.Offset >= last-1 {
					return
				}
			}
		})
	}
	wg.Wait()
	return out
}

// eventCount is what a topic holds, deduplicated on event_id.
type eventCount struct {
	records    int
	unique     int
	duplicates int
	byType     map[schema.EventType]int
	sessions   map[string][]schema.SessionEvent // unique events by session
}

func countEvents(evs []schema.SessionEvent) eventCount {
	c := eventCount{records: len(evs), byType: map[schema.EventType]int{}, sessions: map[string][]schema.SessionEvent{}}
	seen := map[string]bool{}
	for _, ev := range evs {
		if seen[ev.EventID] {
			c.duplicates++
			continue
		}
		seen[ev.EventID] = true
		c.unique++
		c.byType[ev.Type]++
		c.sessions[ev.SessionID] = append(c.sessions[ev.SessionID], ev)
	}
	return c
}

// redisClient returns a client on the stack's Redis that does not retry.
func redisClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// checkTurnEvents asserts the gateway's logging guarantee for one session
// (gateway/handlers.go messageHandler makes a turn's events durable before
// it saves the turn): every exchange of the transcript has a turn event, and
// of several events for one turn the latest is the exchange the transcript
// kept. Several events for a turn come from a gateway that logged the turn
// and died (or failed) before saving it, and the retry that logged the same
// turn number again; an event for a turn the transcript lacks is such a
// turn without a retry. It returns how many events a later one superseded
// and how many turns were logged but not saved.
func checkTurnEvents(t testing.TB, what string, evs []schema.SessionEvent, transcript []schema.Exchange) (superseded, unsaved int) {
	t.Helper()
	latest := map[int]schema.SessionEvent{}
	for _, ev := range evs {
		if ev.Type != schema.TurnEvent {
			continue
		}
		if cur, ok := latest[ev.Turn]; ok {
			superseded++
			if !ev.TS.After(cur.TS) {
				continue
			}
		}
		latest[ev.Turn] = ev
	}
	unsaved = len(latest)
	for _, x := range transcript {
		ev, ok := latest[x.Turn]
		if !ok {
			t.Errorf("EVENT LOST: %s: turn %d is in the transcript but no turn event for it is on the topic; "+
				"gateway/handlers.go messageHandler must make a turn's events durable before it saves the turn", what, x.Turn)
			continue
		}
		unsaved--
		got := schema.Exchange{Turn: ev.Turn, User: ev.UserText, NPC: ev.NPCText, Safety: ev.Safety}
		if got != x {
			t.Errorf("%s: the latest event of turn %d is %+v but the transcript kept %+v; consumers keep a turn's latest event, "+
				"so it must be the saved exchange", what, x.Turn, got, x)
		}
	}
	return superseded, unsaved
}
