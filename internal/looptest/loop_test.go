//go:build loop

package looptest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/gateway/admin"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/internal/gatewayd"
	"github.com/parleyhq/parley/internal/learnerd"
	"github.com/parleyhq/parley/internal/telemetry"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/learner"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/rollout"
	"github.com/parleyhq/parley/rollout/abtest"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
	"github.com/parleyhq/parley/simulator/bots"
)

// Sizes of the loop: bots play a refresh window, then enough more sessions
// for a cycle, then the A/B phase.
const (
	botPlayers       = 60
	botSeed          = 1
	botMaxTurns      = 6
	refreshSessions  = 40
	cycleSessions    = 70
	abSessions       = 200
	deployment       = "npc"
	bootstrapPlayers = 40
)

// tinySFT is a model and run small enough for the loop on 2 cores.
func tinySFT(role learner.Role, dataDir, registryRoot string, steps int) learner.SFTConfig {
	c := learner.DefaultSFTConfig(role)
	c.Arch.Dim, c.Arch.Layers, c.Arch.Heads, c.Arch.FFNDim, c.Arch.MaxSeq = 32, 2, 2, 64, 384
	if role == learner.RoleNPC {
		c.Arch.MaxSeq = 1024 // the gateway refuses a turn whose dialogue overflows the context
	}
	c.VocabSize = 400
	c.DataDir, c.Registry = dataDir, registryRoot
	c.Steps, c.BatchSize, c.CheckpointEvery = steps, 8, steps
	c.Train.LearningRate = 3e-3
	c.HeldOutShare, c.MaxTurns = 0.25, botMaxTurns
	c.SkipEvalBefore = true
	c.UserAgent.Sampling.MaxTokens = 8
	c.Eval = learner.EvalConfig{MaxDialogues: 8, MaxReplies: 4, ReplyTokens: 8, MaxTurns: botMaxTurns, ScoreBatch: 8, Seed: 1}
	return c
}

// bootstrap trains and publishes v1 of both agents on a generated corpus.
func bootstrap(t *testing.T, ctx context.Context, dir, registryRoot string) {
	t.Helper()
	cc := simulator.DefaultCorpusConfig()
	cc.Players, cc.DialoguesPerPlayer, cc.MaxTurns, cc.Seed, cc.IncludeHeldOut = bootstrapPlayers, 4, botMaxTurns, 99, true
	var buf bytes.Buffer
	if _, err := simulator.GenerateCorpus(ctx, cc, &buf); err != nil {
		t.Fatal(err)
	}
	ds, err := simulator.ReadCorpus(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []learner.Role{learner.RoleNPC, learner.RoleUser} {
		c := tinySFT(role, filepath.Join(dir, "bootstrap"), registryRoot, 40)
		c.Version = "v1"
		res, err := learner.TrainSFT(ctx, c, ds, nil)
		if err != nil || !res.Published {
			t.Fatalf("bootstrap %s: published %v, %v", role, res != nil && res.Published, err)
		}
		t.Logf("bootstrap %s v1: loss %.3f, held-out ppl %.1f", role, res.Losses[len(res.Losses)-1], res.After.PPL)
	}
}

// waitFor polls cond every half second until it holds or d passes.
func waitFor(t *testing.T, ctx context.Context, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("gave up after %v waiting for %s", d, what)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// gatewayConfig is a gateway on a free port of the test's Redis and
// broker, serving from registryRoot and keeping its spool under dir,
// without rate limits (the bots share one key).
func gatewayConfig(t *testing.T, rds *testenv.Redis, kfk *testenv.Kafka, topic, registryRoot, dir string) gatewayd.Config {
	gw := gatewayd.DefaultConfig()
	gw.RedisAddr, gw.Registry, gw.DataDir, gw.Instance = rds.Addr, registryRoot, filepath.Join(dir, "gateway"), "loop-gw"
	gw.SessionLog.Brokers, gw.SessionLog.Topic, gw.SessionLog.AllowAutoTopicCreation = kfk.Addrs, topic, true
	gw.Gateway.Addr = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	gw.Gateway.KeyPrefix, gw.Gateway.Deployment = rds.Prefix, deployment
	gw.Gateway.PlayerRate, gw.Gateway.ClientRate = 0, 0
	gw.Rollout.PollInterval = 200 * time.Millisecond
	return gw
}

// learnerConfig is a learner on the test's Redis and broker, reading
// registryRoot and keeping its data under dir, whose watchdog looks at the
// deployment every 5 s.
func learnerConfig(rds *testenv.Redis, kfk *testenv.Kafka, topic, registryRoot, dir string) learnerd.Config {
	lc := learnerd.DefaultConfig()
	lc.Learner.DataDir, lc.Learner.Registry = filepath.Join(dir, "learner"), registryRoot
	lc.Learner.Consumer.Brokers, lc.Learner.Consumer.Topic = kfk.Addrs, topic
	lc.RedisAddr, lc.KeyPrefix, lc.Watchdog.Deployment = rds.Addr, rds.Prefix, deployment
	lc.Watchdog.Interval = 5 * time.Second
	return lc
}

// stack is a running gateway and learner of a loop run: the gateway's
// URL, a player key, and an A/B collector of the test's own.
type stack struct {
	base, key string
	collector *abtest.Collector
}

// startStack runs the gateway and the learner until the test ends, follows
// topic with an in-memory A/B collector in a consumer group of its own,
// waits for the gateway to be ready and creates a player key.
func startStack(t *testing.T, ctx context.Context, rds *testenv.Redis, kfk *testenv.Kafka, topic string,
	gw gatewayd.Config, lc learnerd.Config, tel *telemetry.Telemetry) stack {
	t.Helper()
	procs, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() { errs[0] = gatewayd.Run(procs, gw, tel) })
	wg.Go(func() { errs[1] = learnerd.Run(procs, lc, tel) })
	t.Cleanup(func() {
		stop()
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("process %d: %v", i, err)
			}
		}
	})
	st := stack{base: "http://" + gw.Gateway.Addr, collector: abtest.NewCollector()}
	wg.Go(func() {
		fc := abtest.FollowConfig{Brokers: kfk.Addrs, Topic: topic, GroupID: kfk.Prefix + "looptest-abtest", CheckpointEvery: time.Second}
		_ = abtest.Follow(procs, fc, st.collector, func() error { return nil }, slog.New(slog.DiscardHandler))
	})
	waitFor(t, ctx, 2*time.Minute, "the gateway to be ready", func() bool {
		resp, err := http.Get(st.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	var err error
	if st.key, err = gateway.CreateKey(ctx, rds.Client, rds.Prefix, "loop-game", gateway.RolePlayerClient); err != nil {
		t.Fatal(err)
	}
	return st
}

// playBots plays b's sessions and fails the test when more than a tenth
// of them fail.
func playBots(t *testing.T, ctx context.Context, began time.Time, phase string, b bots.Config) bots.Summary {
	t.Helper()
	sum, err := bots.Run(ctx, b, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("bots %s: %v", phase, err)
	}
	t.Logf("bots %s: %d sessions, %d errors, Avg.L %.2f, per arm %v (at %.0fs)", phase, sum.Sessions, sum.Errors, sum.AvgL, sum.PerArm, time.Since(began).Seconds())
	if sum.Errors > b.Sessions/10 {
		t.Fatalf("bots %s: %d of %d sessions failed: %v", phase, sum.Errors, b.Sessions, sum.ErrorCodes)
	}
	return sum
}

// refreshState is what the learner's refresh.json tells a loop test.
type refreshState struct {
	Refreshes   int    `json:"refreshes"`
	Published   int    `json:"published"`
	LastVersion string `json:"last_version"`
	LastReason  string `json:"last_reason"`
}

// waitRefresh waits up to d for the learner's first user-agent refresh to
// finish, published or refused, and returns its state.
func waitRefresh(t *testing.T, ctx context.Context, learnerDir string, d time.Duration) refreshState {
	t.Helper()
	var rs refreshState
	waitFor(t, ctx, d, "a user-agent refresh", func() bool {
		return readJSON(filepath.Join(learnerDir, "refresh.json"), &rs) && rs.Refreshes >= 1
	})
	return rs
}

// waitCandidate waits up to d for the cycle's candidate npc/v2 and
// returns its verified manifest. It fails at once when the cycle waits for
// a user agent that passes the referee gate, and when a candidate came
// without the referee's verdict.
func waitCandidate(t *testing.T, ctx context.Context, reg *registry.Local, learnerDir string, d time.Duration) schema.Manifest {
	t.Helper()
	// The cycle keeps its referee verdict and its last outcome in its
	// state; a refused user agent or a refused candidate means no
	// candidate comes.
	state := filepath.Join(learnerDir, "cycle", "cycle.json")
	var cycle struct {
		Referee *learner.RefereeVerdict `json:"referee"`
		Last    *struct {
			Published bool   `json:"published"`
			Reason    string `json:"reason"`
		} `json:"last"`
	}
	// A refusal of a user agent a refresh has replaced since is not the
	// last word: the cycle judges the new one (Cycle.due).
	current := func() string {
		mans, err := reg.List(ctx, "user-agent")
		if err != nil || len(mans) == 0 {
			return ""
		}
		return mans[len(mans)-1].Version
	}
	waitFor(t, ctx, d, "an at-grpo candidate npc/v2", func() bool {
		if _, err := reg.Manifest(ctx, "npc", "v2"); err == nil {
			return true
		}
		return readJSON(state, &cycle) && (cycle.Referee != nil && !cycle.Referee.Passed && cycle.Referee.UserAgent == current() ||
			cycle.Last != nil && !cycle.Last.Published)
	})
	if !readJSON(state, &cycle) || cycle.Referee == nil {
		t.Fatal("a candidate, but the cycle kept no referee verdict: it trained without asking the referee gate")
	}
	v := cycle.Referee
	if !v.Passed {
		t.Fatalf("no candidate: the cycle waits for a user agent that passes the referee gate; user agent %s on npc %s: %s", v.UserAgent, v.NPC, v.Reason)
	}
	if l := cycle.Last; l != nil && !l.Published {
		t.Fatalf("no candidate: the cycle trained against user agent %s and kept the candidate back: %s", v.UserAgent, l.Reason)
	}
	t.Logf("the cycle's referee gate: user agent %s on npc %s: %s", v.UserAgent, v.NPC, v.Reason)
	man, err := reg.Verify(ctx, "npc", "v2")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("candidate npc/v2 (user agent %v) metrics: %v", man.Hyperparameters["user_agent"], man.Metrics)
	return man
}

// canaryHalf starts npc/v2 as a 50 % canary, as live-ops would, and
// gives the gateway's rollout watch time to load it.
func canaryHalf(t *testing.T, ctx context.Context, rds *testenv.Redis) (*rollout.Client, schema.RolloutState) {
	t.Helper()
	cfg := rollout.DefaultConfig()
	cfg.Prefix = rds.Prefix
	rc, err := rollout.New(rds.Client, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Canary(ctx, deployment, "v2", 50, "looptest"); err != nil {
		t.Fatal(err)
	}
	st, err := rc.Get(ctx, deployment)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	return rc, st
}

// analyze reports experiment exp from the collector's sessions and logs
// each arm, its latency and Avg.L's difference with its player-level CIs.
func analyze(t *testing.T, exp string, c *abtest.Collector) abtest.Report {
	t.Helper()
	rep, err := abtest.Analyze(exp, c.Sessions(exp), abtest.DefaultConfig(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []abtest.ArmStats{rep.Stable, rep.Canary} {
		t.Logf("A/B %-6s %v: %d players, %d sessions, Avg.L %.3f (95%% CI %.3f–%.3f); exchange latency p95 %.0f ms, %.3f of exchanges slower than %.0f ms (stable's p95 or the floor)",
			a.Arm, a.Versions, a.AvgL.Players, a.AvgL.N, a.AvgL.Mean, a.AvgL.Lo, a.AvgL.Hi, a.All.P95LatencyMS, a.All.SlowRate, rep.State.SlowThresholdMS)
	}
	d := rep.AvgL
	t.Logf("A/B Avg.L canary − stable = %+.3f (player-level 95%% CI %+.3f to %+.3f, Welch p %.4f); always-valid CI %+.3f to %+.3f, p %.4f",
		d.Diff, d.Lo, d.Hi, d.P, d.Seq.Lo, d.Seq.Hi, d.Seq.P)
	return rep
}

func readJSON(path string, v any) bool {
	raw, err := os.ReadFile(path)
	return err == nil && json.Unmarshal(raw, v) == nil
}

func TestClosedLoop(t *testing.T) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	rds := testenv.StartRedis(t)
	kfk := testenv.StartKafka(t)
	topic := kfk.Topic("sessions")
	dir := t.TempDir()
	registryRoot := filepath.Join(dir, "registry")
	bootstrap(t, ctx, dir, registryRoot)
	t.Logf("bootstrap done after %.0fs", time.Since(began).Seconds())

	logs := &testenv.LogBuffer{}
	tcfg := telemetry.DefaultConfig()
	tel, err := telemetry.New(ctx, tcfg, logs)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			for _, l := range logs.Lines("level=ERROR") {
				t.Log(l)
			}
		}
	}()

	gw := gatewayConfig(t, rds, kfk, topic, registryRoot, dir)
	gw.Gateway.Sampling.MaxTokens = 16

	players := bots.DefaultConfig()
	players.Players, players.Seed, players.MaxTurns, players.Concurrency = botPlayers, botSeed, botMaxTurns, 4

	lc := learnerConfig(rds, kfk, topic, registryRoot, dir)
	lc.Learner.Refresh.SFT = tinySFT(learner.RoleUser, "", "", 16)
	lc.Learner.Refresh.EverySessions, lc.Learner.Refresh.Every, lc.Learner.Refresh.Poll = refreshSessions, 0, 300*time.Millisecond
	// The watchdog judges the guardrails once each arm has a fair share of
	// the A/B phase, then may roll back before the test decides.
	lc.Watchdog.Guardrails.MinPlayers = abSessions / 3
	cy := &lc.Cycle
	cy.EverySessions, cy.Every, cy.Poll = cycleSessions, 0, 300*time.Millisecond
	cy.RL.Tree.W, cy.RL.Tree.Width, cy.RL.Tree.Depth = 3, 2, 3
	cy.RL.Batch, cy.RL.Workers, cy.RL.Steps = 4, 4, 4
	cy.Policy.Sampling.MaxTokens = 16
	cy.UserAgent = lc.Learner.Refresh.SFT.UserAgent
	cy.MaxTurns, cy.HeldOutShare = botMaxTurns, 0.25
	cy.EvalPrompts, cy.EvalDepth, cy.CurvePrompts, cy.CurveEvery = 16, botMaxTurns, 8, 2
	cy.Players, cy.PlayersSeed = players.Population, botSeed
	cy.Players.Size = botPlayers
	// The refresh's referee gate, which the cycle applies too before it
	// trains, measures the user agent against the bots' own players on a
	// few groups. A tiny user agent is far from the production thresholds
	// (τ ≥ 0.30, Pearson ≥ 0.6, Avg.L ratio within [0.9, 1.1]), so the
	// loop sets them explicitly: any measured values pass, and only the
	// rule that a refresh is no worse than the current user agent still
	// applies.
	ref := &lc.Learner.Refresh.Referee
	ref.Players, ref.PlayersSeed = cy.Players, botSeed
	npc := &lc.Learner.Refresh.NPC
	npc.Policy, npc.UserAgent = cy.Policy, cy.UserAgent
	ref.Measure = rl.RefereeConfig{Groups: 16, Siblings: 8, MaxContext: 2, Dialogues: 16, Depth: botMaxTurns, Resamples: 200, Parallel: 4, Seed: 1}
	ref.Thresholds = rl.RefereeThresholds{MinKendallTau: -1, MinKendallTauCILow: -2, MinPearson: -1, MinSimRealAvgL: 0, MaxSimRealAvgL: 100,
		Tolerance: rl.DefaultRefereeThresholds().Tolerance}

	sys := startStack(t, ctx, rds, kfk, topic, gw, lc, tel)
	collector := sys.collector
	players.GatewayURL, players.APIKey = sys.base, sys.key
	play := func(phase string, n int) bots.Summary {
		t.Helper()
		b := players
		b.Sessions = n
		return playBots(t, ctx, began, phase, b)
	}

	// 1. A refresh window of sessions: the user agent is refreshed.
	play("refresh window", refreshSessions)
	rs := waitRefresh(t, ctx, lc.Learner.DataDir, 5*time.Minute)
	if rs.Published > 0 {
		t.Logf("user agent refreshed: published %s (gate: %s)", rs.LastVersion, rs.LastReason)
	} else {
		t.Logf("user agent refresh refused by the fidelity or referee gate (%s): the cycle trains against v1", rs.LastReason)
	}

	// 2. More sessions make a cycle due: an AT-GRPO candidate is published.
	play("cycle window", cycleSessions-refreshSessions)
	reg, err := registry.NewLocal(registryRoot)
	if err != nil {
		t.Fatal(err)
	}
	man := waitCandidate(t, ctx, reg, lc.Learner.DataDir, 8*time.Minute)
	if man.Algorithm != "at-grpo" || man.Parent != "v1" {
		t.Fatalf("candidate npc/v2: algorithm %q parent %q; want at-grpo from v1", man.Algorithm, man.Parent)
	}
	t.Logf("candidate npc/v2 at %.0fs", time.Since(began).Seconds())
	// The dashboard reads the candidate's training curves.
	cv, err := admin.LocalCurves{Registry: reg}.Curves(ctx, "npc", "v2")
	if err != nil {
		t.Fatalf("dashboard curves of npc/v2: %v", err)
	}
	for _, s := range cv.Series {
		t.Logf("curve %s over %s: %v", s.Name, cv.X, s.Points)
	}

	// 3. Canary at 50 %, more bots, A/B report.
	rc, st := canaryHalf(t, ctx, rds)
	exp := st.ExperimentID
	t.Logf("canary v2 at 50%% over stable %s, experiment %s", st.Stable, exp)
	sum := play("a/b", abSessions)
	if len(sum.PerArm) < 2 {
		t.Errorf("a/b sessions went to arms %v; want both stable and canary", sum.PerArm)
	}
	waitFor(t, ctx, time.Minute, "the a/b sessions to reach the collector", func() bool {
		n := 0
		for _, s := range collector.Sessions(exp) {
			if s.Done() {
				n++
			}
		}
		return n >= abSessions-sum.Errors
	})
	rep := analyze(t, exp, collector)
	if rep.Stable.AvgL.N < 2 || rep.Canary.AvgL.N < 2 {
		t.Fatalf("a/b arms have %d and %d ended sessions; want both ≥ 2", rep.Stable.AvgL.N, rep.Canary.AvgL.N)
	}

	// 4. Promote or roll back: the watchdog may have rolled back already
	// (or does while the test decides); otherwise abtest.Decide with
	// auto-promotion decides, and a hold (no evidence the candidate is
	// better) rolls back.
	st, err = rc.Get(ctx, deployment)
	if err != nil {
		t.Fatal(err)
	}
	if st.State == schema.PhaseCanary {
		g := abtest.DefaultGuardrailConfig()
		g.AutoPromote, g.MinPlayers, g.MinPromotePlayers = true, 20, 20
		dec := abtest.Decide(rep, g)
		t.Logf("decision: %s (%s)", dec.Verdict, dec.Reason)
		switch dec.Verdict {
		case abtest.Promote:
			_, err = rc.Promote(ctx, deployment, "looptest", dec.Reason)
		default:
			_, err = rc.Rollback(ctx, deployment, "looptest", string(dec.Verdict)+": "+dec.Reason)
		}
		if err != nil && !errors.Is(err, rollout.ErrTransition) { // the watchdog acted first
			t.Fatal(err)
		}
		if st, err = rc.Get(ctx, deployment); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("after the decision: state %s, stable %s, canary %q (by %s)", st.State, st.Stable, st.Canary, st.UpdatedBy)
	// A promotion makes v2 stable with no canary. A rollback rests in
	// rolling_back (rollout.Next): weight 0 and every new session on stable
	// v1, with v2 and the experiment still named for the report; the next
	// canary leaves it.
	want := schema.RolloutState{Stable: "v2", State: schema.PhaseSteady}
	if st.State != schema.PhaseSteady {
		want = schema.RolloutState{Stable: "v1", Canary: "v2", ExperimentID: exp, State: schema.PhaseRollingBack}
	}
	got := schema.RolloutState{Stable: st.Stable, Canary: st.Canary, CanaryWeight: st.CanaryWeight, ExperimentID: st.ExperimentID, State: st.State}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("rollout after the decision: %+v; want %+v", got, want)
	}
	if arm, v := rollout.Route(st, "a-new-player"); arm != schema.ArmStable || v != want.Stable {
		t.Fatalf("after the decision a new session goes to %s %s; want stable %s", arm, v, want.Stable)
	}
	t.Logf("final rollout: stable %s, state %s; loop took %.0fs", st.Stable, st.State, time.Since(began).Seconds())
	for _, l := range slices.Concat(logs.Lines("user-agent refresh done"), logs.Lines("at-grpo cycle published"), logs.Lines("watchdog")) {
		t.Log(l)
	}
}
