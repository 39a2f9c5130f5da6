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
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/parleyhq/parley/schema"
)

// Action names a change of the rollout state.
type Action string

// Actions. Init creates the state; Restore writes back a fleet's last known
// state after Redis lost it; the others are the live-ops actions (Advance
// moves a stepped canary to its next step; Pause with a reason is how the
// analysis holds an experiment).
const (
	ActionInit     Action = "init"
	ActionCanary   Action = "canary"
	ActionAdvance  Action = "advance"
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
	// Version and Weight are the canary's (ActionCanary only); Steps, when
	// set, are the weights it advances through (Weight is then the first
	// or 0) and MinStepPlayers the players each arm needs per step.
	Version        string `json:"version,omitempty"`
	Weight         int    `json:"weight,omitempty"`
	Steps          []int  `json:"steps,omitempty"`
	MinStepPlayers int    `json:"min_step_players,omitempty"`
	// ExperimentID names the experiment a new canary starts. Empty:
	// "{deployment}-{version}-g{generation}-{first 8 characters of the salt}",
	// so that a Redis that lost its data and restarted the generations
	// never names two experiments alike.
	ExperimentID string `json:"experiment_id,omitempty"`
	// Salt seeds the arm assignment of a new experiment. Empty: 16 random
	// hex digits; set it only to replay an experiment in a test.
	Salt   string `json:"salt,omitempty"`
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
	// Generation, when set, must equal the current generation (the
	// operator's compare-and-set token); otherwise ErrConflict.
	Generation *int64 `json:"generation,omitempty"`
}

// Next computes the state that req leads to from the state from, at time at.
// The rules:
//
//	canary V W:  steady or rolling_back → canary (V ≠ stable), a new experiment;
//	             canary or paused with V = canary, no new steps, and W neither
//	             below the weight nor above the split → canary at weight W (a
//	             ramp: same experiment and salt, only the coverage widens, so
//	             nobody changes arm; W jumps to its step when it is one);
//	             otherwise → canary V W, a new experiment (new salt and id),
//	             so that periods with different arms are never pooled.
//	canary V --steps S: a new experiment at the first step of S.
//	advance:     canary with steps left → the next step's weight (a ramp).
//	promote:     canary or paused → steady with stable = canary.
//	rollback:    canary or paused → rolling_back: weight 0, new sessions go to
//	             stable, sessions pinned to the canary finish on it; the
//	             canary, experiment and salt stay named for the report.
//	pause:       canary → paused (reason kept): covered players are held on
//	             stable, weight kept.
//	resume:      paused → canary.
//
// A new experiment's split (the canary's share inside it) is 50 %, or its
// largest weight when that is higher, fixed until the experiment ends.
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
	live := from.State == schema.PhaseCanary || from.State == schema.PhasePaused
	switch req.Action {
	case ActionCanary:
		cr := schema.CanaryRequest{Version: req.Version, Weight: req.Weight, Steps: req.Steps, MinStepPlayers: req.MinStepPlayers}
		if err := cr.Validate(); err != nil {
			return from, fmt.Errorf("canary: %w", err)
		}
		if req.Version == from.Stable {
			return from, fmt.Errorf("canary %s: it is already stable: %w", req.Version, ErrTransition)
		}
		weight := req.Weight
		if len(req.Steps) > 0 {
			weight = req.Steps[0]
		}
		to.State, to.Canary, to.CanaryWeight, to.PauseReason = schema.PhaseCanary, req.Version, weight, ""
		ramp := live && from.Canary == req.Version && len(req.Steps) == 0 &&
			from.Split > 0 && weight >= from.CanaryWeight && weight <= from.Split
		if ramp {
			if i := slices.Index(from.Steps, weight); i > from.Step {
				to.Step, to.StepGeneration = i, to.Generation
			} else if i < from.Step {
				to.Steps, to.Step, to.StepGeneration, to.MinStepPlayers = nil, 0, 0, 0 // a ramp by hand off the plan ends it
			}
			break
		}
		salt := req.Salt
		if salt == "" {
			salt = newSalt()
		}
		to.Salt, to.Split = salt, max(50, weight)
		if len(req.Steps) > 0 {
			to.Split = max(50, req.Steps[len(req.Steps)-1])
		}
		to.Steps, to.Step, to.StepGeneration, to.MinStepPlayers = slices.Clone(req.Steps), 0, to.Generation, req.MinStepPlayers
		to.ExperimentID = req.ExperimentID
		if to.ExperimentID == "" {
			to.ExperimentID = fmt.Sprintf("%s-%s-g%d-%.8s", from.Deployment, req.Version, to.Generation, salt)
		}
	case ActionAdvance:
		if from.State != schema.PhaseCanary || from.Step+1 >= len(from.Steps) {
			return from, fmt.Errorf("advance in state %s at step %d of %v (promote after the last step): %w",
				from.State, from.Step+1, from.Steps, ErrTransition)
		}
		to.Step, to.StepGeneration = from.Step+1, to.Generation
		to.CanaryWeight = from.Steps[to.Step]
	case ActionPromote:
		if !live {
			return bad()
		}
		to = schema.RolloutState{Deployment: from.Deployment, Stable: from.Canary, State: schema.PhaseSteady,
			Generation: to.Generation, UpdatedBy: to.UpdatedBy, UpdatedAt: to.UpdatedAt}
	case ActionRollback:
		if !live {
			return bad()
		}
		to.State, to.CanaryWeight, to.PauseReason = schema.PhaseRollingBack, 0, ""
	case ActionPause:
		if from.State != schema.PhaseCanary {
			return bad()
		}
		to.State, to.PauseReason = schema.PhasePaused, req.Reason
	case ActionResume:
		if from.State != schema.PhasePaused {
			return bad()
		}
		to.State, to.PauseReason = schema.PhaseCanary, ""
	default:
		return from, fmt.Errorf("action %q: %w", req.Action, ErrTransition)
	}
	if err := to.Validate(); err != nil {
		return from, fmt.Errorf("%s: %w", req.Action, err)
	}
	return to, nil
}

// newSalt returns 16 random hex digits.
func newSalt() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
