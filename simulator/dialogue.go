package simulator

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/parleyhq/parley/schema"
)

// Dialogue is one session as the learner sees it: who talked, the
// exchanges in order, and why it ended. Events and DialoguesFromEvents
// convert it to and from the session events of parley.sessions.v1.
type Dialogue struct {
	SessionID     string            `json:"session_id"`
	PlayerID      string            `json:"player_id"`
	NPCID         string            `json:"npc_id"`
	Deployment    string            `json:"deployment"`
	PolicyVersion string            `json:"policy_version"`
	ExperimentID  string            `json:"experiment_id,omitempty"`
	Arm           string            `json:"arm,omitempty"`
	Exchanges     []schema.Exchange `json:"exchanges"`
	// Reason is why the session ended; "" for a session with no
	// session_ended event (still open, or cut off).
	Reason schema.EndReason `json:"reason,omitempty"`
	// Started and Ended are the times of the session_started and
	// session_ended events. Turn events are spaced evenly between them.
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
}

// Validate checks the ids and that the exchanges are numbered 1..n.
func (d Dialogue) Validate() error {
	if d.SessionID == "" || d.PlayerID == "" || d.NPCID == "" || d.Deployment == "" || d.PolicyVersion == "" {
		return fmt.Errorf("dialogue %q: session, player, npc, deployment and policy version are required", d.SessionID)
	}
	for i, x := range d.Exchanges {
		if x.Turn != i+1 {
			return fmt.Errorf("dialogue %q: exchange %d has turn %d", d.SessionID, i+1, x.Turn)
		}
	}
	if !d.Ended.IsZero() && d.Ended.Before(d.Started) {
		return fmt.Errorf("dialogue %q: ends before it starts", d.SessionID)
	}
	return nil
}

// Events returns the session_started event, one turn event per exchange and,
// when Reason is set, the session_ended event. Event ids are UUIDv7 of the
// event time with random bits drawn from rng, so a seeded rng gives the
// same ids every time.
func (d Dialogue) Events(rng *rand.Rand) ([]schema.SessionEvent, error) {
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

// ErrSessionConflict reports events of one session that disagree: the same
// turn twice with different ids, or a second end.
var ErrSessionConflict = errors.New("conflicting session events")

// DialoguesFromEvents groups events by session into dialogues, in the order
// sessions first appear. Events repeated with the same event_id (at-least-
// once delivery) count once. A session without session_ended gets Reason "".
func DialoguesFromEvents(events []schema.SessionEvent) ([]Dialogue, error) {
	b := newDialogueBuilder()
	for _, e := range events {
		if err := b.add(e); err != nil {
			return nil, err
		}
	}
	return b.finish()
}

type dialogueBuilder struct {
	order []string
	byID  map[string]*Dialogue
	seen  map[string]bool
	turns map[string]map[int]schema.Exchange
}

func newDialogueBuilder() *dialogueBuilder {
	return &dialogueBuilder{byID: make(map[string]*Dialogue), seen: make(map[string]bool), turns: make(map[string]map[int]schema.Exchange)}
}

func (b *dialogueBuilder) add(e schema.SessionEvent) error {
	if err := e.Validate(); err != nil {
		return err
	}
	if b.seen[e.EventID] {
		return nil
	}
	b.seen[e.EventID] = true
	d, ok := b.byID[e.SessionID]
	if !ok {
		d = &Dialogue{
			SessionID: e.SessionID, PlayerID: e.PlayerID, NPCID: e.NPCID, Deployment: e.Deployment,
			PolicyVersion: e.PolicyVersion, ExperimentID: e.ExperimentID, Arm: e.Arm, Started: e.TS,
		}
		b.byID[e.SessionID] = d
		b.order = append(b.order, e.SessionID)
		b.turns[e.SessionID] = make(map[int]schema.Exchange)
	}
	if e.PlayerID != d.PlayerID {
		return fmt.Errorf("session %q: player %q, earlier %q: %w", e.SessionID, e.PlayerID, d.PlayerID, ErrSessionConflict)
	}
	switch e.Type {
	case schema.SessionStarted:
		d.Started = e.TS
	case schema.TurnEvent:
		if _, dup := b.turns[e.SessionID][e.Turn]; dup {
			return fmt.Errorf("session %q: turn %d twice: %w", e.SessionID, e.Turn, ErrSessionConflict)
		}
		b.turns[e.SessionID][e.Turn] = schema.Exchange{Turn: e.Turn, User: e.UserText, NPC: e.NPCText, Safety: e.Safety}
	case schema.SessionEnded:
		if d.Reason != "" {
			return fmt.Errorf("session %q: ended twice: %w", e.SessionID, ErrSessionConflict)
		}
		d.Reason, d.Ended = e.Reason, e.TS
	}
	return nil
}

func (b *dialogueBuilder) finish() ([]Dialogue, error) {
	out := make([]Dialogue, 0, len(b.order))
	for _, id := range b.order {
		d := b.byID[id]
		ts := b.turns[id]
		for i := 1; i <= len(ts); i++ {
			x, ok := ts[i]
			if !ok {
				return nil, fmt.Errorf("session %q: turn %d missing of %d: %w", id, i, len(ts), ErrSessionConflict)
			}
			if x.Safety == schema.SafetyNone {
				x.Safety = ""
			}
			d.Exchanges = append(d.Exchanges, x)
		}
		out = append(out, *d)
	}
	return out, nil
}
