package learner

import (
	"slices"
	"time"

	"github.com/parleyhq/parley/schema"
)

// openSession is a session whose session_ended has not been applied yet, or
// whose end arrived before all of its turns.
type openSession struct {
	fold     schema.DialogueFold
	events   []schema.SessionEvent // every applied event, for the journal
	lastTS   time.Time             // latest event time
	lastSeen time.Time             // wall-clock time the latest event was applied
}

// assembler rebuilds dialogues from session events that may come twice, out
// of order, or never end, with one schema.DialogueFold per open session (so
// of two events for the same turn, the later one wins). It is not safe for
// concurrent use.
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
// the event completed it (see schema.DialogueFold.Complete), and whether the
// event was new (and so belongs in the journal).
func (a *assembler) apply(e schema.SessionEvent, now time.Time) (d *schema.Dialogue, fresh bool) {
	if a.closed(e.SessionID) {
		a.stats.Late++
		return nil, false
	}
	s, ok := a.open[e.SessionID]
	if !ok {
		s = &openSession{}
		a.open[e.SessionID] = s
	}
	switch s.fold.Add(e) {
	case schema.FoldDuplicate:
		a.stats.Duplicate++
		return nil, false
	case schema.FoldConflict:
		// A turn logged again by a gateway retry, or a second end.
		a.stats.Conflict++
	}
	s.events = append(s.events, e)
	s.lastSeen = now
	if e.TS.After(s.lastTS) {
		s.lastTS = e.TS
	}
	if e.TS.After(a.watermark) {
		a.watermark = e.TS
	}
	a.stats.Applied++
	if s.fold.Complete() {
		d := s.fold.Dialogue()
		delete(a.open, e.SessionID)
		return &d, true
	}
	return nil, true
}

// expire closes the sessions that have been quiet for longer than timeout,
// by event time (the watermark is timeout past their latest event) or by
// wall clock (nothing arrived for timeout). A session whose session_ended
// arrived but some turns never did keeps its reason; the others get
// abandonReason. Each keeps its contiguous exchanges from turn 1.
func (a *assembler) expire(now time.Time, timeout time.Duration, abandonReason schema.EndReason) []schema.Dialogue {
	var out []schema.Dialogue
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
		d := s.fold.Dialogue()
		if d.Reason == "" {
			d.Reason, d.Ended = abandonReason, s.lastTS
			if d.Ended.Before(d.Started) {
				d.Ended = d.Started
			}
		}
		out = append(out, d)
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
