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
	"maps"
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
//
// The event ids of a session are kept until ForgetAfter (of event time)
// after it ended, then dropped, so the ids kept are bounded by the sessions
// open or recently ended rather than growing with the topic; an event of a
// session ended and forgotten is a redelivery (a session's events share a
// key, hence a partition, so they come in order and a restart replays only
// the last seconds), and is dropped too.
//
// For CUPED it also keeps each player's pre-exposure exchange length
// (Pre): the running mean of the turns of their sessions that ended
// before their first session in the experiment they were last exposed to.
type Collector struct {
	mu       sync.Mutex
	seen     map[string]map[string]struct{} // session id → event ids
	ended    []string                       // sessions with ids kept, by arrival of their end
	latest   time.Time                      // the newest event time folded in
	sessions map[string]*Session
	players  map[string]*History
}

// ForgetAfter is how long, in event time, a Collector keeps the event ids
// of an ended session: redeliveries come within seconds of the original,
// and a consumer restart replays only what followed its last commit.
const ForgetAfter = time.Hour

// History is a player's exchange lengths as the Collector has seen them,
// for the CUPED covariate.
type History struct {
	// Experiment is the experiment the player was last exposed to, and
	// Since the start of their first session in it.
	Experiment string    `json:"experiment,omitempty"`
	Since      time.Time `json:"since"`
	// Pre is the player's sessions that ended before Since (of any other
	// experiment or none): the covariate of Experiment.
	Pre schema.LengthStats `json:"pre"`
	// All is every ended session of the player's, which becomes Pre when
	// they are exposed to a new experiment.
	All schema.LengthStats `json:"all"`
}

// NewCollector returns an empty Collector.
func NewCollector() *Collector {
	return &Collector{seen: map[string]map[string]struct{}{}, sessions: map[string]*Session{}, players: map[string]*History{}}
}

// Add folds one event in. It reports false for a duplicate.
func (c *Collector) Add(e schema.SessionEvent) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions[e.SessionID]
	ids := c.seen[e.SessionID]
	if _, dup := ids[e.EventID]; dup || s != nil && s.Done() && ids == nil {
		return false
	}
	if ids == nil {
		ids = map[string]struct{}{}
		c.seen[e.SessionID] = ids
	}
	ids[e.EventID] = struct{}{}
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
	c.expose(s)
	switch e.Type {
	case schema.TurnEvent:
		s.Exchanges = append(s.Exchanges, Exchange{At: e.TS, LatencyMS: e.LatencyMS, Safety: e.Safety})
		if !s.Done() && e.Turn > s.Turns {
			s.Turns = e.Turn
		}
	case schema.SessionEnded:
		if !s.Done() {
			c.ended = append(c.ended, s.SessionID)
			c.endHistory(s.PlayerID, s.ExperimentID, e.TS, e.Turns)
		}
		s.Ended, s.Turns, s.Reason = e.TS, e.Turns, e.Reason
	}
	if e.TS.After(c.latest) {
		c.latest = e.TS
	}
	c.forget()
	return true
}

// expose records that s's player is in s's experiment from s's start.
func (c *Collector) expose(s *Session) {
	if s.PlayerID == "" || s.ExperimentID == "" {
		return
	}
	h := c.history(s.PlayerID)
	switch {
	case h.Experiment == s.ExperimentID:
		if s.Started.Before(h.Since) {
			h.Since = s.Started
		}
	case !s.Started.Before(h.Since): // not a late session of an earlier experiment
		h.Experiment, h.Since, h.Pre = s.ExperimentID, s.Started, h.All
	}
}

// endHistory counts a session of the player's, of experiment, that ended
// at ended after turns exchanges.
func (c *Collector) endHistory(player, experiment string, ended time.Time, turns int) {
	if player == "" {
		return
	}
	h := c.history(player)
	h.All = h.All.Add(turns)
	if h.Experiment != "" && experiment != h.Experiment && ended.Before(h.Since) {
		h.Pre = h.Pre.Add(turns) // came after the exposure, ended before it
	}
}

func (c *Collector) history(player string) *History {
	h := c.players[player]
	if h == nil {
		h = &History{}
		c.players[player] = h
	}
	return h
}

// forget drops the event ids of the sessions that ended ForgetAfter before
// the newest event.
func (c *Collector) forget() {
	for len(c.ended) > 0 {
		s := c.sessions[c.ended[0]]
		if s != nil && !s.Ended.Before(c.latest.Add(-ForgetAfter)) {
			return
		}
		delete(c.seen, c.ended[0])
		c.ended = c.ended[1:]
	}
}

// Pre returns the pre-exposure exchange length of every player exposed to
// experimentID who ended a session before their first one in it, the
// covariate Update takes; players without one are absent.
func (c *Collector) Pre(experimentID string) map[string]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]float64{}
	for id, h := range c.players {
		if h.Experiment == experimentID && h.Pre.Sessions > 0 {
			out[id] = h.Pre.AvgL
		}
	}
	return out
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

// Snapshot is a Collector's whole state, for a checkpoint: the sessions,
// the ids of the events already folded in of each session open or ended
// within ForgetAfter, and the players' histories.
type Snapshot struct {
	Events   map[string][]string `json:"events"`
	Sessions []Session           `json:"sessions"`
	Players  map[string]History  `json:"players"`
}

// Snapshot copies the collector's state.
func (c *Collector) Snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := Snapshot{Events: make(map[string][]string, len(c.seen)), Sessions: make([]Session, 0, len(c.sessions)),
		Players: make(map[string]History, len(c.players))}
	for sid, ids := range c.seen {
		out.Events[sid] = slices.Collect(maps.Keys(ids))
	}
	for _, s := range c.sessions {
		cp := *s
		cp.Exchanges = slices.Clone(s.Exchanges)
		out.Sessions = append(out.Sessions, cp)
	}
	for id, h := range c.players {
		out.Players[id] = *h
	}
	return out
}

// Restore replaces the collector's state with a snapshot's.
func (c *Collector) Restore(snap Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = make(map[string]map[string]struct{}, len(snap.Events))
	for sid, ids := range snap.Events {
		c.seen[sid] = make(map[string]struct{}, len(ids))
		for _, id := range ids {
			c.seen[sid][id] = struct{}{}
		}
	}
	c.sessions = make(map[string]*Session, len(snap.Sessions))
	c.ended, c.latest = nil, time.Time{}
	for _, s := range snap.Sessions {
		cp := s
		c.sessions[s.SessionID] = &cp
		for _, at := range []time.Time{s.Started, s.Ended} {
			if at.After(c.latest) {
				c.latest = at
			}
		}
		if _, kept := c.seen[s.SessionID]; kept && s.Done() {
			c.ended = append(c.ended, s.SessionID)
		}
	}
	slices.SortFunc(c.ended, func(a, b string) int { return c.sessions[a].Ended.Compare(c.sessions[b].Ended) })
	c.players = make(map[string]*History, len(snap.Players))
	for id, h := range snap.Players {
		cp := h
		c.players[id] = &cp
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
