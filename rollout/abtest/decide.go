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
// automatically. Guardrails compare the canary with stable over the
// report's guardrail window (Config.GuardrailWindow): a guardrail is
// breached when the canary is worse than stable by more than its allowance
// over that whole window.
type GuardrailConfig struct {
	// MinSessions is how many ended sessions (and exchanges) each arm needs
	// in the window before the guardrails are judged.
	MinSessions int `json:"min_sessions"`
	// MaxErrorRateIncrease is the allowed canary − stable error rate.
	MaxErrorRateIncrease float64 `json:"max_error_rate_increase"`
	// MaxP95LatencyRatio is the allowed canary / stable p95 latency.
	MaxP95LatencyRatio float64 `json:"max_p95_latency_ratio"`
	// MaxEarlyTermIncrease is the allowed canary − stable share of sessions
	// ended after at most one exchange.
	MaxEarlyTermIncrease float64 `json:"max_early_termination_increase"`
	// MaxSafetyRefusalIncrease is the allowed canary − stable refusal rate.
	MaxSafetyRefusalIncrease float64 `json:"max_safety_refusal_increase"`
	// AutoPromote enables promotion when the sequential test on Avg.L says
	// the canary is better and each arm has MinPromoteSessions.
	AutoPromote        bool `json:"auto_promote"`
	MinPromoteSessions int  `json:"min_promote_sessions"`
}

// DefaultGuardrailConfig returns conservative limits with auto-promotion off.
func DefaultGuardrailConfig() GuardrailConfig {
	return GuardrailConfig{
		MinSessions:              50,
		MaxErrorRateIncrease:     0.01,
		MaxP95LatencyRatio:       1.5,
		MaxEarlyTermIncrease:     0.05,
		MaxSafetyRefusalIncrease: 0.01,
		MinPromoteSessions:       200,
	}
}

// Validate reports the first setting out of range.
func (c GuardrailConfig) Validate() error {
	switch {
	case c.MinSessions < 1 || c.MinPromoteSessions < 1:
		return fmt.Errorf("guardrail config: minimum sessions %d and %d must be positive", c.MinSessions, c.MinPromoteSessions)
	case c.MaxErrorRateIncrease < 0 || c.MaxEarlyTermIncrease < 0 || c.MaxSafetyRefusalIncrease < 0:
		return fmt.Errorf("guardrail config: allowed increases must not be negative")
	case c.MaxP95LatencyRatio < 1:
		return fmt.Errorf("guardrail config: p95 latency ratio %v must be at least 1", c.MaxP95LatencyRatio)
	}
	return nil
}

// Check is one guardrail's verdict.
type Check struct {
	Name   string  `json:"name"`
	Stable float64 `json:"stable"`
	Canary float64 `json:"canary"`
	// Limit is the highest canary value allowed given stable's.
	Limit float64 `json:"limit"`
	// Judged is false when an arm had too little data in the window.
	Judged   bool `json:"judged"`
	Breached bool `json:"breached"`
}

// Decision is Decide's recommendation with its reasons.
type Decision struct {
	Verdict Verdict `json:"verdict"`
	Reason  string  `json:"reason"`
	Checks  []Check `json:"checks"`
}

// Decide recommends a rollback when any guardrail is breached over the
// report's window; otherwise a promotion when cfg.AutoPromote is set, both
// arms have cfg.MinPromoteSessions ended sessions and the sequential test
// on Avg.L finds the canary better; otherwise to hold. An invalid cfg holds.
func Decide(r Report, cfg GuardrailConfig) Decision {
	if err := cfg.Validate(); err != nil {
		return Decision{Verdict: Hold, Reason: err.Error()}
	}
	s, c := r.Stable.Window, r.Canary.Window
	sessionsOK := s.Sessions >= cfg.MinSessions && c.Sessions >= cfg.MinSessions
	exchangesOK := s.Exchanges >= cfg.MinSessions && c.Exchanges >= cfg.MinSessions
	checks := []Check{
		{Name: "error_rate", Stable: s.ErrorRate, Canary: c.ErrorRate, Limit: s.ErrorRate + cfg.MaxErrorRateIncrease, Judged: sessionsOK},
		{Name: "p95_latency_ms", Stable: s.P95LatencyMS, Canary: c.P95LatencyMS, Limit: s.P95LatencyMS * cfg.MaxP95LatencyRatio, Judged: exchangesOK},
		{Name: "early_termination_rate", Stable: s.EarlyTermRate, Canary: c.EarlyTermRate, Limit: s.EarlyTermRate + cfg.MaxEarlyTermIncrease, Judged: sessionsOK},
		{Name: "safety_refusal_rate", Stable: s.SafetyRefusalRate, Canary: c.SafetyRefusalRate, Limit: s.SafetyRefusalRate + cfg.MaxSafetyRefusalIncrease, Judged: exchangesOK},
	}
	var breached []string
	for i := range checks {
		ch := &checks[i]
		ch.Breached = ch.Judged && ch.Canary > ch.Limit
		if ch.Breached {
			breached = append(breached, fmt.Sprintf("%s %.4g > limit %.4g (stable %.4g)", ch.Name, ch.Canary, ch.Limit, ch.Stable))
		}
	}
	d := Decision{Verdict: Hold, Checks: checks}
	quiet := "no guardrail breached"
	if !sessionsOK && !exchangesOK {
		quiet = fmt.Sprintf("guardrails not judged yet (%d sessions per arm needed in the window)", cfg.MinSessions)
	}
	switch {
	case len(breached) > 0:
		d.Verdict = Rollback
		d.Reason = fmt.Sprintf("guardrail breached over %v: %s", r.GuardrailWindow, strings.Join(breached, "; "))
	case !cfg.AutoPromote:
		d.Reason = quiet + "; automatic promotion is off"
	case r.Stable.AvgL.N < cfg.MinPromoteSessions || r.Canary.AvgL.N < cfg.MinPromoteSessions:
		d.Reason = fmt.Sprintf("%s; %d stable and %d canary sessions, %d each needed to promote",
			quiet, r.Stable.AvgL.N, r.Canary.AvgL.N, cfg.MinPromoteSessions)
	case r.AvgL.Seq.Better:
		d.Verdict = Promote
		d.Reason = fmt.Sprintf("Avg.L %+.3g (always-valid CI %.3g to %.3g, p %.3g ≤ %.3g)",
			r.AvgL.Diff, r.AvgL.Seq.Lo, r.AvgL.Seq.Hi, r.AvgL.Seq.P, r.AvgL.Seq.Alpha)
	default:
		d.Reason = fmt.Sprintf("%s; the sequential test on Avg.L has not found the canary better (p %.3g)", quiet, r.AvgL.Seq.P)
	}
	return d
}
