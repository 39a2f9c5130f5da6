package schema

import (
	"fmt"
	"time"
)

// Dialogue is one session as the learner keeps it: who talked, the exchanges
// in order, and why it ended. The learner's store holds one per line;
// DialogueFold and DialoguesFromEvents assemble it from session events.
type Dialogue struct {
	SessionID     string     `json:"session_id"`
	PlayerID      string     `json:"player_id"`
	NPCID         string     `json:"npc_id"`
	Deployment    string     `json:"deployment"`
	PolicyVersion string     `json:"policy_version"`
	ExperimentID  string     `json:"experiment_id,omitempty"`
	Arm           string     `json:"arm,omitempty"`
	Exchanges     []Exchange `json:"exchanges"`
	// Reason is why the session ended; "" for a session with no
	// session_ended event (still open, or cut off).
	Reason EndReason `json:"reason,omitempty"`
	// Started and Ended are the times of the session_started and
	// session_ended events.
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
}

// Validate checks the ids, that the exchanges are numbered 1..n with known
// safety verdicts, that the reason is known, and that the dialogue does not
// end before it starts.
func (d Dialogue) Validate() error {
	if d.SessionID == "" || d.PlayerID == "" || d.NPCID == "" || d.Deployment == "" || d.PolicyVersion == "" {
		return fmt.Errorf("dialogue %q: session, player, npc, deployment and policy version are required", d.SessionID)
	}
	for i, x := range d.Exchanges {
		if x.Turn != i+1 {
			return fmt.Errorf("dialogue %q: exchange %d has turn %d", d.SessionID, i+1, x.Turn)
		}
		switch x.Safety {
		case "", SafetyNone, SafetyRefused, SafetyCrisis:
		default:
			return fmt.Errorf("dialogue %q: exchange %d: safety %q is not none, refused or crisis", d.SessionID, i+1, x.Safety)
		}
	}
	switch d.Reason {
	case "", EndPlayerEnded, EndIdleTimeout, EndMaxTurns, EndSafety, EndError:
	default:
		return fmt.Errorf("dialogue %q: reason %q is not a known end reason", d.SessionID, d.Reason)
	}
	if !d.Ended.IsZero() && d.Ended.Before(d.Started) {
		return fmt.Errorf("dialogue %q: ends before it starts", d.SessionID)
	}
	return nil
}

// FoldResult says what DialogueFold.Add did with an event.
type FoldResult int

const (
	// FoldApplied: a new event, folded in.
	FoldApplied FoldResult = iota
	// FoldConflict: a new event that repeats a turn already folded in or
	// ends the session a second time; folded in by DialogueFold's rules.
	FoldConflict
	// FoldDuplicate: an event_id already folded in; nothing changed.
	FoldDuplicate
)

// DialogueFold assembles one session's Dialogue from its session events,
// which may come more than once, out of order, or not at all. It is the one
// fold from events to a dialogue; its rules:
//
//   - An event whose event_id was already added counts once (at-least-once
//     delivery).
//   - The first event added names the session: player, npc, deployment,
//     policy version, experiment and arm come from it.
//   - Started is the ts of session_started, or the earliest event's ts
//     until session_started arrives.
//   - Of several turn events for the same turn (under different event ids),
//     the one with the later ts wins, whatever order they arrive in; on equal
//     ts the first added stays. The gateway logs a turn event before it saves
//     the turn, so a retry after a failed save or a crash logs the same turn
//     again, and the later event is the exchange the transcript kept.
//   - The first session_ended wins; a second one is a conflict and ignored.
//     Ended is its ts, never before Started.
//   - The exchanges are turns 1..n up to the first missing turn; a turn
//     after a gap is left out (see Gap).
//
// The zero value is an empty fold. It is not safe for concurrent use.
type DialogueFold struct {
	first    SessionEvent
	seen     map[string]bool
	started  time.Time
	earliest time.Time
	turns    map[int]turnEvent
	end      *SessionEvent
}

// turnEvent is the exchange of one turn event and the event's ts.
type turnEvent struct {
	x  Exchange
	ts time.Time
}

// Add folds in e, which must be a valid event (see SessionEvent.Validate)
// of the fold's session: the caller groups events by session_id.
func (f *DialogueFold) Add(e SessionEvent) FoldResult {
	if f.seen[e.EventID] {
		return FoldDuplicate
	}
	if f.seen == nil {
		f.first, f.earliest = e, e.TS
		f.seen, f.turns = make(map[string]bool), make(map[int]turnEvent)
	}
	f.seen[e.EventID] = true
	if e.TS.Before(f.earliest) {
		f.earliest = e.TS
	}
	res := FoldApplied
	switch e.Type {
	case SessionStarted:
		f.started = e.TS
	case TurnEvent:
		prev, dup := f.turns[e.Turn]
		if dup {
			res = FoldConflict
			if !e.TS.After(prev.ts) {
				break
			}
		}
		x := Exchange{Turn: e.Turn, User: e.UserText, NPC: e.NPCText}
		if e.Safety != SafetyNone {
			x.Safety = e.Safety
		}
		f.turns[e.Turn] = turnEvent{x: x, ts: e.TS}
	case SessionEnded:
		if f.end != nil {
			return FoldConflict
		}
		f.end = &e
	}
	return res
}

// Complete reports whether session_started and session_ended were added and
// every turn that session_ended counts is present.
func (f *DialogueFold) Complete() bool {
	if f.end == nil || f.started.IsZero() {
		return false
	}
	for i := 1; i <= f.end.Turns; i++ {
		if _, ok := f.turns[i]; !ok {
			return false
		}
	}
	return true
}

// Gap returns the first missing turn below the highest turn added, or 0 when
// the turns added are 1..n without a gap.
func (f *DialogueFold) Gap() int {
	n := f.contiguous()
	if n == len(f.turns) {
		return 0
	}
	return n + 1
}

// contiguous returns n such that turns 1..n are present and n+1 is not.
func (f *DialogueFold) contiguous() int {
	n := 0
	for {
		if _, ok := f.turns[n+1]; !ok {
			return n
		}
		n++
	}
}

// Dialogue returns the dialogue folded so far. Without a session_ended its
// Reason is "" and Ended the zero time.
func (f *DialogueFold) Dialogue() Dialogue {
	d := Dialogue{
		SessionID: f.first.SessionID, PlayerID: f.first.PlayerID, NPCID: f.first.NPCID,
		Deployment: f.first.Deployment, PolicyVersion: f.first.PolicyVersion,
		ExperimentID: f.first.ExperimentID, Arm: f.first.Arm,
		Started: f.started,
	}
	if d.Started.IsZero() {
		d.Started = f.earliest
	}
	for i := 1; i <= f.contiguous(); i++ {
		d.Exchanges = append(d.Exchanges, f.turns[i].x)
	}
	if f.end != nil {
		d.Reason, d.Ended = f.end.Reason, f.end.TS
		if d.Ended.Before(d.Started) {
			d.Ended = d.Started
		}
	}
	return d
}

// DialoguesFromEvents folds events (see DialogueFold) into one dialogue per
// session, in the order sessions first appear. It returns an error for an
// invalid event, and for a session with a gap in its turns (a lost event,
// which a DialogueFold would cut the dialogue at), naming the session.
func DialoguesFromEvents(events []SessionEvent) ([]Dialogue, error) {
	var order []string
	folds := make(map[string]*DialogueFold)
	for _, e := range events {
		if err := e.Validate(); err != nil {
			return nil, err
		}
		f, ok := folds[e.SessionID]
		if !ok {
			f = &DialogueFold{}
			folds[e.SessionID] = f
			order = append(order, e.SessionID)
		}
		f.Add(e)
	}
	out := make([]Dialogue, 0, len(order))
	for _, id := range order {
		f := folds[id]
		if gap := f.Gap(); gap != 0 {
			return nil, fmt.Errorf("session %q: turn %d missing of %d", id, gap, len(f.turns))
		}
		out = append(out, f.Dialogue())
	}
	return out, nil
}

// LengthStats is a number of sessions and their mean exchange length
// (Avg.L), kept as a running mean.
type LengthStats struct {
	Sessions int     `json:"sessions"`
	AvgL     float64 `json:"avg_l"`
}

// Add counts one more session of the given exchange length.
func (l LengthStats) Add(exchanges int) LengthStats {
	l.AvgL = (l.AvgL*float64(l.Sessions) + float64(exchanges)) / float64(l.Sessions+1)
	l.Sessions++
	return l
}
