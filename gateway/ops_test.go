package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/internal/telemetry"
	"github.com/parleyhq/parley/schema"
)

func TestOpsEndpoints(t *testing.T) {
	tel, err := telemetry.New(context.Background(), telemetry.DefaultConfig(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, FromEngine(startEngine(t, inference.DefaultEngineConfig())), func(_ *Config, d *Deps) {
		d.MeterProvider, d.TracerProvider, d.MetricsHandler = tel.MeterProvider, tel.TracerProvider, tel.MetricsHandler
	})
	for _, path := range []string{"/healthz", "/readyz"} {
		if r := e.do("GET", path, "", nil); r.status != http.StatusOK {
			t.Errorf("GET %s = %d %s; want 200", path, r.status, r.body)
		}
	}
	s := e.createSession(e.key, "player-1")
	e.say(e.key, s.SessionID, "hello")
	r := e.do("GET", "/metrics", "", nil)
	for _, want := range []string{`parley_gateway_requests`, `route="/v1/sessions/:id/messages"`, `parley_gateway_turns`,
		`parley_gateway_sessions_active{`} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !regexp.MustCompile(`(?m)^parley_gateway_sessions_active\{.*\} 1$`).Match(r.body) {
		t.Error("/metrics does not count the one active session")
	}
	if strings.Contains(string(r.body), "player-1") || strings.Contains(string(r.body), s.SessionID) {
		t.Error("/metrics names a player or a session")
	}
	ops := e.newKey("ops", RoleLiveOps)
	var st AdminStatus
	e.do("GET", "/admin/v1/status", ops, nil).decode(t, http.StatusOK, &st)
	if st.ActiveSessions != 1 || st.PolicyVersion != "v0" {
		t.Errorf("admin status = %+v; want 1 active session on v0", st)
	}
}

func TestAPIKeys(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	k2 := e.newKey("studio", RoleAdmin)
	if _, err := CreateKey(ctx, e.redis.Client, e.redis.Prefix, "bad id", RoleAdmin); err == nil {
		t.Error("CreateKey with a space in the client id succeeded")
	}
	if _, err := CreateKey(ctx, e.redis.Client, e.redis.Prefix, "x", Role("root")); err == nil {
		t.Error("CreateKey with role root succeeded")
	}
	keys, err := ListKeys(ctx, e.redis.Client, e.redis.Prefix)
	if err != nil || len(keys) != 2 || keys[0].ClientID != "game-a" || keys[1].Role != RoleAdmin {
		t.Fatalf("ListKeys = %+v, %v; want game-a and studio", keys, err)
	}
	if r := e.do("GET", "/admin/v1/status", k2, nil); r.status != http.StatusOK {
		t.Errorf("admin key on admin route = %d; want 200", r.status)
	}
	if err := RevokeKey(ctx, e.redis.Client, e.redis.Prefix, keys[1].ID); err != nil {
		t.Fatalf("RevokeKey by id: %v", err)
	}
	e.clock.Advance(e.srv.cfg.KeyCacheTTL) // a revoked key works until its cache entry expires
	assertError(t, e.do("GET", "/admin/v1/status", k2, nil), http.StatusUnauthorized, "unauthorized")
	if err := RevokeKey(ctx, e.redis.Client, e.redis.Prefix, e.key); err != nil {
		t.Fatalf("RevokeKey by key: %v", err)
	}
	if err := RevokeKey(ctx, e.redis.Client, e.redis.Prefix, e.key); !errors.Is(err, ErrKeyNotFound) {
		t.Errorf("RevokeKey twice = %v; want ErrKeyNotFound", err)
	}
}

// slowGenerator wraps the real engine and holds a reply back after its
// first token until the request is cancelled or release is closed.
type slowGenerator struct {
	Generator
	started   chan struct{} // closed when Generate is first called
	release   chan struct{}
	cancelled atomic.Bool
	once      atomic.Bool
}

func newSlow(g Generator) *slowGenerator {
	return &slowGenerator{Generator: g, started: make(chan struct{}), release: make(chan struct{})}
}

func (g *slowGenerator) Generate(ctx context.Context, req GenerateRequest) (TokenStream, error) {
	st, err := g.Generator.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	if g.once.CompareAndSwap(false, true) {
		close(g.started)
	}
	return &slowStream{TokenStream: st, ctx: ctx, g: g}, nil
}

type slowStream struct {
	TokenStream
	ctx  context.Context
	g    *slowGenerator
	sent int
}

func (s *slowStream) Next() (string, bool) {
	if s.sent == 1 {
		select {
		case <-s.ctx.Done():
			s.g.cancelled.Store(true)
		case <-s.g.release:
		}
	}
	s.sent++
	return s.TokenStream.Next()
}

func TestClientDisconnectCancelsGeneration(t *testing.T) {
	slow := newSlow(FromEngine(startEngine(t, inference.DefaultEngineConfig())))
	e := newEnv(t, slow)
	s := e.createSession(e.key, "player-1")

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", e.http.URL+"/v1/sessions/"+s.SessionID+"/messages",
		strings.NewReader(`{"text":"hello"}`))
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "event: token\n" {
		t.Fatalf("first line %q, %v; want a token event", line, err)
	}
	cancel()
	resp.Body.Close()

	// The session is free again once the handler has seen the cancel, and the
	// abandoned turn was neither stored nor logged.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := e.do("GET", "/v1/sessions/"+s.SessionID, e.key, nil)
		locked, _ := e.redis.Client.Exists(context.Background(), e.srv.lockKey(s.SessionID)).Result()
		if locked == 0 {
			var v schema.SessionView
			r.decode(t, http.StatusOK, &v)
			if v.Turns != 0 {
				t.Errorf("turns after a disconnect = %d; want 0", v.Turns)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the turn lock was not released within 30s of the disconnect")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !slow.cancelled.Load() {
		t.Error("the generation's context was not cancelled by the disconnect")
	}
	if n := len(e.events.ofType(schema.TurnEvent)); n != 0 {
		t.Errorf("%d turn events after a disconnect; want 0", n)
	}
}

func TestShutdownFinishesInFlightStreams(t *testing.T) {
	slow := newSlow(FromEngine(startEngine(t, inference.DefaultEngineConfig())))
	e := newEnv(t, slow)
	s := e.createSession(e.key, "player-1")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()

	type result struct {
		status int
		body   string
		err    error
	}
	got := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("POST", url+"/v1/sessions/"+s.SessionID+"/messages", strings.NewReader(`{"text":"hello"}`))
		req.Header.Set("Authorization", "Bearer "+e.key)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- result{status: resp.StatusCode, body: string(b), err: err}
	}()
	<-slow.started
	stop()
	// Wait until the server has stopped accepting, then let the reply finish.
	for {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	close(slow.release)
	r := <-got
	if r.err != nil || r.status != http.StatusOK || !strings.Contains(r.body, "event: done") {
		t.Errorf("in-flight stream during shutdown: %d %v %q; want 200 ending with done", r.status, r.err, r.body)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve = %v; want nil after a graceful shutdown", err)
	}
	if n := len(e.events.ofType(schema.TurnEvent)); n != 1 {
		t.Errorf("%d turn events; want the in-flight turn logged", n)
	}
}

func TestRequestTimeout(t *testing.T) {
	slow := newSlow(FromEngine(startEngine(t, inference.DefaultEngineConfig())))
	e := newEnv(t, slow, func(c *Config, _ *Deps) { c.RequestTimeout = 50 * time.Millisecond })
	s := e.createSession(e.key, "player-1")
	assertError(t, e.do("POST", "/v1/sessions/"+s.SessionID+"/messages", e.key, schema.MessageRequest{Text: "hello"}),
		http.StatusGatewayTimeout, "timeout")
	if n := len(e.events.ofType(schema.TurnEvent)); n != 0 {
		t.Errorf("%d turn events after a timeout; want 0", n)
	}
}

func TestSpansAreNamedAfterTheRoute(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	e := newEnv(t, FromEngine(startEngine(t, inference.DefaultEngineConfig())), func(_ *Config, d *Deps) { d.TracerProvider = tp })
	s := e.createSession(e.key, "player-secret")
	e.say(e.key, s.SessionID, "my secret message")
	names := map[string]bool{}
	for _, sp := range rec.Ended() {
		names[sp.Name()] = true
		for _, a := range sp.Attributes() {
			v := a.Value.String()
			if strings.Contains(v, "secret") { // the player id and the message
				t.Errorf("span %s attribute %s = %q carries player data", sp.Name(), a.Key, v)
			}
		}
	}
	for _, want := range []string{"POST /v1/sessions", "POST /v1/sessions/:id/messages"} {
		if !names[want] {
			t.Errorf("no span named %q; got %v", want, names)
		}
	}
}

func TestRedisDownIsUnavailable(t *testing.T) {
	e := newEnv(t, FromEngine(startEngine(t, inference.DefaultEngineConfig())))
	s := e.createSession(e.key, "player-1")
	e.say(e.key, s.SessionID, "hello")
	e.redis.Stop()
	for _, path := range []string{"/readyz", "/v1/sessions/" + s.SessionID} {
		r := e.do("GET", path, e.key, nil)
		assertError(t, r, http.StatusServiceUnavailable, "unavailable")
		if strings.Contains(string(r.body), "127.0.0.1") {
			t.Errorf("GET %s: the error names an internal address: %s", path, r.body)
		}
		if r.header.Get("Retry-After") == "" {
			t.Errorf("GET %s: no Retry-After on 503", path)
		}
	}
	if r := e.do("GET", "/healthz", "", nil); r.status != http.StatusOK {
		t.Errorf("healthz with Redis down = %d; want 200 (the process is alive)", r.status)
	}
	e.redis.Start()
	if r := e.do("GET", "/readyz", "", nil); r.status != http.StatusOK {
		t.Errorf("readyz after Redis returned = %d; want 200", r.status)
	}
}

func TestPanicBecomesA500(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.echo.GET("/boom", func(echo.Context) error { panic("boom") })
	assertError(t, e.do("GET", "/boom", "", nil), http.StatusInternalServerError, "internal")
	if r := e.do("GET", "/healthz", "", nil); r.status != http.StatusOK {
		t.Errorf("healthz after a panic = %d; want 200", r.status)
	}
}

func TestAdminGroupAndPublicMount(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.Admin().POST("/whoami", func(c echo.Context) error { return c.String(http.StatusOK, Caller(c)) })
	e.srv.MountPublic(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("dashboard " + r.URL.Path))
	}), "/admin", "/admin/app.js")
	ops := e.newKey("ops-team", RoleLiveOps)
	if r := e.do("POST", "/admin/v1/whoami", ops, nil); r.status != http.StatusOK || string(r.body) != "ops-team" {
		t.Errorf("admin route with a live-ops key = %d %q; want 200 ops-team", r.status, r.body)
	}
	assertError(t, e.do("POST", "/admin/v1/whoami", e.key, nil), http.StatusForbidden, "forbidden")
	assertError(t, e.do("POST", "/admin/v1/whoami", "", nil), http.StatusUnauthorized, "unauthorized")
	for _, p := range []string{"/admin", "/admin/app.js"} {
		if r := e.do("GET", p, "", nil); r.status != http.StatusOK || string(r.body) != "dashboard "+p {
			t.Errorf("GET %s = %d %q; want the public handler", p, r.status, r.body)
		}
	}
	// Paths below the mount stay with their owners: a wrong method on an
	// admin route is 405, an unknown one 404, never the public page.
	assertError(t, e.do("GET", "/admin/v1/whoami", ops, nil), http.StatusMethodNotAllowed, "method_not_allowed")
	assertError(t, e.do("GET", "/admin/v1/nothing", ops, nil), http.StatusNotFound, "not_found")
}
