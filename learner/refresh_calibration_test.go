package learner

import (
	"context"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

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
// (serveUserAgent) gives P_T = the calibrated share of its logit.
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
	want := simulator.Calibration{Scale: cal.Scale, Offset: cal.Offset}
	if want == (simulator.Calibration{Scale: 1}) {
		t.Fatalf("fitted calibration %+v is the identity: the test proves nothing", want)
	}
	man := res.Manifest
	if got := simulator.DefaultUserAgentConfig().ForVersion(man).Calibration; got != want || man.Metrics[simulator.MetricCalibrationDecisions] != float64(cal.Decisions) {
		t.Errorf("manifest of %s carries calibration %+v on %v decisions; want %+v on %d", res.Version, got, man.Metrics[simulator.MetricCalibrationDecisions], want, cal.Decisions)
	}

	ua, stop, err := serveUserAgent(filepath.Join(r.registry, r.cfg.SFT.Model, res.Version), DefaultCycleConfig().UserAgent, r.cfg.SFT.Backend, r.logger)
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
		if cw := want.TerminationShare(sc.Logit); math.Abs(sc.PT-cw) > 1e-12 || math.Abs(sc.PT-simulator.TerminationShare(sc.Logit, 0)) < 1e-9 {
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
	if ok, why := FidelityGate(r.cfg.RhoTolerance)(res.Before, res.After); !ok || !res.Published {
		t.Fatalf("refresh published %v (gate %q); the fidelity gate alone says %v (%s): want both to publish", res.Published, res.GateReason, ok, why)
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
	ctx := context.Background()
	ds := generatedCorpus(t, 16, 4, 4, 3)
	base := refereeFixture(t, ds)
	rc := DefaultRefreshConfig()
	rc.SFT = base
	rc.Referee = tinyReferee(3)
	rc.Referee.Thresholds = rl.RefereeThresholds{MinKendallTau: -1, MinKendallTauCILow: -2, MinPearson: -1, MinSimRealAvgL: 0, MaxSimRealAvgL: 100, Tolerance: 2}
	r := &refresher{cfg: rc, registry: base.Registry, dataDir: base.DataDir, logger: slog.New(slog.DiscardHandler), now: time.Now}
	m, tok, _, err := inference.LoadCheckpoint(filepath.Join(base.Registry, base.Model, "v1"), base.Backend)
	if err != nil {
		t.Fatal(err)
	}
	var found [2]gateFindings
	for i, minDecisions := range []int{1000, 10} {
		r.cfg.MinCalibrationDecisions = minDecisions
		if ok, why, err := r.gate("v1", ds, &found[i])(ctx, Metrics{}, Metrics{}, m, tok); err != nil || !ok {
			t.Fatalf("gate with min %d decisions = %v (%s), %v; want accepted", minDecisions, ok, why, err)
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
}
