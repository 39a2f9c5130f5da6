package abtest

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/parleyhq/parley/schema"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// fixtureData is DATA of testdata/reference.py: (arm, turns, reward) in the
// order the sessions ended, one minute apart.
var fixtureData = []struct {
	arm    string
	turns  int
	reward float64
}{
	{"stable", 3, 1.2}, {"canary", 6, 2.5}, {"stable", 5, 2.0}, {"canary", 8, 3.1},
	{"stable", 2, 0.4}, {"canary", 5, 1.9}, {"stable", 8, 3.3}, {"canary", 9, 3.8},
	{"stable", 6, 2.2}, {"canary", 7, 2.9}, {"stable", 4, 1.5}, {"canary", 10, 4.4},
	{"stable", 7, 2.8}, {"canary", 4, 1.1}, {"stable", 5, 1.7}, {"canary", 8, 3.0},
	{"stable", 3, 0.9}, {"canary", 6, 2.6}, {"stable", 6, 2.4}, {"canary", 7, 3.2},
	{"stable", 9, 3.9}, {"canary", 9, 3.5}, {"stable", 4, 1.6}, {"canary", 11, 4.9},
	{"stable", 5, 2.1}, {"canary", 5, 2.0}, {"stable", 1, 0.1}, {"canary", 7, 2.7},
	{"stable", 6, 2.3}, {"canary", 8, 3.4}, {"canary", 6, 2.2}, {"canary", 9, 3.6},
	{"canary", 10, 4.1},
}

// fixtureSessions builds the sessions of reference.py: session i ends at
// minute i, its exchange k at i·60 − (turns−k)·10 seconds with latency
// 50 + (31i + 17k) mod 200 ms, refused when (i+k) mod 13 = 0; sessions with
// i mod 7 = 3 end with an error.
func fixtureSessions() []Session {
	var out []Session
	for i, d := range fixtureData {
		end := t0.Add(time.Duration(i) * time.Minute)
		s := Session{
			SessionID: fmt.Sprintf("s%02d", i), PlayerID: fmt.Sprintf("p%02d", i), ExperimentID: "e1",
			Arm: d.arm, Version: map[string]string{"stable": "v1", "canary": "v2"}[d.arm],
			Started: end.Add(-time.Duration(d.turns) * 10 * time.Second), Ended: end,
			Turns: d.turns, Reason: schema.EndPlayerEnded, Reward: d.reward, HasReward: true,
		}
		if i%7 == 3 {
			s.Reason = schema.EndError
		}
		for k := 1; k <= d.turns; k++ {
			e := Exchange{At: end.Add(-time.Duration(d.turns-k) * 10 * time.Second),
				LatencyMS: int64(50 + (i*31+k*17)%200), Safety: schema.SafetyNone}
			if (i+k)%13 == 0 {
				e.Safety = schema.SafetyRefused
			}
			s.Exchanges = append(s.Exchanges, e)
		}
		out = append(out, s)
	}
	return out
}

func fixtureConfig() Config {
	return Config{Alpha: 0.05, MixtureSD: 0.5, SeqMinPlayers: 5, GuardrailAlpha: 0.02}
}

// TestAnalyzeMatchesReference checks every statistic against the values
// printed by `/usr/bin/python3 rollout/abtest/testdata/reference.py`
// (scipy 1.10.1 and numpy 1.24.2 from Debian bookworm's python3-scipy) and,
// for the one-look mSPRT, by testdata/player_level.py. Each fixture player
// plays one session, so the player-level (delta-method) statistics equal
// the session-level ones scipy computes.
func TestAnalyzeMatchesReference(t *testing.T) {
	now := t0.Add(time.Duration(len(fixtureData)) * time.Minute)
	r, err := Analyze("e1", fixtureSessions(), fixtureConfig(), now)
	if err != nil {
		t.Fatal(err)
	}
	const tol = 1e-9
	checks := []struct {
		name      string
		got, want float64
	}{
		// stable L: n=15 mean=4.933333333333334 sd=2.1865389045137933 lo=3.7224684481006225 hi=6.144198218566045
		{"stable AvgL.N", float64(r.Stable.AvgL.N), 15},
		{"stable AvgL.Mean", r.Stable.AvgL.Mean, 4.933333333333334},
		{"stable AvgL.SE", r.Stable.AvgL.SE, 2.1865389045137933 / math.Sqrt(15)},
		{"stable AvgL.Lo", r.Stable.AvgL.Lo, 3.7224684481006225},
		{"stable AvgL.Hi", r.Stable.AvgL.Hi, 6.144198218566045},
		// stable R: n=15 mean=1.8933333333333335 sd=1.0208306608322646 lo=1.3280161563011903 hi=2.4586505103654765
		{"stable AvgR.Mean", r.Stable.AvgR.Mean, 1.8933333333333335},
		{"stable AvgR.SE", r.Stable.AvgR.SE, 1.0208306608322646 / math.Sqrt(15)},
		{"stable AvgR.Lo", r.Stable.AvgR.Lo, 1.3280161563011903},
		{"stable AvgR.Hi", r.Stable.AvgR.Hi, 2.4586505103654765},
		// canary L: n=18 mean=7.5 sd=1.9478494929174643 lo=6.5313572356224885 hi=8.468642764377512
		{"canary AvgL.N", float64(r.Canary.AvgL.N), 18},
		{"canary AvgL.Mean", r.Canary.AvgL.Mean, 7.5},
		{"canary AvgL.SE", r.Canary.AvgL.SE, 1.9478494929174643 / math.Sqrt(18)},
		{"canary AvgL.Lo", r.Canary.AvgL.Lo, 6.5313572356224885},
		{"canary AvgL.Hi", r.Canary.AvgL.Hi, 8.468642764377512},
		// canary R: n=18 mean=3.0500000000000003 sd=0.9444886571735056 lo=2.5803168406315296 hi=3.519683159368471
		{"canary AvgR.Mean", r.Canary.AvgR.Mean, 3.0500000000000003},
		{"canary AvgR.SE", r.Canary.AvgR.SE, 0.9444886571735056 / math.Sqrt(18)},
		{"canary AvgR.Lo", r.Canary.AvgR.Lo, 2.5803168406315296},
		{"canary AvgR.Hi", r.Canary.AvgR.Hi, 3.519683159368471},
		// stable all: sessions=15 exchanges=74 error=0.13333333333333333 early=0.06666666666666667 refused=0.0945945945945946 p95=228.0
		{"stable All.Sessions", float64(r.Stable.All.Sessions), 15},
		{"stable All.Exchanges", float64(r.Stable.All.Exchanges), 74},
		{"stable All.ErrorRate", r.Stable.All.ErrorRate, 0.13333333333333333},
		{"stable All.EarlyTermRate", r.Stable.All.EarlyTermRate, 0.06666666666666667},
		{"stable All.SafetyRefusalRate", r.Stable.All.SafetyRefusalRate, 0.0945945945945946},
		{"stable All.P95LatencyMS", r.Stable.All.P95LatencyMS, 228.0},
		// canary all: sessions=18 exchanges=135 error=0.16666666666666666 early=0.0 refused=0.06666666666666667 p95=242.0
		{"canary All.Sessions", float64(r.Canary.All.Sessions), 18},
		{"canary All.Exchanges", float64(r.Canary.All.Exchanges), 135},
		{"canary All.ErrorRate", r.Canary.All.ErrorRate, 0.16666666666666666},
		{"canary All.EarlyTermRate", r.Canary.All.EarlyTermRate, 0},
		{"canary All.SafetyRefusalRate", r.Canary.All.SafetyRefusalRate, 0.06666666666666667},
		{"canary All.P95LatencyMS", r.Canary.All.P95LatencyMS, 242.0},
		// welch L: diff=2.5666666666666664 t=3.527203795743273 df=28.40819946125673 p=0.0014479181037231974 lo=1.077051310831703 hi=4.05628202250163
		{"AvgL.Diff", r.AvgL.Diff, 2.5666666666666664},
		{"AvgL.T", r.AvgL.T, 3.527203795743273},
		{"AvgL.DF", r.AvgL.DF, 28.40819946125673},
		{"AvgL.P", r.AvgL.P, 0.0014479181037231974},
		{"AvgL.Lo", r.AvgL.Lo, 1.077051310831703},
		{"AvgL.Hi", r.AvgL.Hi, 4.05628202250163},
		// player_level.py, fixture msprt L (one look): tau=1.0353181894960604 loglambda=3.61036428442498 p=0.02704199409458466 lo=0.19700186883019777 hi=4.9363314645031355
		{"AvgL.Seq.Looks", float64(r.AvgL.Seq.Looks), 1},
		{"AvgL.Seq.LogLambda", r.AvgL.Seq.LogLambda, 3.61036428442498},
		{"AvgL.Seq.P", r.AvgL.Seq.P, 0.02704199409458466},
		{"AvgL.Seq.Lo", r.AvgL.Seq.Lo, 0.19700186883019777},
		{"AvgL.Seq.Hi", r.AvgL.Seq.Hi, 4.9363314645031355},
		{"AvgL.Seq.Tau", r.AvgL.Seq.Tau, 1.0353181894960604},
		// welch R: diff=1.1566666666666667 t=3.3525606839643065 df=28.961266365200544 p=0.0022429887890496876 lo=0.4510011731656999 hi=1.8623321601676337
		{"AvgR.Diff", r.AvgR.Diff, 1.1566666666666667},
		{"AvgR.T", r.AvgR.T, 3.3525606839643065},
		{"AvgR.DF", r.AvgR.DF, 28.961266365200544},
		{"AvgR.P", r.AvgR.P, 0.0022429887890496876},
		{"AvgR.Lo", r.AvgR.Lo, 0.4510011731656999},
		{"AvgR.Hi", r.AvgR.Hi, 1.8623321601676337},
		// player_level.py, fixture msprt R: tau=0.49170037390984483 loglambda=3.2113258170884618 p=0.04030314323809743 lo=0.033597827842024586 hi=2.279735505491309
		{"AvgR.Seq.LogLambda", r.AvgR.Seq.LogLambda, 3.2113258170884618},
		{"AvgR.Seq.P", r.AvgR.Seq.P, 0.04030314323809743},
		{"AvgR.Seq.Lo", r.AvgR.Seq.Lo, 0.033597827842024586},
		{"AvgR.Seq.Hi", r.AvgR.Seq.Hi, 2.279735505491309},
		{"AvgR.Seq.Tau", r.AvgR.Seq.Tau, 0.49170037390984483},
	}
	for _, c := range checks {
		if math.Abs(c.got-c.want) > tol*math.Max(1, math.Abs(c.want)) {
			t.Errorf("%s = %.17g; want %.17g", c.name, c.got, c.want)
		}
	}
	if !r.AvgL.Valid || !r.AvgL.Seq.Better || r.AvgL.Seq.Worse {
		t.Errorf("AvgL valid %v, better %v, worse %v; want true, true, false", r.AvgL.Valid, r.AvgL.Seq.Better, r.AvgL.Seq.Worse)
	}
	if got := r.Canary.Versions; len(got) != 1 || got[0] != "v2" {
		t.Errorf("canary versions = %v; want [v2]", got)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Errorf("json.Marshal(report) error = %v; want nil", err)
	}
}

func TestStudentT(t *testing.T) {
	// scipy.stats.t.cdf(x, df) and t.ppf(q, df), scipy 1.10.1.
	cdf := []struct{ x, df, want float64 }{
		{-2.0, 3, 0.06966298427942155},
		{1.5, 10.5, 0.9184656210407777},
		{0.0, 7, 0.5},
		{-4.2, 1, 0.0744027652986172},
	}
	for _, c := range cdf {
		if got := studentTCDF(c.x, c.df); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("studentTCDF(%v, %v) = %.17g; want %.17g", c.x, c.df, got, c.want)
		}
	}
	ppf := []struct{ q, df, want float64 }{
		{0.975, 14, 2.1447866879169273},
		{0.975, 2.5, 3.5746548420118773},
		{0.975, 1000, 1.9623390808264074},
	}
	for _, c := range ppf {
		if got := studentTQuantile(c.q, c.df); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("studentTQuantile(%v, %v) = %.17g; want %.17g", c.q, c.df, got, c.want)
		}
	}
}

func TestAnalyzeUndefinedIsFinite(t *testing.T) {
	tests := []struct {
		name     string
		sessions []Session
	}{
		{"no sessions", nil},
		{"one per arm", fixtureSessions()[:2]},
		{"no variance", []Session{
			{SessionID: "a", PlayerID: "a", Arm: "stable", Turns: 3, Ended: t0},
			{SessionID: "b", PlayerID: "b", Arm: "stable", Turns: 3, Ended: t0},
			{SessionID: "c", PlayerID: "c", Arm: "canary", Turns: 3, Ended: t0},
			{SessionID: "d", PlayerID: "d", Arm: "canary", Turns: 3, Ended: t0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Analyze("e1", tt.sessions, DefaultConfig(), t0.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if r.AvgL.Valid || r.AvgL.Seq.Looks != 0 || r.AvgL.Seq.P != 1 {
				t.Errorf("AvgL valid %v, looks %d, p %v; want false, 0, 1", r.AvgL.Valid, r.AvgL.Seq.Looks, r.AvgL.Seq.P)
			}
			if _, err := json.Marshal(r); err != nil {
				t.Errorf("json.Marshal(report) error = %v; want nil", err)
			}
			if d := Decide(r, func() GuardrailConfig { c := DefaultGuardrailConfig(); c.AutoPromote = true; return c }()); d.Verdict != Hold {
				t.Errorf("Decide = %s (%s); want hold", d.Verdict, d.Reason)
			}
		})
	}
}

// TestConfigValidate refuses each setting out of range, the slow floor's
// included, and keeps the defaults.
func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for name, mod := range map[string]func(*Config){
		"alpha 0":             func(c *Config) { c.Alpha = 0 },
		"guardrail alpha 1":   func(c *Config) { c.GuardrailAlpha = 1 },
		"mixture sd 0":        func(c *Config) { c.MixtureSD = 0 },
		"one player":          func(c *Config) { c.SeqMinPlayers = 1 },
		"canary share 1":      func(c *Config) { c.CanaryShare = 1 },
		"negative slow floor": func(c *Config) { c.SlowFloorMS = -1 },
		"NaN slow floor":      func(c *Config) { c.SlowFloorMS = math.NaN() },
		"infinite slow floor": func(c *Config) { c.SlowFloorMS = math.Inf(1) },
	} {
		c := DefaultConfig()
		mod(&c)
		if c.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
