package learnerd

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/internal/gatewayd"
	"github.com/parleyhq/parley/internal/telemetry"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/simulator/bots"
)

// TestMetricsAfterTraffic runs a gateway and a learner in one process with
// one telemetry, as `parley dev` does, plays bots against the gateway and
// scrapes /metrics: the engine's series, labelled by model version, and the
// learner's health must be there, and promtool (when installed) must find
// the exposition clean.
func TestMetricsAfterTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a gateway, a learner and bots")
	}
	rds, k := testenv.StartRedis(t), testenv.StartKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tel, err := telemetry.New(ctx, telemetry.DefaultConfig(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	registry, topic := filepath.Join(t.TempDir(), "registry"), k.Topic("sessions")
	testenv.PublishTinyModel(t, registry, "npc", "v1")

	gw := gatewayd.DefaultConfig()
	gw.RedisAddr, gw.Registry, gw.DataDir, gw.Instance = rds.Addr, registry, t.TempDir(), "gw-metrics"
	gw.SessionLog.Brokers, gw.SessionLog.Topic = k.Addrs, topic
	gw.Gateway.Addr = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	gw.Gateway.KeyPrefix, gw.Gateway.Deployment = rds.Prefix, "metrics"
	gw.Gateway.Sampling.MaxTokens, gw.Gateway.PlayerRate = 8, 0

	lc := DefaultConfig()
	lc.Learner.DataDir, lc.Learner.Registry = t.TempDir(), registry
	lc.Learner.Consumer.Brokers, lc.Learner.Consumer.Topic = k.Addrs, topic
	lc.Learner.Consumer.GroupID = k.Prefix + "learner"
	lc.Learner.Consumer.BatchWait = 100 * time.Millisecond
	lc.MetricsAddr = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	// A refresh and a cycle that finished before this start: their gate
	// values and losses are reported from the state files.
	writeFile(t, filepath.Join(lc.Learner.DataDir, "refresh.json"), `{"refreshes": 1, "published": 1, "last_at": "2026-12-01T10:00:00Z",
		"last": {"published": true, "rho_before": 0.21, "rho_after": 0.34, "term_log_loss_before": 0.6, "term_log_loss_after": 0.55, "end_log_loss_before": 0.52, "end_log_loss_after": 0.48, "loss": 1.9}}`)
	writeFile(t, filepath.Join(lc.Learner.DataDir, "cycle", "cycle.json"), `{"cycles": 1, "last_at": "2026-12-01T11:00:00Z",
		"last": {"published": false, "candidate": {"ua_avg_l": 5.1}, "parent_eval": {"ua_avg_l": 5.4}, "loss": 0.07},
		"referee": {"npc": "v1", "user_agent": "v1", "passed": false, "reason": "referee: Pearson 0.245 < 0.60"}}`)

	done := make(chan error, 2)
	go func() { done <- gatewayd.Run(ctx, gw, tel) }()
	go func() { done <- Run(ctx, lc, tel) }()
	base := "http://" + gw.Gateway.Addr
	testenv.WaitReady(t, base+"/readyz", done)

	key, err := gateway.CreateKey(ctx, rds.Client, rds.Prefix, "game", gateway.RolePlayerClient)
	if err != nil {
		t.Fatal(err)
	}
	players := bots.DefaultConfig()
	players.GatewayURL, players.APIKey = base, key
	players.Players, players.Sessions, players.Concurrency, players.MaxTurns = 3, 4, 2, 3
	if sum, err := bots.Run(ctx, players, slog.New(slog.DiscardHandler)); err != nil || sum.Errors != 0 {
		t.Fatalf("bots: %+v, %v", sum, err)
	}

	want := []string{
		// The engine, per model version: what vLLM's users watch.
		`parley_inference_requests_running{.*model_version="v1"`,
		`parley_inference_queue_depth{.*model_version="v1"`,
		`parley_inference_batch_size_bucket{.*model_version="v1"`,
		`parley_inference_kv_cache_usage{.*model_version="v1"`,
		`parley_inference_time_to_first_token_seconds_bucket{.*model_version="v1"`,
		`parley_inference_token_latency_seconds_bucket{.*model_version="v1"`,
		`parley_inference_tokens_total{.*model_version="v1"`,
		`parley_inference_prompt_tokens_total{.*model_version="v1"`,
		`parley_inference_requests_total{.*finish_reason=`,
		// The learner's health.
		`parley_learner_consumer_lag{.*partition="[0-9]+"`,
		`parley_learner_stored_dialogues{`,
		`parley_learner_open_sessions{`,
		`parley_learner_refresh_runs_total{`,
		`parley_learner_refresh_published_total{`,
		`parley_learner_refresh_last_run_time_seconds{`,
		`parley_learner_cycle_runs_total{`,
		`parley_learner_cycle_last_run_time_seconds{`,
		`parley_learner_refresh_last_accepted{.*} 1$`,
		`parley_learner_refresh_gate{.*side="after",stat="rho"} 0.34$`,
		`parley_learner_refresh_gate{.*side="after",stat="end_log_loss"} 0.48$`,
		`parley_learner_refresh_last_loss{.*} 1.9$`,
		`parley_learner_cycle_last_accepted{.*} 0$`,
		`parley_learner_cycle_gate{env="ua",.*policy="parent",stat="avg_l"} 5.4$`,
		`parley_learner_cycle_last_loss{.*} 0.07$`,
		`parley_learner_cycle_referee_passed{.*npc="v1".*user_agent="v1".*} 0$`,
	}
	stored := regexp.MustCompile(`(?m)^parley_learner_stored_dialogues{[^}]*} ([0-9.e+]+)$`)
	var body []byte
	for {
		body = scrape(ctx, t, base+"/metrics")
		if m := stored.FindSubmatch(body); m != nil && string(m[1]) != "0" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the learner stored no dialogue; /metrics:\n%s", grepParley(body))
		case <-time.After(200 * time.Millisecond):
		}
	}
	for _, w := range want {
		if !regexp.MustCompile(`(?m)^` + w).Match(body) {
			t.Errorf("/metrics has no series matching %s", w)
		}
	}
	// Every series the shipped Grafana dashboard reads is one the code exports.
	dashboard, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "parley-fleet.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range regexp.MustCompile(`parley_[a-z0-9_]+`).FindAll(dashboard, -1) {
		family := strings.TrimSuffix(string(name), "_bucket")
		if !regexp.MustCompile(`(?m)^` + family + `(_bucket)?\{`).Match(body) {
			t.Errorf("deploy/grafana/parley-fleet.json reads %s, which /metrics does not have", name)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", grepParley(body))
	}
	// The learner serves the same registry on its own --metrics-addr.
	if own := scrape(ctx, t, "http://"+lc.MetricsAddr+"/metrics"); !stored.Match(own) {
		t.Errorf("the learner's own /metrics has no parley_learner_stored_dialogues")
	}
	if path, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.CommandContext(ctx, path, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	} else {
		t.Log("promtool not installed: exposition lint skipped")
	}

	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("Run after shutdown = %v; want nil", err)
		}
	}
}

func scrape(ctx context.Context, t *testing.T, url string) []byte {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d, %v", url, resp.StatusCode, err)
	}
	return body
}

// grepParley keeps Parley's own series of an exposition.
func grepParley(body []byte) string {
	var b strings.Builder
	for line := range strings.SplitSeq(string(body), "\n") {
		if strings.HasPrefix(line, "parley_") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
