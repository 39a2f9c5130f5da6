package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/internal/gatewayd"
	"github.com/parleyhq/parley/internal/telemetry"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

// sdkResult is what testdata/openai-sdk/compat.cjs prints.
type sdkResult struct {
	SDKVersion string   `json:"sdkVersion"`
	Models     []string `json:"models"`
	Completion struct {
		Object, Content, Finish, Session string
		Usage                            schema.ChatUsage
	} `json:"completion"`
	Stream struct {
		Chunks          int
		Content, Finish string
		Usage           *struct {
			schema.ChatUsage
			Choices int `json:"choices"`
		}
	} `json:"stream"`
	Single struct{ Content string } `json:"single"`
	Errors map[string]struct {
		Class      string `json:"class"`
		Status     int    `json:"status"`
		Message    string `json:"message"`
		IsAPIError bool   `json:"isAPIError"`
	} `json:"errors"`
}

// TestOpenAISDK drives a real gateway process on a real port with the
// official OpenAI SDK for Node (npm openai, installed by .ci/run): models,
// a completion and a stream with usage in a session named by
// X-Parley-Session, a one-exchange session, and errors as the SDK's typed
// exceptions. It then reads the session events back from Kafka.
func TestOpenAISDK(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gateway process and node")
	}
	sdk := testenv.NPMPackage(t, "openai")
	rds, k := testenv.StartRedis(t), testenv.StartKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cfg := gatewayd.DefaultConfig()
	cfg.RedisAddr, cfg.Registry, cfg.DataDir = rds.Addr, filepath.Join(t.TempDir(), "registry"), t.TempDir()
	cfg.SessionLog.Brokers, cfg.SessionLog.Topic = k.Addrs, k.Topic("sessions")
	cfg.Gateway.Addr = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	cfg.Gateway.KeyPrefix, cfg.Gateway.Deployment = rds.Prefix, "sdk"
	cfg.Gateway.Sampling.MaxTokens = 8
	cfg.Instance = "gw-sdk"
	testenv.PublishTinyModel(t, cfg.Registry, "npc", "v1")
	tel, err := telemetry.New(ctx, telemetry.DefaultConfig(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + cfg.Gateway.Addr
	testenv.Serve(ctx, t, base+"/readyz", func(ctx context.Context) error { return gatewayd.Run(ctx, cfg, tel) })
	key, err := gateway.CreateKey(ctx, rds.Client, rds.Prefix, "game", gateway.RolePlayerClient)
	if err != nil {
		t.Fatal(err)
	}
	rivalKey, err := gateway.CreateKey(ctx, rds.Client, rds.Prefix, "rival", gateway.RolePlayerClient)
	if err != nil {
		t.Fatal(err)
	}

	sessionID := uuid.Must(uuid.NewV7()).String()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "openai-sdk", "compat.cjs"))
	cmd.Env = append(os.Environ(), "OPENAI_SDK="+sdk, "PARLEY_URL="+base, "PARLEY_KEY="+key,
		"PARLEY_RIVAL_KEY="+rivalKey, "PARLEY_SESSION="+sessionID)
	cmd.Stderr = testWriter{t}
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("node compat.cjs: %v", err)
	}
	t.Logf("openai SDK: %s", b)
	var got sdkResult
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}

	if !slices.Contains(got.Models, "sdk") || !slices.Contains(got.Models, "sdk/v1") {
		t.Errorf("models.list() = %v; want sdk and sdk/v1", got.Models)
	}
	c := got.Completion
	if c.Object != "chat.completion" || c.Content == "" || c.Session != sessionID ||
		c.Usage.TotalTokens != c.Usage.PromptTokens+c.Usage.CompletionTokens || c.Usage.CompletionTokens == 0 {
		t.Errorf("completion = %+v; want content, usage that adds up and the session %s", c, sessionID)
	}
	s := got.Stream
	if s.Content == "" || s.Finish == "" || s.Usage == nil || s.Usage.Choices != 0 || s.Usage.CompletionTokens == 0 {
		t.Errorf("stream = %+v; want content, a finish reason and a last chunk with usage and no choices", s)
	}
	wantErrors := map[string]struct {
		class  string
		status int
	}{
		"n2":           {"BadRequestError", http.StatusBadRequest},
		"tools":        {"BadRequestError", http.StatusBadRequest},
		"badKey":       {"AuthenticationError", http.StatusUnauthorized},
		"rivalSession": {"PermissionDeniedError", http.StatusForbidden},
		"noUser":       {"BadRequestError", http.StatusBadRequest},
	}
	for name, want := range wantErrors {
		e := got.Errors[name]
		if e.Class != want.class || e.Status != want.status || !e.IsAPIError {
			t.Errorf("error %s = %+v; want the SDK's %s (status %d)", name, e, want.class, want.status)
		}
	}

	// The session ends explicitly through the native API.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/sessions/"+sessionID+"/end", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("end session %s = %d; want 200", sessionID, resp.StatusCode)
	}

	// Kafka holds the SDK's session (started, two turns, ended by the
	// player) and the one-exchange session (started, turn, ended at max turns).
	readCtx, cancelRead := context.WithTimeout(ctx, 30*time.Second)
	defer cancelRead()
	evs := k.ReadSessionEvents(readCtx, t, cfg.SessionLog.Topic, 7)
	var named, single []string
	singleID := ""
	for _, ev := range evs {
		if ev.Deployment != "sdk" || ev.PolicyVersion != "v1" {
			t.Errorf("event %s: deployment %q version %q; want sdk v1", ev.Type, ev.Deployment, ev.PolicyVersion)
		}
		switch {
		case ev.SessionID == sessionID:
			named = append(named, string(ev.Type)+"/"+ev.PlayerID+"/"+strconv.Itoa(ev.Turn)+string(ev.Reason))
		case singleID == "" || ev.SessionID == singleID:
			singleID = ev.SessionID
			single = append(single, string(ev.Type)+"/"+ev.PlayerID+"/"+strconv.Itoa(ev.Turn)+string(ev.Reason))
		default:
			t.Errorf("unexpected event %+v", ev)
		}
	}
	wantNamed := []string{"session_started/player-1/0", "turn/player-1/1", "turn/player-1/2", "session_ended/player-1/0player_ended"}
	wantSingle := []string{"session_started/player-2/0", "turn/player-2/1", "session_ended/player-2/0max_turns"}
	if !slices.Equal(named, wantNamed) {
		t.Errorf("events of the session = %v; want %v", named, wantNamed)
	}
	if !slices.Equal(single, wantSingle) {
		t.Errorf("events of the one-exchange session = %v; want %v", single, wantSingle)
	}
}

// testWriter logs what is written to it.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", p)
	return len(p), nil
}
