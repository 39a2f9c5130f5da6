//go:build loop && long

package looptest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/parleyhq/parley/internal/telemetry"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/simulator/bots"
)

// TestLoopReplaysAB replays the A/B of a kept loop run on a fresh stack:
// PARLEY_REPLAY_REGISTRY is the run's registry (npc/v1 and the candidate
// npc/v2 the run canaried, with its user agents), served by a new gateway
// and learner with v1 stable, v2 canaried at 50 % and TestLoopPromotes'
// rounds of new players (seeds offset by PARLEY_REPLAY_SEED), the watchdog
// at its production thresholds. It reports what the watchdog did and
// fails only when the stack does; a replay takes five to ten minutes on
// 2 cores (`make loop-replay`).
func TestLoopReplaysAB(t *testing.T) {
	src := os.Getenv("PARLEY_REPLAY_REGISTRY")
	if src == "" {
		t.Skip("PARLEY_REPLAY_REGISTRY names no kept run's registry")
	}
	var seed uint64
	if s := os.Getenv("PARLEY_REPLAY_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("PARLEY_REPLAY_SEED: %v", err)
		}
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	rds := testenv.StartRedis(t)
	kfk := testenv.StartKafka(t)
	topic := kfk.Topic("sessions")
	run := t.TempDir()
	logs := &testenv.LogBuffer{}
	tel, err := telemetry.New(ctx, telemetry.DefaultConfig(), logs)
	if err != nil {
		t.Fatal(err)
	}
	// The gateway makes the newest version stable, so the candidate joins
	// the registry once the stack is up.
	registryRoot, candidate := filepath.Join(run, "registry"), filepath.Join(run, "candidate")
	if err := os.CopyFS(registryRoot, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(registryRoot, "npc", "v2"), candidate); err != nil {
		t.Fatal(err)
	}
	gw := gatewayConfig(t, rds, kfk, topic, registryRoot, run)
	lc := learnerConfig(rds, kfk, topic, registryRoot, run)
	// Neither a refresh nor a cycle comes due during the A/B.
	lc.Learner.Refresh.EverySessions, lc.Learner.Refresh.Every = abRoundMax*abRoundPlayers+1, 0
	lc.Cycle.EverySessions, lc.Cycle.Every = abRoundMax*abRoundPlayers+1, 0
	lc.Watchdog.Guardrails.AutoPromote = true
	sys := startStack(t, ctx, rds, kfk, topic, gw, lc, tel)
	if err := os.Rename(candidate, filepath.Join(registryRoot, "npc", "v2")); err != nil {
		t.Fatal(err)
	}
	players := bots.DefaultConfig()
	players.MaxTurns, players.GatewayURL, players.APIKey = promoteTurns, sys.base, sys.key
	st, exp := abRounds(t, ctx, began, rds, players, seed)
	analyze(t, exp, sys.collector)
	t.Logf("rollout: state %s, stable %s, by %s; the replay took %.0fs", st.State, st.Stable, st.UpdatedBy, time.Since(began).Seconds())
	for _, l := range logs.Lines("watchdog") {
		t.Log(l)
	}
}
