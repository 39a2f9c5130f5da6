package abtest

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/parleyhq/parley/schema"
)

// Metric names of the comparisons.
const (
	MetricAvgL = "avg_l"
	MetricAvgR = "avg_r"
)

// Config configures Analyze.
type Config struct {
	// Alpha is the level of the sequential test and of its always-valid
	// confidence interval (the fixed-horizon CIs are always 95 %).
	Alpha float64
	// MixtureSD is the standard deviation τ of the mSPRT's normal mixing
	// distribution over the true difference, θ ~ N(0, τ²), given in units
	// of the metric's pooled standard deviation (a standardized effect
	// size): τ = MixtureSD · √((s²_stable + s²_canary)/2). Pick it near the
	// effect one hopes to detect; the test stays valid for any value, but is
	// most powerful for effects of about that size.
	MixtureSD float64
	// SeqMinSessions is how many observations each arm needs before the
	// sequential test takes its first look (the plug-in variance is too
	// noisy before).
	SeqMinSessions int
	// GuardrailWindow is the trailing window (ending at the report's time)
	// over which the guardrail rates are computed; 0 means all data.
	GuardrailWindow time.Duration
}

// DefaultConfig returns α 0.05, τ = 0.2 pooled SD, 10 sessions before the
// first look and a 15-minute guardrail window.
func DefaultConfig() Config {
	return Config{Alpha: 0.05, MixtureSD: 0.2, SeqMinSessions: 10, GuardrailWindow: 15 * time.Minute}
}

// Validate reports the first setting out of range.
func (c Config) Validate() error {
	switch {
	case c.Alpha <= 0 || c.Alpha >= 1:
		return fmt.Errorf("abtest config: alpha %v must be in (0, 1)", c.Alpha)
	case c.MixtureSD <= 0:
		return fmt.Errorf("abtest config: mixture sd %v must be positive", c.MixtureSD)
	case c.SeqMinSessions < 2:
		return fmt.Errorf("abtest config: sequential minimum %d must be at least 2", c.SeqMinSessions)
	case c.GuardrailWindow < 0:
		return fmt.Errorf("abtest config: guardrail window %v is negative", c.GuardrailWindow)
	}
	return nil
}

// Report is the state of one experiment at one time.
type Report struct {
	ExperimentID string    `json:"experiment_id"`
	At           time.Time `json:"at"`
	Stable       ArmStats  `json:"stable"`
	Canary       ArmStats  `json:"canary"`
	// AvgL and AvgR compare the canary with stable (canary − stable).
	AvgL Comparison `json:"avg_l"`
	AvgR Comparison `json:"avg_r"`
	// GuardrailWindow is the window the ArmStats.Window rates cover.
	GuardrailWindow time.Duration `json:"guardrail_window"`
}

// ArmStats describes one arm.
type ArmStats struct {
	Arm string `json:"arm"`
	// Versions are the policy versions seen on the arm.
	Versions []string `json:"versions"`
	// Open counts sessions that have not ended; they are not in AvgL.
	Open int      `json:"open"`
	AvgL Estimate `json:"avg_l"`
	AvgR Estimate `json:"avg_r"`
	// All covers the whole experiment, Window the guardrail window.
	All    Rates `json:"all"`
	Window Rates `json:"window"`
}

// Estimate is a sample mean with its 95 % Student-t confidence interval
// (Lo = Hi = Mean when N < 2).
type Estimate struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	SD   float64 `json:"sd"`
	Lo   float64 `json:"lo"`
	Hi   float64 `json:"hi"`
}

// Rates are the guardrail measurements of an arm.
type Rates struct {
	// Sessions counts ended sessions, Exchanges turns.
	Sessions  int `json:"sessions"`
	Exchanges int `json:"exchanges"`
	// ErrorRate is the share of ended sessions that ended with an error.
	ErrorRate float64 `json:"error_rate"`
	// EarlyTermRate is the share of ended sessions with at most one exchange.
	EarlyTermRate float64 `json:"early_termination_rate"`
	// SafetyRefusalRate is the share of exchanges the safety guard refused.
	SafetyRefusalRate float64 `json:"safety_refusal_rate"`
	// P95LatencyMS is the 95th percentile of exchange latency (numpy's
	// linear interpolation).
	P95LatencyMS float64 `json:"p95_latency_ms"`
}

// Comparison is canary − stable for one metric.
type Comparison struct {
	Metric string `json:"metric"`
	// Valid is false while an arm has fewer than two observations or both
	// have no variance; the other fields are then zero.
	Valid bool `json:"valid"`
	// Diff is the difference of means with Welch's 95 % CI, t, degrees of
	// freedom (Welch–Satterthwaite) and two-sided p-value. These are
	// fixed-horizon statistics: valid when read once, not when watched.
	Diff float64 `json:"diff"`
	Lo   float64 `json:"lo"`
	Hi   float64 `json:"hi"`
	T    float64 `json:"t"`
	DF   float64 `json:"df"`
	P    float64 `json:"p"`
	// Seq is the always-valid sequential test, safe to read at any time.
	Seq Sequential `json:"sequential"`
}

// Sequential is the mixture sequential probability ratio test (mSPRT) of
// H0: no difference, run over the sessions in the order they ended, one
// look per session once each arm has Config.SeqMinSessions. At each look
// with difference d, its variance v = s²_c/n_c + s²_s/n_s and mixing τ,
//
//	Λ = √(v/(v+τ²)) · exp(τ²·d² / (2·v·(v+τ²)))
//
// and the always-valid p-value is the running minimum of min(1, 1/Λ). The
// always-valid (1−α) CI is the running intersection of
// d ± √(v(v+τ²)/τ² · (2·ln(1/α) + ln((v+τ²)/v))).
// v and τ use the sample variances at each look (a plug-in, as in Johari
// et al.'s deployment), so the guarantee holds once the variances have
// settled; SeqMinSessions keeps the first, noisiest looks out.
type Sequential struct {
	Looks int `json:"looks"`
	// Tau is the mixing standard deviation at the last look, in metric units.
	Tau       float64 `json:"tau"`
	LogLambda float64 `json:"log_lambda"`
	P         float64 `json:"p"`
	Lo        float64 `json:"lo"`
	Hi        float64 `json:"hi"`
	Alpha     float64 `json:"alpha"`
	// Better (Worse) is true when P ≤ Alpha and the CI lies above (below) 0.
	Better bool `json:"better"`
	Worse  bool `json:"worse"`
}

// Analyze computes the report of an experiment at time now from its
// sessions; sessions of arms other than stable and canary are ignored.
func Analyze(experimentID string, sessions []Session, cfg Config, now time.Time) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	r := Report{ExperimentID: experimentID, At: now, GuardrailWindow: cfg.GuardrailWindow}
	var since time.Time
	if cfg.GuardrailWindow > 0 {
		since = now.Add(-cfg.GuardrailWindow)
	}
	r.Stable = armStats(schema.ArmStable, sessions, since)
	r.Canary = armStats(schema.ArmCanary, sessions, since)
	turns := func(s Session) (float64, bool) { return float64(s.Turns), true }
	reward := func(s Session) (float64, bool) { return s.Reward, s.HasReward }
	r.AvgL = compare(MetricAvgL, sessions, turns, cfg)
	r.AvgR = compare(MetricAvgR, sessions, reward, cfg)
	return r, nil
}

func armStats(arm string, sessions []Session, since time.Time) ArmStats {
	a := ArmStats{Arm: arm}
	var l, rw moments
	all, win := rateAcc{}, rateAcc{}
	for _, s := range sessions {
		if s.Arm != arm {
			continue
		}
		if s.Version != "" && !slices.Contains(a.Versions, s.Version) {
			a.Versions = append(a.Versions, s.Version)
		}
		for _, e := range s.Exchanges {
			all.exchange(e)
			if !e.At.Before(since) {
				win.exchange(e)
			}
		}
		if !s.Done() {
			a.Open++
			continue
		}
		l.add(float64(s.Turns))
		if s.HasReward {
			rw.add(s.Reward)
		}
		all.session(s)
		if !s.Ended.Before(since) {
			win.session(s)
		}
	}
	slices.Sort(a.Versions)
	a.AvgL, a.AvgR = estimate(l), estimate(rw)
	a.All, a.Window = all.rates(), win.rates()
	return a
}

type rateAcc struct {
	sessions, errors, early int
	exchanges, refused      int
	latencies               []float64
}

func (r *rateAcc) exchange(e Exchange) {
	r.exchanges++
	if e.Safety == schema.SafetyRefused {
		r.refused++
	}
	r.latencies = append(r.latencies, float64(e.LatencyMS))
}

func (r *rateAcc) session(s Session) {
	r.sessions++
	if s.Reason == schema.EndError {
		r.errors++
	}
	if s.Turns <= 1 {
		r.early++
	}
}

func (r *rateAcc) rates() Rates {
	out := Rates{Sessions: r.sessions, Exchanges: r.exchanges, P95LatencyMS: Percentile(r.latencies, 95)}
	if r.sessions > 0 {
		out.ErrorRate = float64(r.errors) / float64(r.sessions)
		out.EarlyTermRate = float64(r.early) / float64(r.sessions)
	}
	if r.exchanges > 0 {
		out.SafetyRefusalRate = float64(r.refused) / float64(r.exchanges)
	}
	return out
}

func estimate(m moments) Estimate {
	e := Estimate{N: m.n, Mean: m.mean, Lo: m.mean, Hi: m.mean}
	if m.n < 2 {
		return e
	}
	e.SD = math.Sqrt(m.variance())
	hw := studentTQuantile(0.975, float64(m.n-1)) * e.SD / math.Sqrt(float64(m.n))
	e.Lo, e.Hi = m.mean-hw, m.mean+hw
	return e
}

// compare computes the Welch statistics over all ended sessions and runs
// the mSPRT over them in the order they ended.
func compare(metric string, sessions []Session, value func(Session) (float64, bool), cfg Config) Comparison {
	c := Comparison{Metric: metric, Seq: Sequential{P: 1, Alpha: cfg.Alpha}}
	var ended []Session
	for _, s := range sessions {
		if s.Done() && (s.Arm == schema.ArmStable || s.Arm == schema.ArmCanary) {
			if _, ok := value(s); ok {
				ended = append(ended, s)
			}
		}
	}
	slices.SortStableFunc(ended, func(a, b Session) int { return a.Ended.Compare(b.Ended) })

	var st, ca moments
	lo, hi := math.Inf(-1), math.Inf(1)
	for _, s := range ended {
		x, _ := value(s)
		if s.Arm == schema.ArmCanary {
			ca.add(x)
		} else {
			st.add(x)
		}
		if st.n < cfg.SeqMinSessions || ca.n < cfg.SeqMinSessions {
			continue
		}
		v := ca.variance()/float64(ca.n) + st.variance()/float64(st.n)
		tau := cfg.MixtureSD * math.Sqrt((ca.variance()+st.variance())/2)
		if v <= 0 || tau <= 0 {
			continue
		}
		d := ca.mean - st.mean
		q := &c.Seq
		q.Looks++
		q.Tau = tau
		q.LogLambda = msprtLogLambda(d, v, tau*tau)
		q.P = math.Min(q.P, math.Exp(-q.LogLambda))
		hw := msprtHalfWidth(v, tau*tau, cfg.Alpha)
		lo, hi = math.Max(lo, d-hw), math.Min(hi, d+hw)
	}
	if c.Seq.Looks > 0 {
		c.Seq.Lo, c.Seq.Hi = lo, hi
		c.Seq.Better = c.Seq.P <= cfg.Alpha && lo > 0
		c.Seq.Worse = c.Seq.P <= cfg.Alpha && hi < 0
	}

	if st.n < 2 || ca.n < 2 {
		return c
	}
	vs, vc := st.variance()/float64(st.n), ca.variance()/float64(ca.n)
	se2 := vs + vc
	if se2 <= 0 {
		return c
	}
	c.Valid = true
	c.Diff = ca.mean - st.mean
	se := math.Sqrt(se2)
	c.T = c.Diff / se
	c.DF = se2 * se2 / (vs*vs/float64(st.n-1) + vc*vc/float64(ca.n-1))
	c.P = 2 * studentTCDF(-math.Abs(c.T), c.DF)
	hw := studentTQuantile(0.975, c.DF) * se
	c.Lo, c.Hi = c.Diff-hw, c.Diff+hw
	return c
}
