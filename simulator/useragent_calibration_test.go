package simulator

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/parleyhq/parley/schema"
)

func TestCalibrationZeroIsTheModel(t *testing.T) {
	for _, z := range []float64{-3, -0.5, 0, 1.2} {
		if got, want := (Calibration{}).TerminationShare(z, TurnFeatures{}), TerminationShare(z, 0); math.Abs(got-want) > 1e-15 {
			t.Errorf("zero calibration at logit %g: %g; want σ(z) = %g", z, got, want)
		}
	}
	if err := (Calibration{Scale: -1}).Validate(); err == nil {
		t.Error("a negative scale validated")
	}
	if err := (Calibration{Scale: 1, Offset: math.NaN()}).Validate(); err == nil {
		t.Error("a NaN offset validated")
	}
}

// TestFitCalibrationMovesSimulatedLengthToReal draws players who quit
// with a hazard h after each turn and a user agent whose logit ranks the
// turns right but says "quit" far too often (the simulated/real
// Avg.L of 0.7): the fitted calibration brings the expected length under
// the user agent to within 5 % of the players'.
func TestFitCalibrationMovesSimulatedLengthToReal(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const depth = 6
	type turn struct{ h, logit float64 }
	var turns []turn
	var ds []Decision
	for range 600 { // dialogues
		for k := 0; k < depth; k++ {
			h := 0.05 + 0.25*rng.Float64()
			// p = 2σ(z) of this z is 2h·1.8 before the clip: too eager to quit.
			pt := math.Min(1.8*h, 0.999)
			z := math.Log(pt/(1-pt)) + 0.3*rng.NormFloat64()
			turns = append(turns, turn{h, z})
			quit := rng.Float64() < h
			ds = append(ds, Decision{Logit: z, Quit: quit})
			if quit {
				break
			}
		}
	}
	// Expected length of a depth-L dialogue whose every turn has the mean
	// hazard: Σ_{k<L} Π_{j≤k} (1 − p).
	expLen := func(p func(turn) float64) float64 {
		mean := 0.0
		for _, x := range turns {
			mean += p(x) / float64(len(turns))
		}
		l, survive := 0.0, 1.0
		for range depth {
			l += survive
			survive *= 1 - mean
		}
		return l
	}
	real := expLen(func(x turn) float64 { return x.h })
	before := expLen(func(x turn) float64 {
		return EndProbability(Calibration{}.TerminationShare(x.logit, TurnFeatures{}), 1)
	})
	c, err := FitCalibration(ds)
	if err != nil {
		t.Fatal(err)
	}
	after := expLen(func(x turn) float64 { return EndProbability(c.TerminationShare(x.logit, TurnFeatures{}), 1) })
	t.Logf("calibration %+v: simulated/real expected length %.3f before, %.3f after", c, before/real, after/real)
	if math.Abs(after/real-1) > 0.05 || math.Abs(after/real-1) >= math.Abs(before/real-1) {
		t.Errorf("simulated/real %.3f before and %.3f after calibration %+v; want within 5 %% of 1 and closer", before/real, after/real, c)
	}
	if _, err := FitCalibration([]Decision{{Logit: 1, Quit: true}}); err == nil {
		t.Error("fitted on quits alone")
	}
}

func TestDecisionQueries(t *testing.T) {
	ex := []schema.Exchange{{Turn: 1, User: "a", NPC: "A."}, {Turn: 2, User: "b", NPC: "B."}, {Turn: 3, User: "c", NPC: "C."}}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	risks := []float64{0.1, 0.2, 0.3}
	for _, tt := range []struct {
		reason schema.EndReason
		want   []bool
	}{
		{schema.EndPlayerEnded, []bool{false, false, true}},
		{schema.EndMaxTurns, []bool{false, false}}, // the last exchange is censored
	} {
		d := schema.Dialogue{SessionID: "s", PlayerID: "p", Started: start, Exchanges: ex, Reason: tt.reason}
		qs, quit := DecisionQueries(d, nil, risks)
		if len(qs) != len(tt.want) {
			t.Fatalf("%s: %d queries; want %d", tt.reason, len(qs), len(tt.want))
		}
		for k, q := range qs {
			if quit[k] != tt.want[k] || len(q.Current.Exchanges) != k+1 || len(q.Current.Risks) != k {
				t.Errorf("%s query %d: quit %v, %d exchanges, risks %v; want %v, %d, %d", tt.reason, k, quit[k], len(q.Current.Exchanges), q.Current.Risks, tt.want[k], k+1, k)
			}
		}
	}
}

func TestUserAgentConfigForVersion(t *testing.T) {
	base := DefaultUserAgentConfig()
	base.Calibration = Calibration{Scale: 2}
	fitted := schema.Manifest{Metrics: map[string]float64{"rho": 0.4, MetricCalibrationScale: 0.7, MetricCalibrationOffset: -1.5, MetricCalibrationDecisions: 120}}
	if got, err := base.ForVersion("", fitted); err != nil || got.Calibration != (Calibration{Scale: 0.7, Offset: -1.5}) {
		t.Errorf("ForVersion(fitted).Calibration = %+v (err %v); want {0.7 -1.5}", got.Calibration, err)
	}
	full := Calibration{Scale: 1.3, Offset: 0.9, Early: [3]float64{-0.5, -0.2, 0.1}, OnLast: -0.7, OffTopic: 0.2, Repeat: 0.8,
		Question: 0.1, OnEarlier: -0.3, NamesNew: 0.4, NoTopic: 0.5, AsksNamed: -0.6, NamesKnown: -0.2, Tone: 0.3, PlayerTone: 0.25, Wording: 0.45}
	if got, err := base.ForVersion("", schema.Manifest{Metrics: full.Metrics(50)}); err != nil || got.Calibration != full {
		t.Errorf("ForVersion(%v).Calibration = %+v (err %v); want %+v back", full.Metrics(50), got.Calibration, err, full)
	}
	if got, err := base.ForVersion("", schema.Manifest{Metrics: map[string]float64{"rho": 0.4}}); err != nil || got.Calibration != base.Calibration {
		t.Errorf("ForVersion(uncalibrated).Calibration = %+v (err %v); want the config's %+v", got.Calibration, err, base.Calibration)
	}
}
