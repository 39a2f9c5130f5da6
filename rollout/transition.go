// Package rollout coordinates which model versions a deployment serves
// (DESIGN.md §3 "Redis keys", §9). The state lives in the Redis hash
// {prefix}rollout:{deployment}; every change is a compare-and-set on its
// generation (a Lua script), is appended to {prefix}rollout:{deployment}:history
// and is published as a schema.RolloutChange on
// {prefix}rollout:{deployment}:events. Client changes and reads the state,
// Client.Watch follows it from a gateway, Client.Heartbeat and Client.Fleet
// report what each instance serves, and Assign and Route give each player a
// sticky arm.
package rollout

import (
	"errors"
	"fmt"
	"time"

	"github.com/parleyhq/parley/schema"
)

// Action names a change of the rollout state.
type Action string

// Actions. Init creates the state; Restore writes back a fleet's last known
// state after Redis lost it; the others are the live-ops actions.
const (
	ActionInit     Action = "init"
	ActionCanary   Action = "canary"
	ActionPromote  Action = "promote"
	ActionRollback Action = "rollback"
	ActionPause    Action = "pause"
	ActionResume   Action = "resume"
	ActionRestore  Action = "restore"
)

// Errors callers branch on.
var (
	// ErrNotFound is returned when a deployment has no rollout state yet.
	ErrNotFound = errors.New("rollout: no rollout state")
	// ErrConflict is returned when the generation moved between the read and
	// the write, or differs from the one the caller expected: someone else
	// changed the rollout first.
	ErrConflict = errors.New("rollout: generation changed")
	// ErrExists is returned by Init for a deployment that already has state.
	ErrExists = errors.New("rollout: state already exists")
	// ErrTransition is returned for an action the current state does not
	// allow, such as promoting without a canary.
	ErrTransition = errors.New("rollout: action not allowed in this state")
)

// Request is one live-ops change.
type Request struct {
	Action Action `json:"action"`
	// Version and Weight are the canary's (ActionCanary only).
	Version string `json:"version,omitempty"`
	Weight  int    `json:"weight,omitempty"`
	// ExperimentID names the experiment a new canary starts; it is also the
	// salt of arm assignment. Empty: "{deployment}-{version}-g{generation}".
	ExperimentID string `json:"experiment_id,omitempty"`
	By           string `json:"by"`
	Reason       string `json:"reason,omitempty"`
	// Generation, when set, must equal the current generation (the
	// operator's compare-and-set token); otherwise ErrConflict.
	Generation *int64 `json:"generation,omitempty"`
}

// Next computes the state that req leads to from the state from, at time at.
// The rules:
//
//	canary V W:  steady or rolling_back → canary (V ≠ stable), a new experiment;
//	             canary or paused with V = canary → canary at weight W (a ramp,
//	             same experiment, so the players already on canary stay there);
//	             canary or paused with another V → canary V, a new experiment.
//	promote:     canary or paused → steady with stable = canary.
//	rollback:    canary or paused → rolling_back: weight 0, new sessions go to
//	             stable, sessions pinned to the canary finish on it; the
//	             canary and experiment stay named for the report.
//	pause:       canary → paused: no new sessions on canary, weight kept.
//	resume:      paused → canary.
func Next(from schema.RolloutState, req Request, at time.Time) (schema.RolloutState, error) {
	if req.By == "" {
		return from, fmt.Errorf("%s: who is making the change is required", req.Action)
	}
	to := from
	to.Generation = from.Generation + 1
	to.UpdatedBy = req.By
	to.UpdatedAt = at.UTC()
	bad := func() (schema.RolloutState, error) {
		return from, fmt.Errorf("%s in state %s: %w", req.Action, from.State, ErrTransition)
	}
	switch req.Action {
	case ActionCanary:
		cr := schema.CanaryRequest{Version: req.Version, Weight: req.Weight}
		if err := cr.Validate(); err != nil {
			return from, fmt.Errorf("canary: %w", err)
		}
		if req.Version == from.Stable {
			return from, fmt.Errorf("canary %s: it is already stable: %w", req.Version, ErrTransition)
		}
		same := (from.State == schema.PhaseCanary || from.State == schema.PhasePaused) && from.Canary == req.Version
		to.State, to.Canary, to.CanaryWeight = schema.PhaseCanary, req.Version, req.Weight
		if !same {
			to.ExperimentID = req.ExperimentID
			if to.ExperimentID == "" {
				to.ExperimentID = fmt.Sprintf("%s-%s-g%d", from.Deployment, req.Version, to.Generation)
			}
		}
	case ActionPromote:
		if from.State != schema.PhaseCanary && from.State != schema.PhasePaused {
			return bad()
		}
		to.State, to.Stable, to.Canary, to.CanaryWeight, to.ExperimentID = schema.PhaseSteady, from.Canary, "", 0, ""
	case ActionRollback:
		if from.State != schema.PhaseCanary && from.State != schema.PhasePaused {
			return bad()
		}
		to.State, to.CanaryWeight = schema.PhaseRollingBack, 0
	case ActionPause:
		if from.State != schema.PhaseCanary {
			return bad()
		}
		to.State = schema.PhasePaused
	case ActionResume:
		if from.State != schema.PhasePaused {
			return bad()
		}
		to.State = schema.PhaseCanary
	default:
		return from, fmt.Errorf("action %q: %w", req.Action, ErrTransition)
	}
	if err := to.Validate(); err != nil {
		return from, fmt.Errorf("%s: %w", req.Action, err)
	}
	return to, nil
}
