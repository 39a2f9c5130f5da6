// Package abtest analyses a canary experiment from its session events
// (DESIGN.md §9): per arm the sessions, Avg.L (mean exchanges per dialogue)
// and Avg.r with 95 % confidence intervals; the canary − stable difference
// with Welch's CI and p-value and with an always-valid sequential test
// (mSPRT) so the report may be read at any time; and the guardrails (error
// rate, p95 latency, early-termination rate, safety refusals). Decide turns
// a Report into a rollback, a promotion or nothing.
//
// A Collector folds schema.SessionEvent records into per-session Session
// summaries; Analyze computes a Report from them.
package abtest

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/parleyhq/parley/schema"
)

// Session summarises one dialogue of an experiment.
type Session struct {
	SessionID    string `json:"session_id"`
	PlayerID     string `json:"player_id"`
	ExperimentID string `json:"experiment_id"`
	Arm          string `json:"arm"`
	Version      string `json:"version"`
	// Started and Ended bound the session; Ended is zero while it is open.
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	// Turns is the number of exchanges (the session's L).
	Turns  int              `json:"turns"`
	Reason schema.EndReason `json:"reason,omitempty"`
	// Reward is the session's Σ r_k, when a scorer has set it (HasReward).
	Reward    float64 `json:"reward"`
	HasReward bool    `json:"has_reward"`
	// Exchanges holds the per-turn measurements, for latency and safety.
	Exchanges []Exchange `json:"exchanges,omitempty"`
}

// Exchange is what the guardrails need of one turn.
type Exchange struct {
	At        time.Time     `json:"at"`
	LatencyMS int64         `json:"latency_ms"`
	Safety    schema.Safety `json:"safety"`
}

// Done reports whether the session has ended.
func (s Session) Done() bool { return !s.Ended.IsZero() }

// Collector builds Session summaries from session events. Events may come
// more than once and out of order (Kafka is at-least-once and keyed by
// session); duplicates are recognised by event_id. It is safe for
// concurrent use: a consumer adds while a Watchdog reads.
type Collector struct {
	mu       sync.Mutex
	seen     map[string]struct{}
	sessions map[string]*Session
}

// NewCollector returns an empty Collector.
func NewCollector() *Collector {
	return &Collector{seen: map[string]struct{}{}, sessions: map[string]*Session{}}
}

// Add folds one event in. It reports false for a duplicate.
func (c *Collector) Add(e schema.SessionEvent) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.seen[e.EventID]; dup {
		return false
	}
	c.seen[e.EventID] = struct{}{}
	s := c.sessions[e.SessionID]
	if s == nil {
		s = &Session{SessionID: e.SessionID}
		c.sessions[e.SessionID] = s
	}
	if s.PlayerID == "" {
		s.PlayerID, s.ExperimentID, s.Arm, s.Version = e.PlayerID, e.ExperimentID, e.Arm, e.PolicyVersion
	}
	if s.Started.IsZero() || e.TS.Before(s.Started) {
		s.Started = e.TS
	}
	switch e.Type {
	case schema.TurnEvent:
		s.Exchanges = append(s.Exchanges, Exchange{At: e.TS, LatencyMS: e.LatencyMS, Safety: e.Safety})
		if !s.Done() && e.Turn > s.Turns {
			s.Turns = e.Turn
		}
	case schema.SessionEnded:
		s.Ended, s.Turns, s.Reason = e.TS, e.Turns, e.Reason
	}
	return true
}

// SetReward records a session's total reward (Σ r_k), as scored by the
// learner; sessions without one are left out of Avg.r.
func (c *Collector) SetReward(sessionID string, reward float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions[sessionID]
	if s == nil {
		s = &Session{SessionID: sessionID}
		c.sessions[sessionID] = s
	}
	s.Reward, s.HasReward = reward, true
}

// Sessions returns the sessions of an experiment ("" for all), open ones
// included, ordered by start time then id.
func (c *Collector) Sessions(experimentID string) []Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Session
	for _, s := range c.sessions {
		if s.PlayerID == "" || experimentID != "" && s.ExperimentID != experimentID {
			continue
		}
		cp := *s
		cp.Exchanges = slices.Clone(s.Exchanges)
		out = append(out, cp)
	}
	slices.SortFunc(out, func(a, b Session) int {
		if c := a.Started.Compare(b.Started); c != 0 {
			return c
		}
		return strings.Compare(a.SessionID, b.SessionID)
	})
	return out
}
