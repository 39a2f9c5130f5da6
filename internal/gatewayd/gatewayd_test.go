package gatewayd

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/internal/telemetry"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator/bots"
)

// TestGatewayProcessEndToEnd runs the whole gateway process against real
// Redis and a Kafka-protocol broker, plays bots against it over HTTP and
// reads every event back from Kafka.
func TestGatewayProcessEndToEnd(t *testing.T) {
	rds, k := testenv.StartRedis(t), testenv.StartKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cfg := DefaultConfig()
	cfg.RedisAddr, cfg.Registry, cfg.DataDir = rds.Addr, filepath.Join(t.TempDir(), "registry"), t.TempDir()
	cfg.SessionLog.Brokers, cfg.SessionLog.Topic = k.Addrs, k.Topic("sessions")
	cfg.Gateway.Addr = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	cfg.Gateway.KeyPrefix, cfg.Gateway.Deployment = rds.Prefix, "e2e"
	cfg.Gateway.Sampling.MaxTokens, cfg.Gateway.PlayerRate = 8, 0
	cfg.Instance = "gw-test"
	testenv.PublishTinyModel(t, cfg.Registry, "npc", "v1")

	tel, err := telemetry.New(ctx, telemetry.DefaultConfig(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, tel) }()
	base := "http://" + cfg.Gateway.Addr
	testenv.WaitReady(t, base+"/readyz", done)

	playerKey, err := gateway.CreateKey(ctx, rds.Client, rds.Prefix, "game", gateway.RolePlayerClient)
	if err != nil {
		t.Fatal(err)
	}
	opsKey, err := gateway.CreateKey(ctx, rds.Client, rds.Prefix, "ops", gateway.RoleLiveOps)
	if err != nil {
		t.Fatal(err)
	}

	players := bots.DefaultConfig()
	players.GatewayURL, players.APIKey = base, playerKey
	players.Players, players.Sessions, players.Concurrency, players.MaxTurns = 4, 6, 3, 4
	sum, err := bots.Run(ctx, players, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Errors != 0 || sum.Completed != players.Sessions {
		t.Fatalf("bots: %d completed, %d errors %v; want %d completed, no errors", sum.Completed, sum.Errors, sum.ErrorCodes, players.Sessions)
	}
	if got := sum.PerPolicy["v1"].Sessions; got != players.Sessions {
		t.Errorf("sessions on v1 = %d; want %d (the registry's only version)", got, players.Sessions)
	}

	// Every session's start, turns and end reach Kafka, each exactly once.
	want := 2*players.Sessions + sum.Exchanges
	events := k.ReadSessionEvents(ctx, t, cfg.SessionLog.Topic, want)
	byType := map[schema.EventType]int{}
	ended := map[schema.EndReason]int{}
	ids := map[string]bool{}
	for _, ev := range events {
		byType[ev.Type]++
		if ev.Type == schema.SessionEnded {
			ended[ev.Reason]++
		}
		if ids[ev.EventID] {
			t.Errorf("event %s delivered twice", ev.EventID)
		}
		ids[ev.EventID] = true
		if ev.PolicyVersion != "v1" || ev.Deployment != "e2e" {
			t.Errorf("event %s: policy %q deployment %q; want v1, e2e", ev.EventID, ev.PolicyVersion, ev.Deployment)
		}
	}
	if byType[schema.SessionStarted] != players.Sessions || byType[schema.SessionEnded] != players.Sessions || byType[schema.TurnEvent] != sum.Exchanges {
		t.Errorf("events by type = %v; want %d started, %d turns, %d ended", byType, players.Sessions, sum.Exchanges, players.Sessions)
	}
	// The bots' own cap on exchanges reaches the log as max_turns, not as
	// the player's decision to quit.
	if capped := sum.EndReasons[string(schema.EndMaxTurns)]; capped == 0 || ended[schema.EndMaxTurns] != capped {
		t.Errorf("session_ended reasons %v; want max_turns for each of the %d sessions the bots capped (%v)", ended, capped, sum.EndReasons)
	}

	// The admin API answers live-ops, refuses a player key; the dashboard is served.
	for _, c := range []struct {
		path, key string
		status    int
		contains  string
	}{
		{"/admin/v1/rollout", opsKey, 200, `"stable":"v1"`},
		{"/admin/v1/rollout", playerKey, 403, `"error"`},
		{"/admin/", "", 200, "<html"},
		{"/metrics", "", 200, "parley_"},
	} {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+c.path, nil)
		if c.key != "" {
			req.Header.Set("Authorization", "Bearer "+c.key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(body), c.contains) {
			t.Errorf("GET %s = %d %.200s; want %d containing %q", c.path, resp.StatusCode, body, c.status, c.contains)
		}
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after shutdown = %v; want nil", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(cfg.DataDir, "spool")); len(ents) == 0 {
		t.Errorf("spool dir is empty; want the spool's files to remain for the next start")
	}
}

// TestReplicaAcksOnlyWithSentinel: a gateway waits for a replica's
// confirmation by default behind Sentinel, and never on a plain primary
// (which may have no replica) or a cluster.
func TestReplicaAcksOnlyWithSentinel(t *testing.T) {
	for _, tc := range []struct {
		master  string
		cluster bool
		want    int
	}{{"parley", false, 1}, {"", false, 0}, {"", true, 0}} {
		c := DefaultConfig()
		c.RedisMasterName, c.RedisCluster = tc.master, tc.cluster
		if got := c.complete().Gateway.ReplicaAcks; got != tc.want {
			t.Errorf("master %q cluster %v: ReplicaAcks %d; want %d", tc.master, tc.cluster, got, tc.want)
		}
	}
}
