package gatewayd

import (
	"context"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/internal/redisconn"
	"github.com/parleyhq/parley/internal/telemetry"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/rollout"
	"github.com/parleyhq/parley/simulator/bots"
)

// startRedisCluster runs three redis-server nodes joined by
// `redis-cli --cluster create` (about five seconds) and returns their
// addresses as a comma list.
func startRedisCluster(t *testing.T) string {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed (apt-get install -y redis-server)", bin)
		}
	}
	var addrs []string
	for range 3 {
		port, dir := testenv.FreePort(t), t.TempDir()
		cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--dir", dir, "--save", "", "--appendonly", "no", "--logfile", filepath.Join(dir, "redis.log"))
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		addr := "127.0.0.1:" + strconv.Itoa(port)
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		waitUntil(t, 10*time.Second, "redis node "+addr, func() bool { return c.Ping(context.Background()).Err() == nil })
		addrs = append(addrs, addr)
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		waitUntil(t, 20*time.Second, "cluster_state:ok at "+addr, func() bool {
			info, err := c.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
		c.Close()
	}
	return strings.Join(addrs, ",")
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
	}
}

// TestGatewayOnRedisCluster runs the gateway process on a three-node Redis
// Cluster: every Lua script and MULTI it runs must keep its keys in one hash
// slot (a CROSSSLOT error would fail a request), and the rollout's
// compare-and-set and fleet listing must find their keys on the right node.
func TestGatewayOnRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node Redis Cluster")
	}
	nodes := startRedisCluster(t)
	k := testenv.StartKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cfg := DefaultConfig()
	cfg.RedisAddr, cfg.RedisCluster = nodes, true
	cfg.Registry, cfg.DataDir = filepath.Join(t.TempDir(), "registry"), t.TempDir()
	cfg.SessionLog.Brokers, cfg.SessionLog.Topic = k.Addrs, k.Topic("sessions")
	cfg.Gateway.Addr = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	cfg.Gateway.Deployment, cfg.Instance = "cluster", "gw-cluster"
	cfg.Gateway.Sampling.MaxTokens = 8
	cfg.Gateway.PlayerRate, cfg.Gateway.PlayerBurst = 1000, 1000 // both buckets in the rate-limit script
	cfg.Rollout.PollInterval = 200 * time.Millisecond
	testenv.PublishTinyModel(t, cfg.Registry, "npc", "v1")

	var logs testenv.LogBuffer
	tel, err := telemetry.New(ctx, telemetry.DefaultConfig(), &logs)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	}()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, tel) }()
	base := "http://" + cfg.Gateway.Addr
	testenv.WaitReady(t, base+"/readyz", done)

	rdb := redisconn.Config{Addr: nodes, Cluster: true}.Open()
	defer rdb.Close()
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("redisconn opened %T; want a cluster client", rdb)
	}
	key, err := gateway.CreateKey(ctx, rdb, cfg.Gateway.KeyPrefix, "game", gateway.RolePlayerClient)
	if err != nil {
		t.Fatal(err)
	}
	rcfg := rollout.DefaultConfig()
	rcfg.Prefix = cfg.Gateway.KeyPrefix
	ro, err := rollout.New(rdb, rcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	testenv.PublishTinyModel(t, cfg.Registry, "npc", "v2")
	if _, err := ro.Canary(ctx, cfg.Gateway.Deployment, "v2", 50, "cluster-test"); err != nil {
		t.Fatalf("canary on a cluster: %v", err)
	}
	waitUntil(t, time.Minute, "the fleet listing the gateway with the canary loaded", func() bool {
		fleet, err := ro.Fleet(ctx, cfg.Gateway.Deployment)
		return err == nil && len(fleet) == 1 && fleet[0].Canary == "v2" && len(fleet[0].Loaded) == 2
	})

	players := bots.DefaultConfig()
	players.GatewayURL, players.APIKey = base, key
	players.Players, players.Sessions, players.Concurrency, players.MaxTurns = 4, 8, 4, 3
	sum, err := bots.Run(ctx, players, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Errors != 0 || sum.Completed != players.Sessions {
		t.Fatalf("bots on a Redis Cluster: %d completed, %d errors %v; want %d completed, no errors",
			sum.Completed, sum.Errors, sum.ErrorCodes, players.Sessions)
	}
	if _, err := ro.Promote(ctx, cfg.Gateway.Deployment, "cluster-test", "cluster test"); err != nil {
		t.Errorf("promote on a cluster: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after shutdown = %v; want nil", err)
	}
}
