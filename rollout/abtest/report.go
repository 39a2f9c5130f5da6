package abtest

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/parleyhq/parley/schema"
)

// Metric names of the comparisons.
const (
	MetricAvgL = "avg_l"
	MetricAvgR = "avg_r"
)

// Guardrail names, in the order reports list them.
const (
	GuardErrorRate        = "error_rate"
	GuardSlowExchanges    = "slow_exchange_rate"
	GuardEarlyTermination = "early_termination_rate"
	GuardSafetyRefusals   = "safety_refusal_rate"
)

// Guardrails are the guardrail names in report order.
var Guardrails = []string{GuardErrorRate, GuardSlowExchanges, GuardEarlyTermination, GuardSafetyRefusals}

// The slow-exchange guardrail is judged on blocks of time, not players: an
// exchange's latency depends on the load when it was served, which every
// player served then shares, so the players of one burst are not
// independent draws of it. Its unit is an arm's exchanges that ended in
// one SlowBlock of wall time, and it looks once each arm has SlowMinBlocks.
const (
	SlowBlock     = 10 * time.Second
	SlowMinBlocks = 12
)

// Config configures the analysis.
type Config struct {
	// Alpha is the level of the sequential tests on Avg.L and Avg.r and of
	// their always-valid confidence intervals (the fixed-horizon CIs are
	// always 95 %).
	Alpha float64 `json:"alpha"`
	// MixtureSD is the standard deviation τ of the mSPRT's normal mixing
	// distribution over the true difference, θ ~ N(0, τ²), in units of the
	// metric's pooled per-player standard deviation: τ = MixtureSD ·
	// √((n_s·v_s + n_c·v_c)/2), v the delta-method variances of the arm
	// means over n players, taken at the first look and frozen. Pick it
	// near the effect one hopes to detect; the test stays valid for any
	// value.
	MixtureSD float64 `json:"mixture_sd"`
	// SeqMinPlayers is how many players each arm needs before a sequential
	// test takes its first look (the plug-in variance is too noisy before).
	SeqMinPlayers int `json:"seq_min_players"`
	// GuardrailAlpha is the level of each guardrail's always-valid CI; a
	// guardrail is breached when its lower bound exceeds the allowance, a
	// one-sided test at GuardrailAlpha/2.
	GuardrailAlpha float64 `json:"guardrail_alpha"`
	// CanaryShare is the configured canary share of the experiment's
	// players, for the SRM check; 0 leaves SRM unchecked (and promotion
	// blocked).
	CanaryShare float64 `json:"canary_share"`
	// SlowFloorMS is the least latency the slow-exchange threshold takes:
	// an exchange faster than it is not slow to a player, whatever stable's
	// p95 (SlowThreshold).
	SlowFloorMS float64 `json:"slow_floor_ms"`
}

// DefaultConfig returns α 0.05, τ = 0.2 pooled SD, 100 players per arm
// before the first look, guardrails at 0.02, SRM unchecked and a slow
// floor of 100 ms, the limit under which a reply feels instantaneous
// (Nielsen, "Usability Engineering", 1993, ch. 5.5, after Miller 1968).
func DefaultConfig() Config {
	return Config{Alpha: 0.05, MixtureSD: 0.2, SeqMinPlayers: 100, GuardrailAlpha: 0.02, SlowFloorMS: 100}
}

// Validate reports the first setting out of range.
func (c Config) Validate() error {
	switch {
	case c.Alpha <= 0 || c.Alpha >= 1:
		return fmt.Errorf("abtest config: alpha %v must be in (0, 1)", c.Alpha)
	case c.GuardrailAlpha <= 0 || c.GuardrailAlpha >= 1:
		return fmt.Errorf("abtest config: guardrail alpha %v must be in (0, 1)", c.GuardrailAlpha)
	case c.MixtureSD <= 0:
		return fmt.Errorf("abtest config: mixture sd %v must be positive", c.MixtureSD)
	case c.SeqMinPlayers < 2:
		return fmt.Errorf("abtest config: sequential minimum %d players must be at least 2", c.SeqMinPlayers)
	case c.CanaryShare < 0 || c.CanaryShare >= 1:
		return fmt.Errorf("abtest config: canary share %v must be in [0, 1)", c.CanaryShare)
	case !(c.SlowFloorMS >= 0) || math.IsInf(c.SlowFloorMS, 1):
		return fmt.Errorf("abtest config: slow floor %v ms must be finite and not negative", c.SlowFloorMS)
	}
	return nil
}

// State is what one analysis hands to the next: the running sequential
// tests and the frozen slow-exchange threshold. The analysis owner stores
// it (it is plain JSON) and passes it to Update, so that restarts and late
// events never rewrite a result that was reported.
type State struct {
	ExperimentID string `json:"experiment_id"`
	// SlowThresholdMS is stable's p95 exchange latency at the first look
	// (at least Config.SlowFloorMS), frozen: the slow-exchange guardrail
	// counts exchanges slower than it.
	SlowThresholdMS float64               `json:"slow_threshold_ms"`
	AvgL            Sequential            `json:"avg_l"`
	AvgR            Sequential            `json:"avg_r"`
	Guardrails      map[string]Sequential `json:"guardrails"`
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
	// Guardrails are the guardrail metrics' comparisons, in Guardrails order.
	Guardrails []Guardrail `json:"guardrails"`
	SRM        SRM         `json:"srm"`
	// State is what the next Update continues from.
	State State `json:"state"`
}

// ArmStats describes one arm.
type ArmStats struct {
	Arm string `json:"arm"`
	// Versions are the policy versions seen on the arm.
	Versions []string `json:"versions"`
	// Players counts distinct players, Open sessions that have not ended
	// (they are not in AvgL).
	Players int      `json:"players"`
	Open    int      `json:"open"`
	AvgL    Estimate `json:"avg_l"`
	AvgR    Estimate `json:"avg_r"`
	All     Rates    `json:"all"`
}

// Estimate is a ratio metric over players (Σ numerator / Σ denominator)
// with its delta-method standard error and 95 % Student-t CI on players − 1
// degrees of freedom (Lo = Hi = Mean with fewer than two players).
type Estimate struct {
	// N counts the observations (sessions), Players the players they came from.
	N       int     `json:"n"`
	Players int     `json:"players"`
	Mean    float64 `json:"mean"`
	SE      float64 `json:"se"`
	Lo      float64 `json:"lo"`
	Hi      float64 `json:"hi"`
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
	// SlowRate is the share of exchanges slower than State.SlowThresholdMS.
	SlowRate float64 `json:"slow_exchange_rate"`
	// P95LatencyMS is the 95th percentile of exchange latency (Percentile).
	P95LatencyMS float64 `json:"p95_latency_ms"`
}

// Comparison is canary − stable for one metric, at the player level.
type Comparison struct {
	Metric string `json:"metric"`
	// Valid is false while an arm has fewer than two players or both have
	// no variance; the fixed-horizon fields are then zero.
	Valid bool `json:"valid"`
	// Diff is the (CUPED-adjusted) difference with its 95 % CI, t, degrees
	// of freedom (Welch–Satterthwaite over players) and two-sided p-value.
	// These are fixed-horizon statistics: valid when read once, not when
	// watched.
	Diff float64 `json:"diff"`
	Lo   float64 `json:"lo"`
	Hi   float64 `json:"hi"`
	T    float64 `json:"t"`
	DF   float64 `json:"df"`
	P    float64 `json:"p"`
	// CUPEDTheta is θ when players had a pre-exposure covariate (else 0),
	// VarianceReduction 1 − adjusted/unadjusted variance of Diff.
	CUPEDTheta        float64 `json:"cuped_theta"`
	VarianceReduction float64 `json:"variance_reduction"`
	// Seq is the always-valid sequential test, safe to read at any time.
	Seq Sequential `json:"sequential"`
}

// Guardrail is canary − stable of one guardrail metric with its
// always-valid test; Decide judges it against the allowance.
type Guardrail struct {
	Name          string  `json:"name"`
	Stable        float64 `json:"stable"`
	Canary        float64 `json:"canary"`
	StablePlayers int     `json:"stable_players"`
	CanaryPlayers int     `json:"canary_players"`
	// Exact is true when neither arm varies between players (such as no
	// errors at all): the test cannot run, and the difference is exact.
	Exact bool       `json:"exact"`
	Seq   Sequential `json:"sequential"`
}

// Player is one player's totals in one arm of an experiment: what the
// analysis folds sessions into.
type Player struct {
	Arm string
	// Sessions counts ended sessions and Turns their exchanges; Rewarded
	// counts those with a reward and Reward sums it.
	Sessions, Turns int
	Rewarded        int
	Reward          float64
	// Errors and Early count ended sessions that ended in an error or
	// after at most one exchange.
	Errors, Early int
	// Exchanges counts every exchange (open sessions too), Refused those
	// the safety guard refused.
	Exchanges, Refused int
	// Pre is the player's exchange length before first exposure, CUPED's
	// covariate (Fold gives a player without one the mean of the others').
	Pre float64
}

// ArmTally is the sufficient statistics of one arm.
type ArmTally struct {
	Players  int      `json:"players"`
	Open     int      `json:"open"`
	Versions []string `json:"versions"`
	Turns    Ratio    `json:"turns"`
	Reward   Ratio    `json:"reward"`
	Errors   Ratio    `json:"errors"`
	Early    Ratio    `json:"early"`
	Refusals Ratio    `json:"refusals"`
	// Slow is over blocks (SlowBlock), not players: exchanges and the
	// slow ones among them; AddBlock counts them.
	Slow Ratio `json:"slow"`
	// Latencies are the exchange latencies, for the reported p95 and the
	// slow threshold; an incremental caller may leave them out.
	Latencies []float64 `json:"-"`
}

// Add counts a player's totals.
func (a *ArmTally) Add(p Player) { a.add(p, 1) }

// Remove takes back an Add of the same totals, so that a caller can
// update a player incrementally.
func (a *ArmTally) Remove(p Player) { a.add(p, -1) }

func (a *ArmTally) add(p Player, sign int) {
	a.Players += sign
	f := (*Ratio).Add
	if sign < 0 {
		f = (*Ratio).Remove
	}
	s, x := float64(p.Sessions), float64(p.Exchanges)
	f(&a.Turns, s, float64(p.Turns), p.Pre)
	f(&a.Reward, float64(p.Rewarded), p.Reward, p.Pre)
	f(&a.Errors, s, float64(p.Errors), p.Pre)
	f(&a.Early, s, float64(p.Early), p.Pre)
	f(&a.Refusals, x, float64(p.Refused), p.Pre)
}

// AddBlock counts one block of the arm's exchanges, slow of them slower
// than the slow threshold.
func (a *ArmTally) AddBlock(exchanges, slow int) {
	a.Slow.Add(float64(exchanges), float64(slow), 0)
}

// Tally is both arms' sufficient statistics.
type Tally struct {
	Stable ArmTally `json:"stable"`
	Canary ArmTally `json:"canary"`
	// SlowThresholdMS is the threshold Slow was counted against (0: none).
	SlowThresholdMS float64 `json:"slow_threshold_ms"`
}

// Arm returns the tally of arm, nil for an arm outside the comparison.
func (t *Tally) Arm(arm string) *ArmTally {
	switch arm {
	case schema.ArmStable:
		return &t.Stable
	case schema.ArmCanary:
		return &t.Canary
	}
	return nil
}

// Fold folds sessions into per-player totals and per-block slow exchanges
// and tallies them by arm.
// pre maps a player to their exchange length before first exposure (nil:
// none); a player without one is given the mean of pre, so CUPED leaves
// their contribution as it is. Exchanges slower than slowMS count as slow
// (slowMS 0: none). Sessions of arms other than stable and canary (held)
// are left out.
func Fold(sessions []Session, pre map[string]float64, slowMS float64) Tally {
	t := Tally{SlowThresholdMS: slowMS}
	var unknown float64
	for _, c := range pre {
		unknown += c / float64(len(pre))
	}
	type key struct{ player, arm string }
	players := map[key]*Player{}
	var order []key
	type block struct {
		arm string
		at  int64
	}
	blocks := map[block][2]int{} // exchanges, slow
	for _, s := range sessions {
		a := t.Arm(s.Arm)
		if a == nil {
			continue
		}
		k := key{s.PlayerID, s.Arm}
		p := players[k]
		if p == nil {
			c, ok := pre[s.PlayerID]
			if !ok {
				c = unknown
			}
			p = &Player{Arm: s.Arm, Pre: c}
			players[k] = p
			order = append(order, k)
		}
		if s.Version != "" && !slices.Contains(a.Versions, s.Version) {
			a.Versions = append(a.Versions, s.Version)
		}
		for _, e := range s.Exchanges {
			p.Exchanges++
			if e.Safety == schema.SafetyRefused {
				p.Refused++
			}
			b := block{s.Arm, e.At.Unix() / int64(SlowBlock/time.Second)}
			n := blocks[b]
			n[0]++
			if slowMS > 0 && float64(e.LatencyMS) > slowMS {
				n[1]++
			}
			blocks[b] = n
			a.Latencies = append(a.Latencies, float64(e.LatencyMS))
		}
		if !s.Done() {
			a.Open++
			continue
		}
		p.Sessions++
		p.Turns += s.Turns
		if s.HasReward {
			p.Rewarded++
			p.Reward += s.Reward
		}
		if s.Reason == schema.EndError {
			p.Errors++
		}
		if s.Turns <= 1 {
			p.Early++
		}
	}
	for _, k := range order {
		t.Arm(k.arm).Add(*players[k])
	}
	for _, b := range slices.SortedFunc(maps.Keys(blocks), func(x, y block) int { return cmp.Or(strings.Compare(x.arm, y.arm), cmp.Compare(x.at, y.at)) }) {
		t.Arm(b.arm).AddBlock(blocks[b][0], blocks[b][1])
	}
	slices.Sort(t.Stable.Versions)
	slices.Sort(t.Canary.Versions)
	return t
}

// Analyze is a first analysis of an experiment at time now: Update from
// no stored state and no covariates.
func Analyze(experimentID string, sessions []Session, cfg Config, now time.Time) (Report, error) {
	return Update(State{}, experimentID, sessions, nil, cfg, now)
}

// Update takes one look at the experiment at time now, continuing from
// prev (the State of the previous report; a zero State or one of another
// experiment starts afresh). pre holds the players' pre-exposure exchange
// lengths for CUPED (nil: none). The slow threshold is frozen once both
// arms have SeqMinPlayers players.
func Update(prev State, experimentID string, sessions []Session, pre map[string]float64, cfg Config, now time.Time) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	if prev.ExperimentID != experimentID {
		prev = State{}
	}
	t := Fold(sessions, pre, prev.SlowThresholdMS)
	if t.SlowThresholdMS == 0 && t.Stable.Players >= cfg.SeqMinPlayers && t.Canary.Players >= cfg.SeqMinPlayers {
		if slow := SlowThreshold(t.Stable.Latencies, cfg.SlowFloorMS); slow > 0 {
			t = Fold(sessions, pre, slow)
		}
	}
	return Judge(prev, experimentID, t, cfg, now), nil
}

// SlowThreshold is the latency that exchanges slower than count as slow:
// stable's p95 (Percentile) at the first look, or floorMS when that is
// higher. latencies is sorted in place.
func SlowThreshold(stableLatencies []float64, floorMS float64) float64 {
	return max(Percentile(stableLatencies, 95), floorMS)
}

// Judge takes one look at the tallies t at time now, continuing from
// prev, which it does not modify; the report's State is the next prev. It
// is the analysis both Update and the simulation bench (which keeps t up
// to date incrementally) run. cfg must be valid.
func Judge(prev State, experimentID string, t Tally, cfg Config, now time.Time) Report {
	st := State{ExperimentID: experimentID, SlowThresholdMS: t.SlowThresholdMS, Guardrails: map[string]Sequential{}}
	if prev.ExperimentID == experimentID {
		st.AvgL, st.AvgR = prev.AvgL, prev.AvgR
		maps.Copy(st.Guardrails, prev.Guardrails)
	}
	r := Report{ExperimentID: experimentID, At: now,
		Stable: armStats(schema.ArmStable, t.Stable), Canary: armStats(schema.ArmCanary, t.Canary),
		SRM: SRMTest(t.Stable.Players, t.Canary.Players, cfg.CanaryShare)}
	r.AvgL, st.AvgL = compare(MetricAvgL, st.AvgL, t.Stable.Turns, t.Canary.Turns, cfg.Alpha, cfg)
	r.AvgR, st.AvgR = compare(MetricAvgR, st.AvgR, t.Stable.Reward, t.Canary.Reward, cfg.Alpha, cfg)
	for _, name := range Guardrails {
		s, c := guardrailRatios(name, t)
		g := Guardrail{Name: name, Stable: s.Mean(), Canary: c.Mean(), StablePlayers: s.N, CanaryPlayers: c.N}
		seq := st.Guardrails[name]
		units := cfg.SeqMinPlayers
		if name == GuardSlowExchanges {
			g.StablePlayers, g.CanaryPlayers, units = t.Stable.Players, t.Canary.Players, SlowMinBlocks
		}
		if name != GuardSlowExchanges || t.SlowThresholdMS > 0 {
			d, vs, vc, _, _ := difference(s, c)
			seq = look(seq, d, vs, vc, s, c, units, cfg.GuardrailAlpha, cfg)
			g.Exact = s.N >= 2 && c.N >= 2 && vs+vc <= 0
		}
		g.Seq, st.Guardrails[name] = seq, seq
		r.Guardrails = append(r.Guardrails, g)
	}
	r.State = st
	return r
}

func guardrailRatios(name string, t Tally) (stable, canary Ratio) {
	switch name {
	case GuardErrorRate:
		return t.Stable.Errors, t.Canary.Errors
	case GuardSlowExchanges:
		return t.Stable.Slow, t.Canary.Slow
	case GuardEarlyTermination:
		return t.Stable.Early, t.Canary.Early
	default:
		return t.Stable.Refusals, t.Canary.Refusals
	}
}

func armStats(arm string, a ArmTally) ArmStats {
	return ArmStats{Arm: arm, Versions: a.Versions, Players: a.Players, Open: a.Open,
		AvgL: estimate(a.Turns), AvgR: estimate(a.Reward),
		All: Rates{
			Sessions: int(a.Turns.X), Exchanges: int(a.Refusals.X),
			ErrorRate: a.Errors.Mean(), EarlyTermRate: a.Early.Mean(),
			SafetyRefusalRate: a.Refusals.Mean(), SlowRate: a.Slow.Mean(),
			P95LatencyMS: Percentile(a.Latencies, 95),
		}}
}

func estimate(r Ratio) Estimate {
	m := r.Mean()
	e := Estimate{N: int(r.X), Players: r.N, Mean: m, Lo: m, Hi: m}
	if r.N < 2 {
		return e
	}
	e.SE = math.Sqrt(r.Var())
	hw := studentTQuantile(0.975, float64(r.N-1)) * e.SE
	e.Lo, e.Hi = m-hw, m+hw
	return e
}

// difference is canary − stable of a ratio metric at the player level
// with each arm's variance, CUPED-adjusted (with θ) when players carry a
// covariate, and the unadjusted variance of the difference.
func difference(s, c Ratio) (d, vs, vc, theta, raw float64) {
	var pooledC float64
	if s.CC > 0 || c.CC > 0 {
		theta = CUPEDTheta(s, c)
		pooledC = (s.C + c.C) / float64(s.N+c.N)
	}
	ms, vs := s.adjusted(theta, pooledC)
	mc, vc := c.adjusted(theta, pooledC)
	return mc - ms, vs, vc, theta, s.Var() + c.Var()
}

// look takes a look of the sequential test seq at level alpha once both
// arms have minUnits (players, or blocks), on the difference d with arm
// variances vs and vc; τ (used at the first look only) is MixtureSD
// per-unit standard deviations, pooled over the arms.
func look(seq Sequential, d, vs, vc float64, s, c Ratio, minUnits int, alpha float64, cfg Config) Sequential {
	if s.N < minUnits || c.N < minUnits {
		return seq
	}
	tau := cfg.MixtureSD * math.Sqrt((float64(s.N)*vs+float64(c.N)*vc)/2)
	return seq.Look(d, vs+vc, tau, alpha)
}

// compare computes canary − stable of a ratio metric with its
// fixed-horizon statistics and takes a look of the sequential test seq.
func compare(metric string, seq Sequential, s, c Ratio, alpha float64, cfg Config) (Comparison, Sequential) {
	cmp := Comparison{Metric: metric}
	d, vs, vc, theta, raw := difference(s, c)
	v := vs + vc
	seq = look(seq, d, vs, vc, s, c, cfg.SeqMinPlayers, alpha, cfg)
	cmp.Seq = seq
	if seq.Looks == 0 {
		cmp.Seq.P, cmp.Seq.Alpha = 1, alpha
	}
	if s.N < 2 || c.N < 2 || v <= 0 {
		return cmp, seq
	}
	cmp.Valid = true
	cmp.CUPEDTheta = theta
	if raw > 0 {
		cmp.VarianceReduction = 1 - v/raw
	}
	cmp.Diff = d
	se := math.Sqrt(v)
	cmp.T = d / se
	cmp.DF = v * v / (vs*vs/float64(s.N-1) + vc*vc/float64(c.N-1))
	cmp.P = 2 * studentTCDF(-math.Abs(cmp.T), cmp.DF)
	hw := studentTQuantile(0.975, cmp.DF) * se
	cmp.Lo, cmp.Hi = d-hw, d+hw
	return cmp, seq
}
