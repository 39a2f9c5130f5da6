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
	"fmt"
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
	// Salt and Generation are the experiment's assignment salt and the
	// rollout generation the session was assigned at.
	Salt       string `json:"salt,omitempty"`
	Generation int64  `json:"generation,omitempty"`
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
		s.Salt, s.Generation = e.Salt, e.Generation
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

// Snapshot is a Collector's whole state, for a checkpoint: the sessions
// and the ids of the events already folded in.
type Snapshot struct {
	Seen     []string  `json:"seen"`
	Sessions []Session `json:"sessions"`
}

// Snapshot copies the collector's state.
func (c *Collector) Snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := Snapshot{Seen: make([]string, 0, len(c.seen)), Sessions: make([]Session, 0, len(c.sessions))}
	for id := range c.seen {
		out.Seen = append(out.Seen, id)
	}
	for _, s := range c.sessions {
		cp := *s
		cp.Exchanges = slices.Clone(s.Exchanges)
		out.Sessions = append(out.Sessions, cp)
	}
	return out
}

// Restore replaces the collector's state with a snapshot's.
func (c *Collector) Restore(snap Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = make(map[string]struct{}, len(snap.Seen))
	for _, id := range snap.Seen {
		c.seen[id] = struct{}{}
	}
	c.sessions = make(map[string]*Session, len(snap.Sessions))
	for _, s := range snap.Sessions {
		cp := s
		c.sessions[s.SessionID] = &cp
	}
}

// Audit is the outcome of recomputing the arm of an experiment's sessions.
type Audit struct {
	// Checked counts the sessions of the experiment's salt in an arm.
	Checked int `json:"checked"`
	// Wrong counts those whose recorded arm is not the one their player
	// hashes to; Example names one of them.
	Wrong   int    `json:"wrong"`
	Example string `json:"example,omitempty"`
}

// Failed reports whether any session was on the wrong arm.
func (a Audit) Failed() bool { return a.Wrong > 0 }

// AuditAssignment recomputes the arm of every session in the stable or
// canary arm that was assigned with salt, by assign(playerID, salt) (such
// as rollout.Assign with the experiment's split), and counts those logged
// on another arm: a gateway that routes by a stale or wrong rule. Sessions
// without the salt (logged before salts) are not checked.
func AuditAssignment(sessions []Session, salt string, assign func(playerID, salt string) string) Audit {
	var a Audit
	if salt == "" {
		return a
	}
	for _, s := range sessions {
		if s.Salt != salt || s.Arm != schema.ArmStable && s.Arm != schema.ArmCanary {
			continue
		}
		a.Checked++
		if want := assign(s.PlayerID, salt); want != s.Arm {
			a.Wrong++
			if a.Example == "" {
				a.Example = fmt.Sprintf("session %s of player %s logged %s, hashes to %s", s.SessionID, s.PlayerID, s.Arm, want)
			}
		}
	}
	return a
}
