package learner

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

func TestFidelityGate(t *testing.T) {
	m := func(rho float64, defined bool, ll float64) Metrics {
		return Metrics{Rho: rho, RhoDefined: defined, EndLogLoss: ll}
	}
	tests := []struct {
		name          string
		before, after Metrics
		want          bool
	}{
		{"ρ rose", m(0.2, true, 0.5), m(0.4, true, 0.9), true},
		{"ρ fell", m(0.4, true, 0.5), m(0.2, true, 0.1), false},
		{"ρ fell within tolerance, log-loss better", m(0.40, true, 0.5), m(0.39, true, 0.4), true},
		{"ρ rose within tolerance, log-loss worse", m(0.40, true, 0.5), m(0.41, true, 0.6), false},
		{"ρ equal, log-loss equal", m(0.4, true, 0.5), m(0.4, true, 0.5), true},
		{"ρ lost", m(0.4, true, 0.5), m(0, false, 0.1), false},
		{"ρ gained", m(0, false, 0.5), m(-0.9, true, 0.9), true},
		{"no ρ, log-loss better", m(0, false, 0.5), m(0, false, 0.4), true},
		{"no ρ, log-loss worse", m(0, false, 0.5), m(0, false, 0.6), false},
	}
	gate := FidelityGate(0.02)
	for _, tc := range tests {
		if got, why := gate(tc.before, tc.after); got != tc.want {
			t.Errorf("%s: gate = %v (%s); want %v", tc.name, got, why, tc.want)
		}
	}
}

// TestFidelityGatePairsTheDialogues: with the dialogues behind ρ, the gate
// judges ρ's change against the bootstrap's interval over players. A fall
// within the noise of 15 players leaves the decision to the log-loss, which
// the point values alone would not; a fall beyond the noise of 200 players
// refuses however the log-loss moved.
func TestFidelityGatePairsTheDialogues(t *testing.T) {
	paired := func(players int, noiseBefore, noiseAfter float64) (before, after Metrics) {
		rng := rand.New(rand.NewPCG(7, uint64(players)))
		var all []int
		for i := range players {
			for range 2 {
				r := float64(1 + rng.IntN(8))
				b := r + noiseBefore*rng.NormFloat64()
				a := b + noiseAfter*rng.NormFloat64()
				p := fmt.Sprintf("p%d", i)
				all = append(all, len(all))
				before.lengths = append(before.lengths, dialogueLength{player: p, sim: b, real: r})
				after.lengths = append(after.lengths, dialogueLength{player: p, sim: a, real: r})
			}
		}
		var err error
		if before.Rho, err = lengthsRho(before.lengths, all); err != nil {
			t.Fatal(err)
		}
		if after.Rho, err = lengthsRho(after.lengths, all); err != nil {
			t.Fatal(err)
		}
		before.RhoDefined, after.RhoDefined, before.EndLogLoss, after.EndLogLoss = true, true, 0.40, 0.39
		return before, after
	}
	gate := FidelityGate(0)

	before, after := paired(15, 2, 0.3)
	if after.Rho >= before.Rho {
		t.Fatalf("ρ %.3f → %.3f; the case needs a fall", before.Rho, after.Rho)
	}
	if ok, why := gate(before, after); !ok {
		t.Errorf("a fall of ρ within the noise of 15 players refused: %s", why)
	}
	before.lengths, after.lengths = nil, nil
	if ok, why := gate(before, after); ok {
		t.Errorf("without the dialogues a fall of ρ passed: %s", why)
	}

	before, after = paired(200, 1, 3)
	if ok, why := gate(before, after); ok || !strings.Contains(why, "fell beyond") {
		t.Errorf("a fall of ρ beyond the noise of 200 players passed: %v (%s)", ok, why)
	}
}

func registryVersions(t *testing.T, root, model string) []string {
	t.Helper()
	reg, err := registry.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	mans, err := reg.List(context.Background(), model)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range mans {
		out = append(out, m.Version)
	}
	return out
}

// TestRefreshThatWorsensFidelityIsNotPublished fine-tunes the current user
// agent on a window in which no training player ever ends a conversation
// (every training dialogue relabelled max_turns) while the held-out players
// keep their real endings: the refreshed agent predicts endings worse, and
// the registry must still hold only the current version.
func TestRefreshThatWorsensFidelityIsNotPublished(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two models: skipped in -short")
	}
	ctx := context.Background()
	base := tinySFTConfig(t, RoleUser)
	base.Registry = filepath.Join(base.DataDir, "registry")
	base.Steps, base.CheckpointEvery = 16, 16
	ds := generatedCorpus(t, 16, 4, 4, 3)
	v1, err := TrainSFT(ctx, base, ds, nil)
	if err != nil || !v1.Published {
		t.Fatalf("train v1: published %v, %v", v1 != nil && v1.Published, err)
	}

	window := generatedCorpus(t, 16, 4, 4, 4)
	for i, d := range window {
		window[i].SessionID = "w-" + d.SessionID
		if !heldOutPlayer(d.PlayerID, base.HeldOutShare, base.Seed) {
			window[i].Reason = schema.EndMaxTurns
		}
	}
	store, err := OpenStore(filepath.Join(base.DataDir, "sessions"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := store.Append(ds); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(window); err != nil {
		t.Fatal(err)
	}
	rc := DefaultRefreshConfig()
	rc.SFT = base
	rc.SFT.Steps, rc.SFT.CheckpointEvery = 24, 24
	rc.SFT.Train.LearningRate = 1e-2
	rc.ReplayShare = 0
	rc.RhoTolerance = 2 // ρ of these tiny models is noise: let the log-loss decide
	r := &refresher{cfg: rc, store: store, registry: base.Registry, dataDir: base.DataDir, logger: slog.New(slog.DiscardHandler), now: time.Now}
	if err := r.load(); err != nil {
		t.Fatal(err)
	}
	r.state.TrainedUpTo = len(ds)
	res, err := r.refresh(ctx)
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	last := r.state.Last
	t.Logf("refresh: log-loss %.4f → %.4f, ρ %.3f → %.3f; gate: %s", last.EndLogLossBefore, last.EndLogLossAfter, last.RhoBefore, last.RhoAfter, res.GateReason)
	if last.EndLogLossAfter <= last.EndLogLossBefore {
		t.Fatalf("the corrupted window did not make termination prediction worse (%.4f → %.4f): the test proves nothing",
			last.EndLogLossBefore, last.EndLogLossAfter)
	}
	if res.Published {
		t.Errorf("a refresh with worse fidelity was published as %s", res.Version)
	}
	if got := registryVersions(t, base.Registry, base.Model); !slices.Equal(got, []string{"v1"}) {
		t.Errorf("registry holds %v; want only v1", got)
	}
	if r.state.TrainedUpTo != store.Len() || r.state.Refreshes != 1 || r.state.Published != 0 {
		t.Errorf("refresh state %+v; want the window consumed, 1 refresh, none published", r.state)
	}
}

// TestLearnerEndToEnd runs the learner against a broker: it consumes a
// generated corpus from Kafka and, the count trigger reached, trains the
// first user agent from scratch and publishes it.
func TestLearnerEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model: skipped in -short")
	}
	k := testenv.StartKafka(t)
	topic := k.Topic("sessions")
	ds := generatedCorpus(t, 12, 3, 4, 5)
	var events []schema.SessionEvent
	rng := rand.New(rand.NewPCG(1, 1))
	for _, d := range ds {
		es, err := simulator.DialogueEvents(d, rng)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, es...)
	}
	produce(t, k, topic, events)

	sft := tinySFTConfig(t, RoleUser)
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Registry = filepath.Join(cfg.DataDir, "registry")
	cfg.Consumer = testConsumerConfig(k, topic)
	cfg.Refresh.SFT = sft
	cfg.Refresh.EverySessions, cfg.Refresh.Every, cfg.Refresh.Poll = len(ds), 0, 50*time.Millisecond
	cfg.Refresh.RhoTolerance = 2
	l, err := New(cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	for len(registryVersions(t, cfg.Registry, sft.Model)) == 0 {
		select {
		case err := <-done:
			t.Fatalf("learner stopped before publishing: %v", err)
		case <-ctx.Done():
			t.Fatalf("no user agent published in time; %d of %d sessions stored", l.Store().Len(), len(ds))
		case <-time.After(100 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if l.Store().Len() != len(ds) {
		t.Errorf("stored %d sessions; want %d", l.Store().Len(), len(ds))
	}
}

// refereeFixture publishes tiny v1s of the NPC and the user agent trained
// on ds and returns the user agent's SFT template.
func refereeFixture(t *testing.T, ds []schema.Dialogue) SFTConfig {
	t.Helper()
	ctx := context.Background()
	ua := tinySFTConfig(t, RoleUser)
	ua.Registry = filepath.Join(ua.DataDir, "registry")
	npc := tinySFTConfig(t, RoleNPC)
	npc.Registry, npc.DataDir = ua.Registry, ua.DataDir
	for _, c := range []SFTConfig{npc, ua} {
		c.Steps, c.CheckpointEvery = 16, 16
		if res, err := TrainSFT(ctx, c, ds, nil); err != nil || !res.Published {
			t.Fatalf("train %s v1: published %v, %v", c.Role, res != nil && res.Published, err)
		}
	}
	return ua
}

// tinyReferee sets rc's referee, and the NPC's and the user agent's turns
// it plays, small enough for a test.
func tinyReferee(rc *RefreshConfig, seed uint64) {
	rc.Referee = DefaultRefereeGateConfig()
	rc.Referee.Players.Size, rc.Referee.PlayersSeed = 16, seed
	rc.NPC.Policy.Sampling.MaxTokens, rc.NPC.UserAgent.Sampling.MaxTokens = 8, 4
	rc.Referee.Measure = rl.RefereeConfig{Groups: 6, Siblings: 4, MaxContext: 1, Dialogues: 6, Depth: 3, Resamples: 100, Parallel: 4, Seed: 1}
}

// looseRefereeThresholds are referee thresholds any agent meets.
func looseRefereeThresholds() rl.RefereeThresholds {
	return rl.RefereeThresholds{MinKendallTau: -1, MinKendallTauCILow: -2, MinPearson: -1, MinSimRealAvgL: 0, MaxSimRealAvgL: 100, Tolerance: 2}
}

// TestRefreshRefusedByTheReferee refreshes the user agent with a learning
// rate too small to change it, so the fidelity gate sees the same agent
// and accepts, while a tiny user agent is far from the production
// referee's thresholds: the refresh is measured, logged in the state and
// not published. The same gate with thresholds any agent meets accepts.
func TestRefreshRefusedByTheReferee(t *testing.T) {
	if testing.Short() {
		t.Skip("trains three models: skipped in -short")
	}
	ctx := context.Background()
	ds := generatedCorpus(t, 16, 4, 4, 3)
	base := refereeFixture(t, ds)
	store, err := OpenStore(filepath.Join(base.DataDir, "sessions"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := store.Append(ds); err != nil {
		t.Fatal(err)
	}
	rc := DefaultRefreshConfig()
	rc.SFT = base
	rc.SFT.Steps, rc.SFT.CheckpointEvery, rc.SFT.Train.LearningRate = 2, 2, 1e-12
	rc.ReplayShare = 0
	tinyReferee(&rc, 3)
	r := &refresher{cfg: rc, store: store, registry: base.Registry, dataDir: base.DataDir, logger: slog.New(slog.DiscardHandler), now: time.Now}
	if err := r.load(); err != nil {
		t.Fatal(err)
	}
	res, err := r.refresh(ctx)
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	t.Logf("gate: %s", res.GateReason)
	last := r.state.Last
	if last == nil || last.RefereeBefore == nil || last.RefereeAfter == nil {
		t.Fatalf("refresh state %+v; want both referee reports", last)
	}
	if res.Published || !strings.Contains(res.GateReason, "referee: ") || !strings.Contains(res.GateReason, "< 0.30") {
		t.Errorf("refresh published %v (gate %q); want it refused by the referee's τ threshold", res.Published, res.GateReason)
	}
	if got := registryVersions(t, base.Registry, base.Model); !slices.Equal(got, []string{"v1"}) {
		t.Errorf("registry holds %v; want only v1", got)
	}
	if g := last.RefereeAfter.Groups; g != rc.Referee.Measure.Groups || last.RefereeAfter.Turns != g*rc.Referee.Measure.Siblings {
		t.Errorf("referee measured %d groups, %d turns; want %d groups of %d", g, last.RefereeAfter.Turns, rc.Referee.Measure.Groups, rc.Referee.Measure.Siblings)
	}

	r.cfg.Referee.Thresholds = looseRefereeThresholds()
	var found gateFindings
	m, tok, _, err := inference.LoadCheckpoint(filepath.Join(base.Registry, base.Model, "v1"), base.Backend)
	if err != nil {
		t.Fatal(err)
	}
	v, err := r.gate("v1", ds, &found)(ctx, Metrics{}, Metrics{}, m, tok)
	before, after := found.refereeBefore, found.refereeAfter
	if err != nil || !v.Publish || before == nil || after == nil {
		t.Errorf("gate with loose thresholds = %v (%s), %v; reports %v, %v; want it to measure both and accept", v.Publish, v.Reason, err, before, after)
	}
}

// TestRefereeGateOffOrSkipped checks that the referee leaves the fidelity
// gate's verdict alone when it is off (no population) or has no NPC
// version to write the siblings: the gate judges the current user agent
// against itself and accepts.
func TestRefereeGateOffOrSkipped(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model: skipped in -short")
	}
	ds := generatedCorpus(t, 16, 4, 4, 3)
	ua := tinySFTConfig(t, RoleUser)
	ua.Registry = filepath.Join(ua.DataDir, "registry")
	ua.Steps, ua.CheckpointEvery = 16, 16
	v1, err := TrainSFT(context.Background(), ua, ds, nil)
	if err != nil || !v1.Published {
		t.Fatalf("train v1: published %v, %v", v1 != nil && v1.Published, err)
	}
	rc := DefaultRefreshConfig()
	rc.SFT = ua
	r := &refresher{cfg: rc, registry: ua.Registry, dataDir: ua.DataDir, logger: slog.New(slog.DiscardHandler), now: time.Now}
	for _, tc := range []struct {
		name    string
		players int
		why     string
	}{{"off", 0, ""}, {"no npc version", 16, "referee skipped: no npc version"}} {
		r.cfg.Referee.Players.Size = tc.players
		var found gateFindings
		v, err := r.gate(v1.Version, ds, &found)(context.Background(), Metrics{}, Metrics{}, v1.TrainedModel, v1.Tokenizer)
		ok, why := v.Publish, v.Reason
		before, after := found.refereeBefore, found.refereeAfter
		if err != nil || !ok || !strings.Contains(why, tc.why) || before != nil || after != nil {
			t.Errorf("%s: gate = %v (%s), %v, reports %v %v; want accepted with %q and no reports", tc.name, ok, why, err, before, after, tc.why)
		}
		if tc.players == 0 && strings.Contains(why, "referee") {
			t.Errorf("%s: gate reason %q mentions the referee", tc.name, why)
		}
	}
}

// calibrationRefresher is a refresher of a tiny user agent, trained from
// scratch on ds with the referee off, fitting its calibration on as few as
// 10 decisions.
func calibrationRefresher(t *testing.T, ds []schema.Dialogue) *refresher {
	t.Helper()
	base := tinySFTConfig(t, RoleUser)
	base.Registry = filepath.Join(base.DataDir, "registry")
	store, err := OpenStore(filepath.Join(base.DataDir, "sessions"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if _, err := store.Append(ds); err != nil {
		t.Fatal(err)
	}
	rc := DefaultRefreshConfig()
	rc.SFT = base
	rc.SFT.Steps, rc.SFT.CheckpointEvery = 16, 16
	rc.ReplayShare = 0
	rc.RhoTolerance = 2 // ρ of these tiny models is noise: let the log-loss decide
	rc.Referee.Players.Size = 0
	rc.MinCalibrationDecisions = 10
	r := &refresher{cfg: rc, store: store, registry: base.Registry, dataDir: base.DataDir, logger: slog.New(slog.DiscardHandler), now: time.Now}
	if err := r.load(); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRefreshPublishesCalibratedUserAgent refreshes the user agent on
// sessions in which players quit and continue: the version carries the
// fitted calibration in its manifest, the refresh state exposes it, and
// the user agent that the AT-GRPO cycle serves from that version
// (serveUserAgent) gives P_T = the calibrated share of its logit, and
// `parley eval` (EvaluateModel) measures it calibrated.
func TestRefreshPublishesCalibratedUserAgent(t *testing.T) {
	ctx := context.Background()
	ds := generatedCorpus(t, 16, 4, 4, 3)
	r := calibrationRefresher(t, ds)
	res, err := r.refresh(ctx)
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if !res.Published {
		t.Fatalf("refresh not published: %s", res.GateReason)
	}
	cal := r.state.Last.Calibration
	if cal == nil || !cal.Fitted || cal.Decisions < r.cfg.MinCalibrationDecisions {
		t.Fatalf("refresh state calibration %+v; want one fitted on at least %d decisions", cal, r.cfg.MinCalibrationDecisions)
	}
	if !strings.Contains(res.GateReason, "calibration scale") {
		t.Errorf("gate reason %q does not report the calibration", res.GateReason)
	}
	t.Logf("calibration: scale %.2f, offset %.2f on %d decisions of %d held-out sessions; gate: %s", cal.Scale, cal.Offset, cal.Decisions, cal.Sessions, res.GateReason)
	want := cal.Calibration
	if want == (simulator.Calibration{Scale: 1}) {
		t.Fatalf("fitted calibration %+v is the identity: the test proves nothing", want)
	}
	man := res.Manifest
	dir := filepath.Join(r.registry, r.cfg.SFT.Model, res.Version)
	served, err := simulator.DefaultUserAgentConfig().ForVersion(dir, man)
	if err != nil {
		t.Fatal(err)
	}
	if got := served.Calibration; got != want || man.Metrics[simulator.MetricCalibrationDecisions] != float64(cal.Decisions) {
		t.Errorf("manifest of %s carries calibration %+v on %v decisions; want %+v on %d", res.Version, got, man.Metrics[simulator.MetricCalibrationDecisions], want, cal.Decisions)
	}
	if cal.TopicWords == 0 || served.WordTopics == nil || len(served.WordTopics.Words) != cal.TopicWords {
		t.Fatalf("%s serves %v word topics; want the %d words the refresh learned", res.Version, served.WordTopics, cal.TopicWords)
	}
	if len(served.WordTopics.Tone) == 0 || want.Tone == 0 || !strings.Contains(res.GateReason, "with a tone") {
		t.Errorf("%s serves the tone of %d words, weighed %.2f (gate: %s); want the tone the refresh learned, weighed",
			res.Version, len(served.WordTopics.Tone), want.Tone, res.GateReason)
	}
	if len(served.WordTopics.Wording) == 0 || want.Wording == 0 || !strings.Contains(res.GateReason, "NPC words with a weight") {
		t.Errorf("%s serves the wording of %d words, weighed %.2f (gate: %s); want the wording the refresh learned, weighed",
			res.Version, len(served.WordTopics.Wording), want.Wording, res.GateReason)
	}

	met, err := EvaluateModel(ctx, dir, ds, EvalOptionsFrom(r.cfg.SFT), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("held-out dialogues as served: simulated/real Avg.L %.2f/%.2f, P_T log-loss %.3f", met.AvgL, met.RealAvgL, met.TermLogLoss)
	if met.PPL != res.After.PPL {
		t.Errorf("EvaluateModel of %s: PPL %v; want the run's %v", res.Version, met.PPL, res.After.PPL)
	}
	// The run measured no fidelity as trained: the gate measures it as served.
	if res.After.AvgL != 0 || res.After.RhoDefined || res.After.Replies != 0 {
		t.Errorf("the run measured its agent's fidelity as trained (Avg.L %v, ρ defined %v, %d replies); want it left to the gate",
			res.After.AvgL, res.After.RhoDefined, res.After.Replies)
	}
	// The gate judged, and the manifest keeps, the agent as served.
	if last := r.state.Last; !near(last.RhoAfter, met.Rho) || !near(last.EndLogLossAfter, met.EndLogLoss) || !near(man.Metrics["avg_l"], met.AvgL) || !near(man.Metrics["dist1"], met.Dist1) {
		t.Errorf("gate's ρ %v, log-loss %v and manifest Avg.L %v, Dist-1 %v; want those of %s as served: %v, %v, %v, %v",
			last.RhoAfter, last.EndLogLossAfter, man.Metrics["avg_l"], man.Metrics["dist1"], res.Version, met.Rho, met.EndLogLoss, met.AvgL, met.Dist1)
	}
	ua, stop, err := serveUserAgent(dir, DefaultCycleConfig().UserAgent, r.cfg.SFT.Backend, r.logger)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	qs, _ := simulator.DecisionQueries(ds[0], nil, simulator.TrainingRisks(ds, r.cfg.SFT.MaxTurns))
	scores, err := ua.Terminations(ctx, 0, qs)
	if err != nil {
		t.Fatal(err)
	}
	for i, sc := range scores {
		var player []string
		for _, x := range qs[i].Current.Exchanges {
			player = append(player, x.User)
		}
		rel := served.WordTopics.Features(nil, player, qs[i].Current.Exchanges[len(player)-1].NPC)
		if cw := want.TerminationShare(sc.Logit, rel); math.Abs(sc.PT-cw) > 1e-12 || math.Abs(sc.PT-simulator.TerminationShare(sc.Logit, 0)) < 1e-9 {
			t.Errorf("decision %d: P_T = %v for logit %v; want the calibrated %v, not σ(z) = %v", i, sc.PT, sc.Logit, cw, simulator.TerminationShare(sc.Logit, 0))
		}
	}
}

// TestRefreshWithoutQuitsKeepsZeroCalibration refreshes on sessions no
// player ended: nothing to fit a calibration on, so the refresh says so,
// keeps the zero calibration and publishes under the fidelity gate alone.
func TestRefreshWithoutQuitsKeepsZeroCalibration(t *testing.T) {
	ds := generatedCorpus(t, 16, 4, 4, 3)
	for i := range ds {
		ds[i].Reason = schema.EndMaxTurns
	}
	r := calibrationRefresher(t, ds)
	res, err := r.refresh(context.Background())
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if !res.Published {
		t.Fatalf("refresh not published (gate %q); want the fidelity gate alone to publish the first agent", res.GateReason)
	}
	if cal := r.state.Last.Calibration; cal == nil || cal.Fitted || cal.Scale != 0 || cal.Offset != 0 {
		t.Errorf("refresh state calibration %+v; want none fitted", cal)
	}
	if !strings.Contains(res.GateReason, "calibration kept at zero") {
		t.Errorf("gate reason %q does not say the calibration was kept at zero", res.GateReason)
	}
	if _, ok := res.Manifest.Metrics[simulator.MetricCalibrationScale]; ok {
		t.Errorf("manifest metrics %v carry a calibration", res.Manifest.Metrics)
	}
	if got := registryVersions(t, r.registry, r.cfg.SFT.Model); len(got) != 1 || got[0] != res.Version {
		t.Errorf("registry holds %v; want only %s", got, res.Version)
	}
}

// TestRefereeJudgesTheCalibratedAgent runs the referee gate on the same
// refreshed agent twice, once with too few decisions to calibrate and once
// calibrated: the current agent's report is the same, the refreshed
// agent's simulated Avg.L moves with its calibration.
func TestRefereeJudgesTheCalibratedAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two models: skipped in -short")
	}
	ds := generatedCorpus(t, 16, 4, 4, 3)
	rc := DefaultRefreshConfig()
	rc.SFT = refereeFixture(t, ds)
	tinyReferee(&rc, 3)
	rc.Referee.Thresholds = looseRefereeThresholds()
	r := &refresher{cfg: rc, registry: rc.SFT.Registry, dataDir: rc.SFT.DataDir, logger: slog.New(slog.DiscardHandler), now: time.Now}
	m, tok, _, err := inference.LoadCheckpoint(filepath.Join(rc.SFT.Registry, rc.SFT.Model, "v1"), rc.SFT.Backend)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var found [2]gateFindings
	for i, minDecisions := range []int{1000, 10} {
		r.cfg.MinCalibrationDecisions = minDecisions
		v, err := r.gate("v1", ds, &found[i])(ctx, Metrics{}, Metrics{}, m, tok)
		if err != nil || !v.Publish {
			t.Fatalf("gate with min %d decisions = %v (%s), %v; want accepted", minDecisions, v.Publish, v.Reason, err)
		}
		if fitted := v.Metrics[simulator.MetricCalibrationScale] != 0; fitted != found[i].calibration.Fitted {
			t.Errorf("gate with min %d decisions: manifest metrics %v for calibration %+v", minDecisions, v.Metrics, *found[i].calibration)
		}
	}
	uncal, cal := found[0], found[1]
	if uncal.calibration.Fitted || !cal.calibration.Fitted {
		t.Fatalf("calibrations %+v and %+v; want the first unfitted, the second fitted", uncal.calibration, cal.calibration)
	}
	t.Logf("refreshed agent's sim/real Avg.L %.3f uncalibrated, %.3f with %+v", uncal.refereeAfter.SimRealAvgL, cal.refereeAfter.SimRealAvgL, *cal.calibration)
	if *uncal.refereeBefore != *cal.refereeBefore {
		t.Errorf("the current agent's reports differ: %+v and %+v", *uncal.refereeBefore, *cal.refereeBefore)
	}
	if uncal.refereeAfter.SimAvgL == cal.refereeAfter.SimAvgL {
		t.Errorf("the refreshed agent's simulated Avg.L is %.3f with and without its calibration; want the referee to judge the calibrated agent", cal.refereeAfter.SimAvgL)
	}
	// The fidelity gate too: the refreshed agent here has v1's weights, so
	// uncalibrated it measures as v1 does, calibrated it does not.
	served, err := EvaluateModel(ctx, filepath.Join(rc.SFT.Registry, rc.SFT.Model, "v1"), ds, EvalOptionsFrom(rc.SFT), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b := cal.before; !near(b.Rho, served.Rho) || !near(b.EndLogLoss, served.EndLogLoss) || !near(b.AvgL, served.AvgL) {
		t.Errorf("fidelity gate's current agent: ρ %v, log-loss %v, Avg.L %v; want v1 as served: %v, %v, %v", b.Rho, b.EndLogLoss, b.AvgL, served.Rho, served.EndLogLoss, served.AvgL)
	}
	if !near(uncal.after.AvgL, uncal.before.AvgL) || near(cal.after.AvgL, cal.before.AvgL) {
		t.Errorf("fidelity gate's simulated Avg.L: %v vs v1's %v uncalibrated, %v vs %v calibrated; want equal, then different",
			uncal.after.AvgL, uncal.before.AvgL, cal.after.AvgL, cal.before.AvgL)
	}
}
