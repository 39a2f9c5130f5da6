package learner

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// tinyCycleConfig is a cycle small enough for the default test run: two
// AT-GRPO steps of two trees (W=3, w=2, L=3) on the tiny models.
func tinyCycleConfig() CycleConfig {
	c := DefaultCycleConfig()
	c.EverySessions, c.Every, c.Poll = 1, 0, 10*time.Millisecond
	c.RL.Tree.W, c.RL.Tree.Width, c.RL.Tree.Depth = 3, 2, 3
	c.RL.Batch, c.RL.Workers, c.RL.Steps = 2, 2, 2
	c.Policy.Sampling.MaxTokens = 8
	c.UserAgent.Sampling.MaxTokens = 6
	c.HeldOutShare, c.MaxTurns = 0.25, 4
	c.EvalPrompts, c.EvalDepth, c.CurvePrompts, c.CurveEvery = 4, 3, 2, 1
	return c
}

// cycleFixture trains and publishes tiny v1 dialogue and user agents on a
// generated corpus and stores the corpus as the learner's sessions.
func cycleFixture(t *testing.T) (cfg CycleConfig, store *Store, root string) {
	t.Helper()
	ctx := context.Background()
	const players, corpusSeed = 12, 5
	ds := generatedCorpus(t, players, 4, 4, corpusSeed)
	root = filepath.Join(t.TempDir(), "registry")
	for _, role := range []Role{RoleNPC, RoleUser} {
		sft := tinySFTConfig(t, role)
		sft.Registry, sft.Version = root, "v1"
		res, err := TrainSFT(ctx, sft, ds, nil)
		if err != nil || !res.Published {
			t.Fatalf("train %s v1: published %v, %v", role, res != nil && res.Published, err)
		}
	}
	store, err := OpenStore(filepath.Join(t.TempDir(), "sessions"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if _, err := store.Append(ds); err != nil {
		t.Fatal(err)
	}
	cfg = tinyCycleConfig()
	cfg.Players = simulator.DefaultCorpusConfig().Population
	cfg.Players.Size, cfg.PlayersSeed = players, corpusSeed
	return cfg, store, root
}

// cancelOn cancels when a log record with message msg is written: the
// cycle is "killed" right after its first RL step.
type cancelOn struct {
	msg    string
	cancel context.CancelFunc
}

func (h cancelOn) Enabled(context.Context, slog.Level) bool { return true }
func (h cancelOn) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.cancel()
	}
	return nil
}
func (h cancelOn) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h cancelOn) WithGroup(string) slog.Handler      { return h }

// TestCyclePublishesCandidateWithMetricsAndCurves runs one cycle killed
// after its first step (nothing may be published), then a whole one: the
// candidate must be v2 of npc, trained with at-grpo from v1 against the
// user agent v1, with both evaluations of both policies in its manifest and
// verified curves over every step.
func TestCyclePublishesCandidateWithMetricsAndCurves(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two models: skipped in -short")
	}
	cfg, store, root := cycleFixture(t)
	dataDir := t.TempDir()

	killed, cancel := context.WithCancel(context.Background())
	c, err := NewCycle(cfg, store, root, dataDir, slog.New(cancelOn{msg: "rl step", cancel: cancel}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunOnce(killed); !errors.Is(err, context.Canceled) {
		t.Fatalf("killed cycle: err = %v; want context.Canceled", err)
	}
	if got := registryVersions(t, root, "npc"); !slices.Equal(got, []string{"v1"}) {
		t.Fatalf("after a killed cycle npc versions = %v; want [v1]", got)
	}

	// A referee gate that any user agent passes lets the cycle train.
	cfg.Referee = cycleReferee(t, cfg, root, looseRefereeThresholds(), nil)
	c, err = NewCycle(cfg, store, root, dataDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.due() {
		t.Fatalf("cycle not due with %d new sessions and every_sessions %d", store.Len(), cfg.EverySessions)
	}
	res, err := c.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	if res.Version != "v2" || res.Parent != "v1" || res.UserAgent != "v1" {
		t.Fatalf("cycle = version %q parent %q user agent %q; want v2 from v1 against v1", res.Version, res.Parent, res.UserAgent)
	}
	if v := res.Referee; v == nil || !v.Passed || v.NPC != "v1" || v.UserAgent != "v1" || v.Report == nil {
		t.Errorf("referee verdict %+v; want user agent v1 passed as the referee of npc v1, with its report", v)
	}
	if v := res.CandidateReferee; v == nil || !v.Passed || v.NPC != "candidate" || v.UserAgent != "v1" || v.Report == nil {
		t.Errorf("candidate's referee verdict %+v; want user agent v1 passed as the referee of the candidate's turns, with its report", v)
	}
	if c.due() {
		t.Errorf("cycle still due right after one ran on every stored session")
	}
	reg, err := registry.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	man, err := reg.Verify(context.Background(), "npc", "v2")
	if err != nil {
		t.Fatalf("verify npc/v2: %v", err)
	}
	if man.Algorithm != "at-grpo" || man.Parent != "v1" {
		t.Errorf("manifest algorithm %q parent %q; want at-grpo, v1", man.Algorithm, man.Parent)
	}
	for _, k := range []string{"avg_l", "avg_r", "parent_avg_l", "parent_avg_r", "ua_avg_l", "ua_avg_r", "parent_ua_avg_l", "parent_ua_avg_r"} {
		if _, ok := man.Metrics[k]; !ok {
			t.Errorf("manifest metrics lack %q: %v", k, man.Metrics)
		}
	}
	if l := man.Metrics["avg_l"]; l < 1 || l > float64(cfg.EvalDepth) {
		t.Errorf("avg_l = %g; want within [1, %d]", l, cfg.EvalDepth)
	}
	if _, ok := man.Files[schema.CurvesFile]; !ok {
		t.Fatalf("manifest files %v lack %s", man.Files, schema.CurvesFile)
	}
	raw, err := os.ReadFile(filepath.Join(reg.Dir("npc", "v2"), schema.CurvesFile))
	if err != nil {
		t.Fatal(err)
	}
	var cv schema.Curves
	if err := json.Unmarshal(raw, &cv); err != nil {
		t.Fatal(err)
	}
	if cv.Model != "npc" || cv.Version != "v2" || cv.X != "step" || len(cv.Series) != 2 {
		t.Fatalf("curves = %s/%s x %q with %d series; want npc/v2 over step with avg_r and avg_l", cv.Model, cv.Version, cv.X, len(cv.Series))
	}
	for _, s := range cv.Series {
		var xs []float64
		for _, p := range s.Points {
			xs = append(xs, p.X)
		}
		if want := []float64{0, 1, 2}; !slices.Equal(xs, want) {
			t.Errorf("series %s at steps %v; want %v", s.Name, xs, want)
		}
	}
	t.Logf("candidate %+v, parent %+v", res.Candidate, res.ParentEval)
	if res.UADelta == nil || res.GTDelta == nil || res.GTDelta.Dialogues != cfg.EvalPrompts {
		t.Errorf("paired deltas: user agent %+v, players %+v; want both, the players' over %d dialogues", res.UADelta, res.GTDelta, cfg.EvalPrompts)
	}

	// A gate that refuses every candidate: the next cycle publishes nothing.
	cfg.Referee = nil
	cfg.Gate = func(cand, parent CycleEval) (bool, string) { return false, "refused by the test" }
	c, err = NewCycle(cfg, store, root, dataDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err = c.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("gated RunOnce: %v", err)
	}
	if res.Published || res.Parent != "v2" {
		t.Errorf("gated cycle: published %v from %q; want refused, from v2", res.Published, res.Parent)
	}
	if got := registryVersions(t, root, "npc"); !slices.Equal(got, []string{"v1", "v2"}) {
		t.Errorf("after a refused candidate npc versions = %v; want [v1 v2]", got)
	}
}

// cycleReferee is a tiny referee gate on the cycle fixture's players and
// registry with thresholds th.
func cycleReferee(t *testing.T, cfg CycleConfig, root string, th rl.RefereeThresholds, logger *slog.Logger) *RefereeGate {
	rc := DefaultRefreshConfig()
	rc.SFT = tinySFTConfig(t, RoleUser)
	tinyReferee(&rc, cfg.PlayersSeed)
	rc.Referee.Players = cfg.Players
	rc.Referee.Thresholds = th
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return newRefereeGate(rc, root, logger)
}

// countMessages counts the log records of each message.
type countMessages struct {
	mu *sync.Mutex
	n  map[string]int
}

func (h countMessages) Enabled(context.Context, slog.Level) bool { return true }
func (h countMessages) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[r.Message]++
	return nil
}
func (h countMessages) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countMessages) WithGroup(string) slog.Handler      { return h }

func (h countMessages) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg]
}

// TestCycleWaitsForAReferee runs a cycle whose user agent fails the
// production referee gate (a tiny agent is far from τ ≥ 0.30): it trains
// and publishes nothing, keeps the verdict and is no longer due. A
// restarted cycle on more sessions uses the kept verdict for the same pair
// of versions without measuring again, and still waits.
func TestCycleWaitsForAReferee(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two models: skipped in -short")
	}
	cfg, store, root := cycleFixture(t)
	dataDir := t.TempDir()
	logs := countMessages{mu: &sync.Mutex{}, n: map[string]int{}}
	cfg.Referee = cycleReferee(t, cfg, root, rl.DefaultRefereeThresholds(), slog.New(logs))
	c, err := NewCycle(cfg, store, root, dataDir, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	v := res.Referee
	if v == nil || v.Passed || v.NPC != "v1" || v.UserAgent != "v1" || v.Report == nil || !strings.HasPrefix(v.Reason, "referee: ") {
		t.Fatalf("referee verdict %+v; want user agent v1 refused by the production thresholds as the referee of npc v1", v)
	}
	if res.Version != "" || res.Published || len(res.Steps) > 0 {
		t.Errorf("cycle without a referee: version %q, published %v, %d steps; want nothing trained", res.Version, res.Published, len(res.Steps))
	}
	if got := registryVersions(t, root, "npc"); !slices.Equal(got, []string{"v1"}) {
		t.Errorf("npc versions = %v; want [v1]", got)
	}
	if c.due() {
		t.Errorf("cycle still due after waiting on every stored session")
	}
	if n := logs.count("user-agent referee"); n != 1 {
		t.Errorf("referee measured %d times; want once", n)
	}

	if _, err := store.Append(generatedCorpus(t, 4, 2, 4, 9)); err != nil {
		t.Fatal(err)
	}
	c, err = NewCycle(cfg, store, root, dataDir, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	if res, err = c.RunOnce(context.Background()); err != nil {
		t.Fatalf("restarted RunOnce: %v", err)
	}
	if res.Referee == nil || res.Referee.Passed || res.Version != "" {
		t.Errorf("restarted cycle: referee %+v, version %q; want the kept refusal and nothing trained", res.Referee, res.Version)
	}
	if n := logs.count("user-agent referee"); n != 1 {
		t.Errorf("referee measured %d times for one pair of versions; want once", n)
	}
	if n := logs.count("at-grpo cycle waits for a user agent that passes the referee gate"); n != 2 {
		t.Errorf("%d waiting messages; want 2", n)
	}

	// A refresh publishes another user agent: the cycle is due at once, to
	// judge it on the sessions it has, and the new verdict ends that.
	reg, err := registry.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	man, err := reg.Manifest(context.Background(), cfg.UserAgentModel, "v1")
	if err != nil {
		t.Fatal(err)
	}
	files := slices.Collect(maps.Keys(man.Files))
	man.Version, man.Files, man.CreatedAt = "", nil, time.Time{}
	if _, err := reg.Import(context.Background(), cfg.UserAgentModel, "v2", reg.Dir(cfg.UserAgentModel, "v1"), files, man); err != nil {
		t.Fatal(err)
	}
	if !c.due() {
		t.Fatal("cycle not due after a new user agent replaced the refused one")
	}
	if res, err = c.RunOnce(context.Background()); err != nil {
		t.Fatalf("RunOnce on the new user agent: %v", err)
	}
	if res.Referee == nil || res.Referee.UserAgent != "v2" {
		t.Errorf("cycle after a new user agent: referee %+v; want a verdict on v2", res.Referee)
	}
	if n := logs.count("user-agent referee"); n != 2 {
		t.Errorf("referee measured %d times for two user agents; want twice", n)
	}
	if !res.Referee.Passed && c.due() {
		t.Error("cycle still due after judging the new user agent")
	}
}

// TestCycleKeepsACandidateItsRefereeDoesNotRank: the user agent passed as
// the referee of the serving version (a kept verdict), but as the referee
// of the trained candidate's turns it fails the production thresholds;
// the candidate is not published and the cycle's state says why.
func TestCycleKeepsACandidateItsRefereeDoesNotRank(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two models: skipped in -short")
	}
	cfg, store, root := cycleFixture(t)
	dataDir := t.TempDir()
	cfg.Referee = cycleReferee(t, cfg, root, rl.DefaultRefereeThresholds(), nil)
	kept, err := json.Marshal(cycleState{Referee: &RefereeVerdict{NPC: "v1", UserAgent: "v1", Passed: true, Reason: "kept"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, "cycle.json"), kept, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := NewCycle(cfg, store, root, dataDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	if len(res.Steps) == 0 || res.Referee == nil || !res.Referee.Passed {
		t.Fatalf("cycle trained %d steps with referee %+v; want it trained on the kept verdict", len(res.Steps), res.Referee)
	}
	v := res.CandidateReferee
	if v == nil || v.Passed || v.Report == nil || res.Published || res.Version != "" || !strings.HasPrefix(res.GateReason, "the referee gate on the candidate's turns: referee: ") {
		t.Fatalf("candidate's referee %+v, published %v (%q), version %q, players' gain %+v; want the candidate refused by the production thresholds and kept back", v, res.Published, res.GateReason, res.Version, res.GTDelta)
	}
	if got := registryVersions(t, root, "npc"); !slices.Equal(got, []string{"v1"}) {
		t.Errorf("npc versions = %v; want [v1]", got)
	}
	var st cycleState
	if raw, err := os.ReadFile(filepath.Join(dataDir, "cycle.json")); err != nil || json.Unmarshal(raw, &st) != nil || st.Last == nil || st.Last.Published || st.Last.Reason != res.GateReason {
		t.Errorf("cycle state %+v (err %v); want the last cycle unpublished with the reason %q", st.Last, err, res.GateReason)
	}
	// The refused candidate is kept for inspection, loadable as a version.
	if st.Last == nil || st.Last.KeptBack == "" || st.Last.KeptBack != res.KeptBack {
		t.Fatalf("kept back at %q, state %+v; want it in both", res.KeptBack, st.Last)
	}
	backReg, err := registry.NewLocal(c.KeptBackRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backReg.Verify(context.Background(), "npc", "kept-back"); err != nil || backReg.Dir("npc", "kept-back") != res.KeptBack {
		t.Fatalf("the kept-back candidate in its registry at %q: %v; want it verified at %q", backReg.Dir("npc", "kept-back"), err, res.KeptBack)
	}
	_, _, man, err := inference.LoadCheckpoint(res.KeptBack, inference.BackendConfig{})
	if err != nil {
		t.Fatalf("load the kept-back candidate: %v", err)
	}
	if man.Version != "kept-back" || man.Parent != "v1" || man.Metrics["ua_avg_l"] != res.Candidate.UAAvgL || man.Files[schema.CurvesFile] == "" {
		t.Errorf("kept-back manifest %+v; want version kept-back from v1 with the candidate's metrics and curves", man)
	}
}

// TestPlayersOverrule: a candidate the referee refused on its own turns
// is published only when the ground-truth players' paired CI of Avg.L is
// above zero, and the reason says which verdict decided.
func TestPlayersOverrule(t *testing.T) {
	tests := []struct {
		name    string
		gt      *rl.Comparison
		publish bool
		reason  string
	}{
		{"no players", nil, false, "the referee gate on the candidate's turns: τ low"},
		{"players lose", &rl.Comparison{DeltaAvgL: -0.3, CILow: -0.45, CIHigh: -0.15}, false, "the referee gate on the candidate's turns: τ low"},
		{"gain within noise", &rl.Comparison{DeltaAvgL: 0.1, CILow: -0.05, CIHigh: 0.25}, false, "the referee gate on the candidate's turns: τ low"},
		{"CI touches zero", &rl.Comparison{DeltaAvgL: 0.2, CILow: 0, CIHigh: 0.4}, false, "the referee gate on the candidate's turns: τ low"},
		{"players gain", &rl.Comparison{DeltaAvgL: 1.22, CILow: 1.01, CIHigh: 1.43}, true,
			"the referee gate on the candidate's turns refused (τ low), but the players gain +1.220 [+1.010, +1.430] exchanges from it, paired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			publish, reason := playersOverrule(tt.gt, "τ low")
			if publish != tt.publish || reason != tt.reason {
				t.Errorf("playersOverrule(%+v) = %v, %q; want %v, %q", tt.gt, publish, reason, tt.publish, tt.reason)
			}
		})
	}
}

func TestCycleDue(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name                  string
		everySessions, stored int
		every                 time.Duration
		minSessions           int
		sinceLast             time.Duration
		want                  bool
	}{
		{"enough sessions", 5, 5, 0, 0, 0, true},
		{"too few sessions", 5, 4, 0, 0, 0, false},
		{"time passed with enough sessions", 0, 3, time.Hour, 3, 2 * time.Hour, true},
		{"time passed with too few sessions", 0, 2, time.Hour, 3, 2 * time.Hour, false},
		{"time not passed", 0, 9, time.Hour, 3, 30 * time.Minute, false},
	}
	for _, tc := range tests {
		store, err := OpenStore(t.TempDir(), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Append(testDialogues(tc.stored, 3)); err != nil {
			t.Fatal(err)
		}
		cfg := DefaultCycleConfig()
		cfg.EverySessions, cfg.Every, cfg.MinSessions = tc.everySessions, tc.every, tc.minSessions
		c, err := NewCycle(cfg, store, t.TempDir(), t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		c.now = func() time.Time { return now }
		c.state.LastAt = now.Add(-tc.sinceLast)
		if got := c.due(); got != tc.want {
			t.Errorf("%s: due = %v; want %v", tc.name, got, tc.want)
		}
		store.Close()
	}
}
