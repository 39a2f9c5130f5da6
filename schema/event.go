package schema

import (
	"fmt"
	"time"
)

// SessionEventSchema is the value of the schema field of every session event.
const SessionEventSchema = "parley.session_event/v1"

// SessionsTopic is the Kafka topic that carries session events, keyed by session id.
const SessionsTopic = "parley.sessions.v1"

// EventType names the kind of a session event.
type EventType string

// The session event types.
const (
	SessionStarted EventType = "session_started"
	TurnEvent      EventType = "turn"
	SessionEnded   EventType = "session_ended"
)

// Safety is the verdict of the safety guard on one exchange.
type Safety string

// Safety verdicts.
const (
	SafetyNone    Safety = "none"
	SafetyRefused Safety = "refused"
	SafetyCrisis  Safety = "crisis"
)

// EndReason says why a session ended.
type EndReason string

// End reasons.
const (
	EndPlayerEnded EndReason = "player_ended"
	EndIdleTimeout EndReason = "idle_timeout"
	EndMaxTurns    EndReason = "max_turns"
	EndSafety      EndReason = "safety"
	EndError       EndReason = "error"
)

// PlayerEnded reports whether the player chose to end the conversation
// (by leaving it or letting it time out), as opposed to the system ending it.
func (r EndReason) PlayerEnded() bool { return r == EndPlayerEnded || r == EndIdleTimeout }

// SessionEvent is one record on parley.sessions.v1. Common fields are always
// set; the fields of the other types are set according to Type.
type SessionEvent struct {
	Schema        string    `json:"schema"`
	EventID       string    `json:"event_id"`
	Type          EventType `json:"type"`
	SessionID     string    `json:"session_id"`
	PlayerID      string    `json:"player_id"`
	NPCID         string    `json:"npc_id"`
	Deployment    string    `json:"deployment"`
	PolicyVersion string    `json:"policy_version"`
	ExperimentID  string    `json:"experiment_id,omitempty"`
	Arm           string    `json:"arm,omitempty"`
	// Salt is the experiment's assignment salt and Generation the rollout
	// generation the session was assigned at, so that an audit can
	// recompute its arm and an analysis can tell runs apart.
	Salt       string    `json:"salt,omitempty"`
	Generation int64     `json:"generation,omitempty"`
	TS         time.Time `json:"ts"`

	// session_started
	Client *ClientMeta `json:"client,omitempty"`

	// turn
	Turn      int    `json:"turn,omitempty"`
	UserText  string `json:"user_text,omitempty"`
	NPCText   string `json:"npc_text,omitempty"`
	LatencyMS int64  `json:"latency_ms,omitempty"`
	TokensIn  int    `json:"tokens_in,omitempty"`
	TokensOut int    `json:"tokens_out,omitempty"`
	Safety    Safety `json:"safety,omitempty"`

	// session_ended
	Turns  int       `json:"turns,omitempty"`
	Reason EndReason `json:"reason,omitempty"`
}

// ClientMeta is what a game client says about itself when a session starts.
type ClientMeta struct {
	GameBuild string `json:"game_build,omitempty"`
	Locale    string `json:"locale,omitempty"`
}

// Validate reports the first field of e that is missing or inconsistent with its type.
func (e SessionEvent) Validate() error {
	if e.Schema != SessionEventSchema {
		return fmt.Errorf("session event: schema %q, want %q", e.Schema, SessionEventSchema)
	}
	if err := validUUID("event_id", e.EventID); err != nil {
		return fmt.Errorf("session event: %w", err)
	}
	required := []struct{ name, value string }{
		{"session_id", e.SessionID}, {"player_id", e.PlayerID}, {"npc_id", e.NPCID},
		{"deployment", e.Deployment}, {"policy_version", e.PolicyVersion},
	}
	for _, f := range required {
		if f.value == "" {
			return fmt.Errorf("session event %s: %s is required", e.EventID, f.name)
		}
	}
	if e.TS.IsZero() {
		return fmt.Errorf("session event %s: ts is required", e.EventID)
	}
	switch e.Arm {
	case "", ArmStable, ArmCanary, ArmHeld:
	default:
		return fmt.Errorf("session event %s: arm %q is not stable, canary or held", e.EventID, e.Arm)
	}
	if e.Generation < 0 {
		return fmt.Errorf("session event %s: generation %d is negative", e.EventID, e.Generation)
	}
	if e.Salt != "" && e.ExperimentID == "" {
		return fmt.Errorf("session event %s: a salt without an experiment", e.EventID)
	}
	switch e.Type {
	case SessionStarted:
	case TurnEvent:
		if e.Turn < 1 {
			return fmt.Errorf("session event %s: turn %d must be at least 1", e.EventID, e.Turn)
		}
		switch e.Safety {
		case SafetyNone, SafetyRefused, SafetyCrisis:
		default:
			return fmt.Errorf("session event %s: safety %q is not none, refused or crisis", e.EventID, e.Safety)
		}
		if e.LatencyMS < 0 || e.TokensIn < 0 || e.TokensOut < 0 {
			return fmt.Errorf("session event %s: latency and token counts must not be negative", e.EventID)
		}
	case SessionEnded:
		if e.Turns < 0 {
			return fmt.Errorf("session event %s: turns %d is negative", e.EventID, e.Turns)
		}
		switch e.Reason {
		case EndPlayerEnded, EndIdleTimeout, EndMaxTurns, EndSafety, EndError:
		default:
			return fmt.Errorf("session event %s: reason %q is not a known end reason", e.EventID, e.Reason)
		}
	default:
		return fmt.Errorf("session event %s: unknown type %q", e.EventID, e.Type)
	}
	return nil
}

func validUUID(field, s string) error {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return fmt.Errorf("%s %q is not a UUID", field, s)
	}
	for i, c := range s {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			continue
		}
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("%s %q is not a lowercase UUID", field, s)
		}
	}
	return nil
}
