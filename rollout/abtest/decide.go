package abtest

import (
	"fmt"
	"strings"
)

// Verdict is what Decide recommends.
type Verdict string

// Verdicts.
const (
	Hold     Verdict = "hold"
	Rollback Verdict = "rollback"
	Promote  Verdict = "promote"
)

// GuardrailConfig says when a canary is rolled back or promoted
// automatically. Each guardrail is a one-sided always-valid test of "the
// canary is worse than stable by more than the allowance", at the player
// level (slow exchanges: over blocks of time, SlowBlock): it is breached
// when the lower bound of the always-valid CI of canary − stable
// (Report.Guardrails) exceeds the allowance.
type GuardrailConfig struct {
	// MinPlayers is how many players with the guardrail's measurement each
	// arm needs before the guardrail counts as judged (the analysis takes
	// no look before Config.SeqMinPlayers either).
	MinPlayers int `json:"min_players"`
	// MaxErrorRateIncrease is the allowed canary − stable error rate.
	MaxErrorRateIncrease float64 `json:"max_error_rate_increase"`
	// MaxSlowExchangeIncrease is the allowed canary − stable share of
	// exchanges slower than stable's p95 at the first look (about 5 % on
	// stable) and than Config.SlowFloorMS: the p95 latency guardrail,
	// judged through its proportion.
	MaxSlowExchangeIncrease float64 `json:"max_slow_exchange_increase"`
	// MaxEarlyTermIncrease is the allowed canary − stable share of sessions
	// ended after at most one exchange.
	MaxEarlyTermIncrease float64 `json:"max_early_termination_increase"`
	// MaxSafetyRefusalIncrease is the allowed canary − stable refusal rate.
	MaxSafetyRefusalIncrease float64 `json:"max_safety_refusal_increase"`
	// AutoPromote enables promotion when the sequential test on Avg.L says
	// the canary is better and each arm has MinPromotePlayers.
	AutoPromote       bool `json:"auto_promote"`
	MinPromotePlayers int  `json:"min_promote_players"`
}

// DefaultGuardrailConfig returns conservative limits with auto-promotion off.
func DefaultGuardrailConfig() GuardrailConfig {
	return GuardrailConfig{
		MinPlayers:               100,
		MaxErrorRateIncrease:     0.01,
		MaxSlowExchangeIncrease:  0.05,
		MaxEarlyTermIncrease:     0.05,
		MaxSafetyRefusalIncrease: 0.01,
		MinPromotePlayers:        200,
	}
}

// Validate reports the first setting out of range.
func (c GuardrailConfig) Validate() error {
	switch {
	case c.MinPlayers < 1 || c.MinPromotePlayers < 1:
		return fmt.Errorf("guardrail config: minimum players %d and %d must be positive", c.MinPlayers, c.MinPromotePlayers)
	case c.MaxErrorRateIncrease < 0 || c.MaxSlowExchangeIncrease < 0 || c.MaxEarlyTermIncrease < 0 || c.MaxSafetyRefusalIncrease < 0:
		return fmt.Errorf("guardrail config: allowed increases must not be negative")
	}
	return nil
}

// allowance is the allowed canary − stable of a guardrail.
func (c GuardrailConfig) allowance(name string) float64 {
	switch name {
	case GuardErrorRate:
		return c.MaxErrorRateIncrease
	case GuardSlowExchanges:
		return c.MaxSlowExchangeIncrease
	case GuardEarlyTermination:
		return c.MaxEarlyTermIncrease
	default:
		return c.MaxSafetyRefusalIncrease
	}
}

// Check is one guardrail's verdict.
type Check struct {
	Name   string  `json:"name"`
	Stable float64 `json:"stable"`
	Canary float64 `json:"canary"`
	// Limit is stable + Allowance, for display; the test is on LowerBound.
	Limit     float64 `json:"limit"`
	Allowance float64 `json:"allowance"`
	// LowerBound is the always-valid lower bound of canary − stable.
	LowerBound float64 `json:"lower_bound"`
	// Judged is false until each arm has enough players and the test has
	// looked.
	Judged   bool `json:"judged"`
	Breached bool `json:"breached"`
}

// Decision is Decide's recommendation with its reasons.
type Decision struct {
	Verdict Verdict `json:"verdict"`
	Reason  string  `json:"reason"`
	Checks  []Check `json:"checks"`
}

// Decide recommends a rollback when a guardrail is breached or the
// sequential test on Avg.L finds the canary worse; otherwise a promotion
// only when cfg.AutoPromote is set, every guardrail has been judged and
// none is worse on the canary than its allowance even unproven, the SRM
// check has run and passed, both arms have cfg.MinPromotePlayers and the
// sequential test finds the canary better with a non-empty CI; otherwise
// to hold. An invalid cfg holds.
func Decide(r Report, cfg GuardrailConfig) Decision {
	if err := cfg.Validate(); err != nil {
		return Decision{Verdict: Hold, Reason: err.Error()}
	}
	var checks []Check
	var breached, unjudged, over []string
	for _, g := range r.Guardrails {
		a := cfg.allowance(g.Name)
		enough := g.StablePlayers >= cfg.MinPlayers && g.CanaryPlayers >= cfg.MinPlayers
		ch := Check{Name: g.Name, Stable: g.Stable, Canary: g.Canary, Limit: g.Stable + a, Allowance: a}
		switch {
		case g.Seq.Looks > 0:
			// A breach proven at any look stands: the bound only rises.
			ch.LowerBound, ch.Judged, ch.Breached = g.Seq.Lo, enough, g.Seq.Lo > a
		case g.Exact && enough:
			ch.LowerBound, ch.Judged, ch.Breached = g.Canary-g.Stable, true, g.Canary-g.Stable > a
		}
		switch {
		case ch.Breached:
			breached = append(breached, fmt.Sprintf("%s canary − stable ≥ %.4g (always valid) > allowance %.4g (stable %.4g, canary %.4g)",
				g.Name, g.Seq.Lo, a, g.Stable, g.Canary))
		case !ch.Judged:
			unjudged = append(unjudged, g.Name)
		case g.Canary-g.Stable > a:
			over = append(over, fmt.Sprintf("%s canary − stable %.4g > allowance %.4g, not proven", g.Name, g.Canary-g.Stable, a))
		}
		checks = append(checks, ch)
	}
	d := Decision{Verdict: Hold, Checks: checks}
	seq := r.AvgL.Seq
	quiet := "no guardrail breached"
	if len(unjudged) > 0 {
		quiet = fmt.Sprintf("guardrails not judged yet (%s; %d players per arm needed)", strings.Join(unjudged, ", "), cfg.MinPlayers)
	}
	switch {
	case len(breached) > 0:
		d.Verdict = Rollback
		d.Reason = "guardrail breached: " + strings.Join(breached, "; ")
	case seq.Worse:
		d.Verdict = Rollback
		d.Reason = fmt.Sprintf("Avg.L is worse on the canary (always-valid CI %.3g to %.3g, p %.3g ≤ %.3g)", seq.Lo, seq.Hi, seq.P, seq.Alpha)
	case r.SRM.Failed:
		d.Reason = fmt.Sprintf("sample ratio mismatch: %d stable and %d canary players against a canary share of %.3g (χ² %.1f, p %.2g < %g)",
			r.SRM.Stable, r.SRM.Canary, r.SRM.Expected, r.SRM.ChiSq, r.SRM.P, SRMAlpha)
	case !cfg.AutoPromote:
		d.Reason = quiet + "; automatic promotion is off"
	case len(unjudged) > 0:
		d.Reason = quiet
	case !r.SRM.Checked:
		d.Reason = quiet + "; the sample-ratio check has not run (no canary share configured)"
	case r.Stable.AvgL.Players < cfg.MinPromotePlayers || r.Canary.AvgL.Players < cfg.MinPromotePlayers:
		d.Reason = fmt.Sprintf("%s; %d stable and %d canary players, %d each needed to promote",
			quiet, r.Stable.AvgL.Players, r.Canary.AvgL.Players, cfg.MinPromotePlayers)
	case len(over) > 0:
		d.Reason = "holding: " + strings.Join(over, "; ")
	case seq.Empty:
		d.Reason = fmt.Sprintf("%s; the always-valid CIs of Avg.L no longer overlap (the effect is not stable over time): holding", quiet)
	case seq.Better:
		d.Verdict = Promote
		d.Reason = fmt.Sprintf("Avg.L %+.3g (always-valid CI %.3g to %.3g, p %.3g ≤ %.3g); guardrails judged, SRM p %.2g",
			r.AvgL.Diff, seq.Lo, seq.Hi, seq.P, seq.Alpha, r.SRM.P)
	default:
		d.Reason = fmt.Sprintf("%s; the sequential test on Avg.L has not found the canary better (p %.3g)", quiet, seq.P)
	}
	return d
}
