package simulator

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/parleyhq/parley/schema"
)

// DialogueEvents returns the session events of d: session_started, one turn
// event per exchange and, when d.Reason is set, session_ended. Turn events
// are spaced evenly between d.Started and d.Ended. Event ids are UUIDv7 of
// the event time with random bits drawn from rng, so a seeded rng gives the
// same ids every time. schema.DialoguesFromEvents turns them back into d.
func DialogueEvents(d schema.Dialogue, rng *rand.Rand) ([]schema.SessionEvent, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	end := d.Ended
	if end.IsZero() || !end.After(d.Started) {
		end = d.Started.Add(time.Duration(len(d.Exchanges)+1) * time.Second)
	}
	step := end.Sub(d.Started) / time.Duration(len(d.Exchanges)+1)
	base := schema.SessionEvent{
		Schema: schema.SessionEventSchema, SessionID: d.SessionID, PlayerID: d.PlayerID, NPCID: d.NPCID,
		Deployment: d.Deployment, PolicyVersion: d.PolicyVersion, ExperimentID: d.ExperimentID, Arm: d.Arm,
	}
	out := make([]schema.SessionEvent, 0, len(d.Exchanges)+2)
	add := func(e schema.SessionEvent) {
		e.EventID = NewEventID(rng, e.TS)
		out = append(out, e)
	}
	e := base
	e.Type, e.TS = schema.SessionStarted, d.Started
	add(e)
	for i, x := range d.Exchanges {
		e := base
		e.Type, e.TS = schema.TurnEvent, d.Started.Add(time.Duration(i+1)*step)
		e.Turn, e.UserText, e.NPCText, e.Safety = x.Turn, x.User, x.NPC, x.Safety
		if e.Safety == "" {
			e.Safety = schema.SafetyNone
		}
		add(e)
	}
	if d.Reason != "" {
		e := base
		e.Type, e.TS, e.Turns, e.Reason = schema.SessionEnded, end, len(d.Exchanges), d.Reason
		add(e)
	}
	for _, e := range out {
		if err := e.Validate(); err != nil {
			return nil, fmt.Errorf("dialogue %q: %w", d.SessionID, err)
		}
	}
	return out, nil
}

// NewEventID returns a UUIDv7 string for time t whose random bits come
// from rng.
func NewEventID(rng *rand.Rand, t time.Time) string {
	var u uuid.UUID
	binary.BigEndian.PutUint64(u[8:], rng.Uint64())
	binary.BigEndian.PutUint64(u[0:], rng.Uint64())
	ms := uint64(t.UnixMilli())
	u[0], u[1], u[2], u[3], u[4], u[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	u[6] = 0x70 | u[6]&0x0f // version 7
	u[8] = 0x80 | u[8]&0x3f // RFC 4122 variant
	return u.String()
}
