package learner

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/simulator"
)

func TestHealthMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	meter := mp.Meter("learner-test")

	cfg := DefaultConfig()
	cfg.DataDir, cfg.Registry = t.TempDir(), t.TempDir()
	cfg.Consumer.Brokers = []string{"127.0.0.1:1"}
	l, err := New(cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.store.Close() })
	l.consumer.lag = map[int]int64{0: 3, 1: 0}
	l.refresher.status.Store(&refreshState{Refreshes: 2, Published: 1, LastAt: time.Unix(1_800_000_000, 0),
		Last: &refreshOutcome{Published: true, RhoBefore: 0.2, RhoAfter: 0.3, Loss: 1.5,
			RefereeAfter: &rl.RefereeReport{KendallTau: 0.31, KendallTauCILow: 0.22, Pearson: 0.6, SimRealAvgL: 1},
			Calibration:  &refreshCalibration{Fitted: true, Calibration: simulator.Calibration{Scale: 0.8, Offset: -0.5, OnLast: -0.9, OffTopic: 0.3}, Decisions: 240, Sessions: 60}}})
	reg, err := l.RegisterMetrics(meter)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister() //nolint:errcheck

	cycle, err := NewCycle(DefaultCycleConfig(), l.store, cfg.Registry, filepath.Join(cfg.DataDir, "cycle"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cycle.state.Cycles = 4
	cycle.state.Last = &cycleOutcome{Published: false, Candidate: CycleEval{UAAvgL: 5.5}, ParentEval: CycleEval{UAAvgL: 6}, Loss: 0.7}
	cycle.state.Referee = &RefereeVerdict{NPC: "v2", UserAgent: "v1", Passed: false, Reason: "referee: Pearson 0.2 < 0.60"}
	creg, err := cycle.RegisterMetrics(meter)
	if err != nil {
		t.Fatal(err)
	}
	defer creg.Unregister() //nolint:errcheck

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	points := map[string]int{}
	value := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Gauge[float64]:
				points[m.Name] = len(d.DataPoints)
				value[m.Name] = d.DataPoints[0].Value
			case metricdata.Sum[int64]:
				points[m.Name] = len(d.DataPoints)
				value[m.Name] = float64(d.DataPoints[0].Value)
			}
		}
	}
	// The refresh gate's points: 6 of fidelity, 6 of the referee and 16 of
	// the calibration (scale, offset, 3 early offsets, 11 weights, decisions).
	for name, want := range map[string]int{
		metricConsumerLag: 2, metricStored: 1, metricOpenSessions: 1, metricRefreshRuns: 1, metricRefreshPub: 1,
		metricRefreshLastRun: 1, metricRefreshAccepted: 1, metricRefreshGate: 6 + 6 + 18, metricRefreshLoss: 1,
		metricCycleRuns: 1, metricCycleLastRun: 1, metricCycleAccepted: 1, metricCycleGate: 8, metricCycleLoss: 1, metricCycleReferee: 1,
	} {
		if points[name] != want {
			t.Errorf("%s: %d points; want %d", name, points[name], want)
		}
	}
	for name, want := range map[string]float64{
		metricRefreshRuns: 2, metricRefreshLoss: 1.5, metricRefreshAccepted: 1,
		metricCycleRuns: 4, metricCycleLoss: 0.7, metricCycleAccepted: 0, metricCycleReferee: 0,
	} {
		if value[name] != want {
			t.Errorf("%s = %v; want %v", name, value[name], want)
		}
	}
}
