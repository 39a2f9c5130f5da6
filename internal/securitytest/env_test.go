package securitytest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/internal/gatewayd"
	"github.com/parleyhq/parley/internal/telemetry"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

// Limits of the gateway under test; the cases are sized from them.
const (
	playerBurst     = 5
	maxBodyBytes    = 64 << 10
	maxMessageBytes = 2000
)

// env is one running gateway process and the keys of its clients.
type env struct {
	base   string
	client *http.Client
	rds    *testenv.Redis
	kafka  *testenv.Kafka
	topic  string
	logs   *testenv.LogBuffer

	// Keys: a game client, a second game client, live-ops, admin, and a
	// key that was revoked.
	game, rival, ops, admin, revoked string
}

// startGateway runs gatewayd.Run until the test ends and waits for /readyz.
func startGateway(t *testing.T) *env {
	t.Helper()
	rds, k := testenv.StartRedis(t), testenv.StartKafka(t)
	ctx := context.Background()

	cfg := gatewayd.DefaultConfig()
	cfg.RedisAddr, cfg.Registry, cfg.DataDir = rds.Addr, filepath.Join(t.TempDir(), "registry"), t.TempDir()
	cfg.SessionLog.Brokers, cfg.SessionLog.Topic = k.Addrs, k.Topic("sessions")
	cfg.Gateway.Addr = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	cfg.Gateway.KeyPrefix, cfg.Gateway.Deployment = rds.Prefix, "sec"
	cfg.Gateway.Sampling.MaxTokens = 8
	cfg.Gateway.MaxBodyBytes, cfg.Gateway.MaxMessageBytes = maxBodyBytes, maxMessageBytes
	// The client bucket is wide so that only the player bucket limits.
	cfg.Gateway.ClientRate, cfg.Gateway.ClientBurst = 10000, 100000
	cfg.Gateway.PlayerRate, cfg.Gateway.PlayerBurst = 1, playerBurst
	cfg.Instance = "gw-sec"
	testenv.PublishTinyModel(t, cfg.Registry, "npc", "v1")

	logs := &testenv.LogBuffer{}
	tel, err := telemetry.New(ctx, telemetry.DefaultConfig(), logs)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{
		base: "http://" + cfg.Gateway.Addr, rds: rds, kafka: k, topic: cfg.SessionLog.Topic, logs: logs,
		// A fresh connection per request: a 413 closes its connection, and
		// no case should ride on the state another left behind.
		client: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
	}
	testenv.Serve(ctx, t, e.base+"/readyz", func(ctx context.Context) error { return gatewayd.Run(ctx, cfg, tel) })

	mk := func(client string, role gateway.Role) string {
		key, err := gateway.CreateKey(ctx, rds.Client, rds.Prefix, client, role)
		if err != nil {
			t.Fatal(err)
		}
		return key
	}
	e.game, e.rival = mk("game", gateway.RolePlayerClient), mk("rival", gateway.RolePlayerClient)
	e.ops, e.admin = mk("ops", gateway.RoleLiveOps), mk("root", gateway.RoleAdmin)
	e.revoked = mk("gone", gateway.RolePlayerClient)
	if err := gateway.RevokeKey(ctx, rds.Client, rds.Prefix, e.revoked); err != nil {
		t.Fatal(err)
	}
	return e
}

// httpCase is one request and the status and error code it must get.
type httpCase struct {
	name   string
	method string
	path   string // may hold %-escapes; sent as written
	key    string // bearer key; "" sends no Authorization
	header map[string]string
	body   string
	status int
	// code is the error code of the JSON error body (statuses >= 400).
	code string
}

// response is what came back for one case.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends c and returns its response; a transport error ends the test.
func (e *env) do(t *testing.T, c httpCase) response {
	t.Helper()
	r, err := e.send(c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// send sends c and returns its response, for goroutines (which must not
// end the test).
func (e *env) send(c httpCase) (response, error) {
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, e.base+c.path, body)
	if err != nil {
		return response{}, fmt.Errorf("build request %s %.120s: %w", c.method, c.path, err)
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %.120s: %w", c.method, c.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return response{}, fmt.Errorf("read response of %s %.120s: %w", c.method, c.path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// run sends each case, checks its status and error body, and checks that
// the gateway still answers /healthz afterwards.
func (e *env) run(t *testing.T, cases []httpCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, c)
			t.Logf("%s %.80s → %d %s", c.method, c.path, r.status, errorCode(r))
			e.check(t, c, r)
			e.healthy(t)
		})
	}
}

// check compares a response with its case: the status, and for an error
// the JSON body {error:{code,message}} with the case's code.
func (e *env) check(t *testing.T, c httpCase, r response) {
	t.Helper()
	if r.status >= 500 && r.status != http.StatusServiceUnavailable && r.status != http.StatusGatewayTimeout {
		t.Errorf("%s %.120s = %d %.300s; a server error (want %d)", c.method, c.path, r.status, r.body, c.status)
		return
	}
	if r.status != c.status {
		t.Errorf("%s %.120s = %d %.300s; want %d", c.method, c.path, r.status, r.body, c.status)
		return
	}
	if r.status < 400 {
		return
	}
	checkErrorBody(t, r, c.code)
}

func checkErrorBody(t *testing.T, r response, code string) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error response Content-Type = %q; want application/json", ct)
	}
	var eb schema.ErrorBody
	if err := json.Unmarshal(r.body, &eb); err != nil {
		t.Errorf("error body %.300q is not JSON: %v", r.body, err)
		return
	}
	if err := eb.Validate(); err != nil {
		t.Errorf("error body %.300s: %v", r.body, err)
	}
	if code != "" && eb.Error.Code != code {
		t.Errorf("error code = %q (%s); want %q", eb.Error.Code, eb.Error.Message, code)
	}
	if r.status == http.StatusTooManyRequests || r.status == http.StatusServiceUnavailable {
		if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 {
			t.Errorf("status %d with Retry-After %q; want a whole number of seconds >= 1", r.status, r.header.Get("Retry-After"))
		}
	}
}

// healthy checks that the process still serves.
func (e *env) healthy(t *testing.T) {
	t.Helper()
	resp, err := e.client.Get(e.base + "/healthz")
	if err != nil {
		t.Fatalf("gateway stopped serving: GET /healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz = %d; want 200", resp.StatusCode)
	}
}

// rawCase is a request written byte for byte to a TCP connection, for what
// an HTTP client refuses to send (CR or LF in a header, a bad Host).
// Requests that net/http itself rejects get its plain-text 400 (or 431),
// not the gateway's JSON: only the status is checked for them.
type rawCase struct {
	name    string
	request string
	status  int
	// jsonError asks for the gateway's JSON error body as well.
	jsonError bool
	code      string
}

// raw sends the bytes of c and reads one response.
func (e *env) raw(t *testing.T, request string) response {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(e.base, "http://"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatalf("write raw request: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read response to %.120q: %v", request, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (e *env) runRaw(t *testing.T, cases []rawCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.raw(t, c.request)
			t.Logf("raw → %d %s", r.status, errorCode(r))
			if r.status != c.status {
				t.Errorf("raw %.160q = %d %.300s; want %d", c.request, r.status, r.body, c.status)
			} else if c.jsonError {
				checkErrorBody(t, r, c.code)
			}
			e.healthy(t)
		})
	}
}

// createSession starts a session of player as the client of key.
func (e *env) createSession(t *testing.T, key, player string) string {
	t.Helper()
	r := e.do(t, httpCase{method: "POST", path: "/v1/sessions", key: key, body: `{"player_id":"` + player + `"}`})
	if r.status != http.StatusCreated {
		t.Fatalf("create session of %s = %d %s; want 201", player, r.status, r.body)
	}
	var cr schema.CreateSessionResponse
	if err := json.Unmarshal(r.body, &cr); err != nil || cr.SessionID == "" {
		t.Fatalf("create session response %s: %v", r.body, err)
	}
	return cr.SessionID
}

// say sends text in session sid and returns the reply.
func (e *env) say(t *testing.T, key, sid, text string) schema.MessageResponse {
	t.Helper()
	b, _ := json.Marshal(schema.MessageRequest{Text: text})
	r := e.do(t, httpCase{method: "POST", path: "/v1/sessions/" + sid + "/messages", key: key, body: string(b)})
	if r.status != http.StatusOK {
		t.Fatalf("message %q = %d %s; want 200", text, r.status, r.body)
	}
	var mr schema.MessageResponse
	if err := json.Unmarshal(r.body, &mr); err != nil {
		t.Fatalf("message response %s: %v", r.body, err)
	}
	return mr
}

// snapshotRollout saves the deployment's rollout keys in Redis and returns
// a func that puts them back as they were.
func (e *env) snapshotRollout(t *testing.T) func() {
	t.Helper()
	ctx := context.Background()
	keys, err := e.rds.Client.Keys(ctx, e.rds.Prefix+"rollout:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("rollout keys under %s: %v %v", e.rds.Prefix, keys, err)
	}
	dumps := map[string]string{}
	for _, k := range keys {
		if d, err := e.rds.Client.Dump(ctx, k).Result(); err == nil {
			dumps[k] = d
		}
	}
	return func() {
		now, _ := e.rds.Client.Keys(ctx, e.rds.Prefix+"rollout:*").Result()
		if len(now) > 0 {
			e.rds.Client.Del(ctx, now...)
		}
		for k, d := range dumps {
			if err := e.rds.Client.RestoreReplace(ctx, k, 0, d).Err(); err != nil {
				t.Errorf("restore %s: %v", k, err)
			}
		}
	}
}

// errorCode is the code of a JSON error body, or "" for any other body.
func errorCode(r response) string {
	var eb schema.ErrorBody
	if r.status < 400 || json.Unmarshal(r.body, &eb) != nil {
		return ""
	}
	return eb.Error.Code
}
