package learner

import (
	"slices"
	"time"

	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// openSession is a session whose session_ended has not been applied yet, or
// whose end arrived before all of its turns.
type openSession struct {
	first    schema.SessionEvent // ids come from the first event seen
	started  time.Time           // ts of session_started, zero until it arrives
	turns    map[int]schema.Exchange
	turnTS   map[int]time.Time // ts of the event each turn came from
	end      *schema.SessionEvent
	events   []schema.SessionEvent // every applied event, for the journal
	ids      map[string]bool
	lastTS   time.Time // latest event time
	lastSeen time.Time // wall-clock time the latest event was applied
}

// assembler rebuilds dialogues from session events that may come twice, out
// of order, or never end. It is not safe for concurrent use.
type assembler struct {
	open map[string]*openSession
	// closed reports sessions already stored, whose events are dropped.
	closed func(sessionID string) bool
	// watermark is the latest event time seen.
	watermark time.Time

	stats assembleStats
}

// assembleStats counts what the assembler did with events.
type assembleStats struct {
	Applied, Duplicate, Late, Conflict int
}

func newAssembler(closed func(string) bool) *assembler {
	return &assembler{open: map[string]*openSession{}, closed: closed}
}

// apply adds one validated event. It returns the session's dialogue when
// the event completed it (session_started and session_ended applied and
// turns 1..turns present),
// and whether the event was new (and so belongs in the journal).
func (a *assembler) apply(e schema.SessionEvent, now time.Time) (d *simulator.Dialogue, fresh bool) {
	if a.closed(e.SessionID) {
		a.stats.Late++
		return nil, false
	}
	s, ok := a.open[e.SessionID]
	if !ok {
		s = &openSession{first: e, turns: map[int]schema.Exchange{}, turnTS: map[int]time.Time{}, ids: map[string]bool{}}
		a.open[e.SessionID] = s
	}
	if s.ids[e.EventID] {
		a.stats.Duplicate++
		return nil, false
	}
	s.ids[e.EventID] = true
	s.events = append(s.events, e)
	s.lastSeen = now
	if e.TS.After(s.lastTS) {
		s.lastTS = e.TS
	}
	if e.TS.After(a.watermark) {
		a.watermark = e.TS
	}
	a.stats.Applied++
	switch e.Type {
	case schema.SessionStarted:
		s.started = e.TS
	case schema.TurnEvent:
		if _, dup := s.turns[e.Turn]; dup {
			// The same exchange index under a second event id: the gateway
			// logs a turn before saving it, so a turn whose save failed (or
			// whose gateway died) is logged again by the retry. The later
			// one is the exchange the transcript kept.
			a.stats.Conflict++
			if !e.TS.After(s.turnTS[e.Turn]) {
				break
			}
		}
		s.turnTS[e.Turn] = e.TS
		x := schema.Exchange{Turn: e.Turn, User: e.UserText, NPC: e.NPCText}
		if e.Safety != schema.SafetyNone {
			x.Safety = e.Safety
		}
		s.turns[e.Turn] = x
	case schema.SessionEnded:
		if s.end != nil {
			a.stats.Conflict++
			break
		}
		s.end = &e
	}
	if s.complete() {
		d := s.dialogue(s.end.Reason, s.end.TS)
		delete(a.open, e.SessionID)
		return &d, true
	}
	return nil, true
}

// complete reports whether the session started and ended and every turn
// the end event counts is present.
func (s *openSession) complete() bool {
	if s.end == nil || s.started.IsZero() {
		return false
	}
	for i := 1; i <= s.end.Turns; i++ {
		if _, ok := s.turns[i]; !ok {
			return false
		}
	}
	return true
}

// dialogue builds the dialogue from the contiguous exchanges 1..n.
func (s *openSession) dialogue(reason schema.EndReason, ended time.Time) simulator.Dialogue {
	d := simulator.Dialogue{
		SessionID: s.first.SessionID, PlayerID: s.first.PlayerID, NPCID: s.first.NPCID,
		Deployment: s.first.Deployment, PolicyVersion: s.first.PolicyVersion,
		ExperimentID: s.first.ExperimentID, Arm: s.first.Arm,
		Reason: reason, Started: s.started, Ended: ended,
	}
	if d.Started.IsZero() {
		d.Started = s.earliest()
	}
	for i := 1; ; i++ {
		x, ok := s.turns[i]
		if !ok {
			break
		}
		d.Exchanges = append(d.Exchanges, x)
	}
	if d.Ended.Before(d.Started) {
		d.Ended = d.Started
	}
	return d
}

func (s *openSession) earliest() time.Time {
	t := s.lastTS
	for _, e := range s.events {
		if e.TS.Before(t) {
			t = e.TS
		}
	}
	return t
}

// expire closes the sessions that have been quiet for longer than timeout,
// by event time (the watermark is timeout past their latest event) or by
// wall clock (nothing arrived for timeout). A session whose session_ended
// arrived but some turns never did keeps its reason; the others get
// abandonReason. Each keeps its contiguous exchanges from turn 1.
func (a *assembler) expire(now time.Time, timeout time.Duration, abandonReason schema.EndReason) []simulator.Dialogue {
	var out []simulator.Dialogue
	ids := make([]string, 0, len(a.open))
	for id := range a.open {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		s := a.open[id]
		if a.watermark.Sub(s.lastTS) <= timeout && now.Sub(s.lastSeen) <= timeout {
			continue
		}
		reason, ended := abandonReason, s.lastTS
		if s.end != nil {
			reason, ended = s.end.Reason, s.end.TS
		}
		out = append(out, s.dialogue(reason, ended))
		delete(a.open, id)
	}
	return out
}

// pending returns the events of every open session, in the order applied
// per session, sessions sorted by id.
func (a *assembler) pending() []schema.SessionEvent {
	ids := make([]string, 0, len(a.open))
	for id := range a.open {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []schema.SessionEvent
	for _, id := range ids {
		out = append(out, a.open[id].events...)
	}
	return out
}
