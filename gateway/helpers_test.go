package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

// recorder is an EventSink that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []schema.SessionEvent
	fail   error
}

func (r *recorder) Publish(_ context.Context, ev schema.SessionEvent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.events = append(r.events, ev)
	return nil
}

func (r *recorder) all() []schema.SessionEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]schema.SessionEvent(nil), r.events...)
}

func (r *recorder) ofType(typ schema.EventType) []schema.SessionEvent {
	var out []schema.SessionEvent
	for _, ev := range r.all() {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

var testTexts = []string{
	"Welcome back, traveller! The inn has warm bread and cold ale tonight.",
	"I have not seen the dragon since the winter. Ask the guard at the gate.",
	"Where are we heading today? The forest road is quiet, the mountain pass is not.",
	"Tell me about your home. Do you miss it when we are on the road?",
}

// testTokenizer is a small byte-level BPE trained on a few sentences.
func testTokenizer(t testing.TB) *inference.Tokenizer {
	t.Helper()
	tok, err := inference.TrainTokenizer(testTexts, 320)
	if err != nil {
		t.Fatalf("TrainTokenizer: %v", err)
	}
	return tok
}

// startEngine runs the real inference engine over a tiny randomly
// initialised model until the test ends.
func startEngine(t testing.TB, ecfg inference.EngineConfig) *inference.Engine {
	t.Helper()
	tok := testTokenizer(t)
	mcfg := inference.ModelConfig{VocabSize: tok.VocabSize(), Dim: 32, Layers: 1, Heads: 2, FFNDim: 64,
		MaxSeq: 256, RopeBase: 10000, NormEps: 1e-5}
	m, err := inference.NewModel(mcfg, inference.DefaultBackendConfig(), 7)
	if err != nil {
		t.Fatalf("NewModel: %v", err)
	}
	e, err := inference.NewEngine(m, tok, ecfg, nil)
	if err != nil {
		t.Fatalf("NewEngine: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("engine Run = %v; want nil", err)
		}
		_ = e.Close()
	})
	return e
}

// testConfig is a seeded (repeatable) configuration with a short persona card that fits
// the tiny model's context.
func testConfig(prefix string) Config {
	cfg := DefaultConfig()
	cfg.KeyPrefix = prefix
	cfg.Sampling = Sampling{MaxTokens: 12, Temperature: 1, TopK: 0, TopP: 1, Seed: 42}
	cfg.Personas = map[string]Persona{
		"mira": {Name: "Mira", Card: "You are Mira, a warm companion in a fantasy game. Keep replies short.",
			Greeting: "Welcome back, traveller!"},
		"guard": {Name: "Guard", Card: "You are the gate guard. Be brief."},
	}
	cfg.DefaultNPC = "mira"
	cfg.PlayerRate, cfg.PlayerBurst = 1000, 1000
	cfg.ClientRate, cfg.ClientBurst = 1000, 1000
	return cfg
}

// clock is a settable time source.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// env is one gateway under test on a real port, with its Redis and sink.
type env struct {
	t      *testing.T
	srv    *Server
	http   *httptest.Server
	redis  *testenv.Redis
	events *recorder
	clock  *clock
	key    string // a player-client key of client "game-a"
}

type envOpt func(*Config, *Deps)

func newEnv(t *testing.T, gen Generator, opts ...envOpt) *env {
	t.Helper()
	r := testenv.StartRedis(t)
	return newEnvOn(t, r, &recorder{}, &clock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}, gen, opts...)
}

// newEnvOn starts another gateway on the same Redis, sink and clock.
func newEnvOn(t *testing.T, r *testenv.Redis, rec *recorder, clk *clock, gen Generator, opts ...envOpt) *env {
	t.Helper()
	cfg := testConfig(r.Prefix)
	deps := Deps{Redis: r.Client, Events: rec, Engine: gen, Now: clk.Now}
	for _, o := range opts {
		o(&cfg, &deps)
	}
	s, err := New(cfg, deps)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	e := &env{t: t, srv: s, http: hs, redis: r, events: rec, clock: clk}
	e.key = e.newKey("game-a", RolePlayerClient)
	return e
}

func (e *env) newKey(client string, role Role) string {
	e.t.Helper()
	k, err := CreateKey(context.Background(), e.redis.Client, e.redis.Prefix, client, role)
	if err != nil {
		e.t.Fatalf("CreateKey: %v", err)
	}
	return k
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (e *env) do(method, path, key string, body any, hdr ...string) response {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.http.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// decode unmarshals the response into v after checking its status.
func (r response) decode(t *testing.T, want int, v any) {
	t.Helper()
	if r.status != want {
		t.Fatalf("status %d; want %d; body %s", r.status, want, r.body)
	}
	if v != nil {
		if err := json.Unmarshal(r.body, v); err != nil {
			t.Fatalf("decode %s: %v", r.body, err)
		}
	}
}

func (e *env) createSession(key, player string) schema.CreateSessionResponse {
	e.t.Helper()
	var out schema.CreateSessionResponse
	e.do("POST", "/v1/sessions", key, schema.CreateSessionRequest{PlayerID: player}).decode(e.t, http.StatusCreated, &out)
	return out
}

func (e *env) say(key, sessionID, text string) schema.MessageResponse {
	e.t.Helper()
	var out schema.MessageResponse
	e.do("POST", "/v1/sessions/"+sessionID+"/messages", key, schema.MessageRequest{Text: text}).decode(e.t, http.StatusOK, &out)
	return out
}

// sseEvent is one server-sent event.
type sseEvent struct {
	name, data string
}

func parseSSE(t *testing.T, body []byte) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data != "" || cur.name != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return out
}

// tcpProxy forwards loopback connections to a server; while cut it closes
// them all and refuses new ones, as a server that went away would.
type tcpProxy struct {
	addr  string
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func startTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			var u net.Conn
			if !p.cut {
				u, _ = net.Dial("tcp", target) // a failed dial closes the client below
			}
			if u == nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	return p
}

// setCut cuts the proxy (closing every connection) or mends it.
func (p *tcpProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}
