package schema

import (
	"errors"
	"fmt"
	"time"
)

// RolloutPhase is the state of a deployment's rollout.
type RolloutPhase string

// Rollout phases.
const (
	PhaseSteady      RolloutPhase = "steady"
	PhaseCanary      RolloutPhase = "canary"
	PhasePaused      RolloutPhase = "paused"
	PhaseRollingBack RolloutPhase = "rolling_back"
)

// Arms of an A/B experiment.
const (
	ArmStable = "stable"
	ArmCanary = "canary"
)

// RolloutState is the hash rollout:{deployment} in Redis and the body of the
// admin rollout status. Generation grows by one on every change and is the
// compare-and-set token.
type RolloutState struct {
	Deployment   string       `json:"deployment"`
	Stable       string       `json:"stable"`
	Canary       string       `json:"canary,omitempty"`
	CanaryWeight int          `json:"canary_weight"`
	ExperimentID string       `json:"experiment_id,omitempty"`
	State        RolloutPhase `json:"state"`
	Generation   int64        `json:"generation"`
	UpdatedBy    string       `json:"updated_by"`
	UpdatedAt    time.Time    `json:"updated_at"`
}

// Validate checks that the phase, versions and weight agree.
func (s RolloutState) Validate() error {
	if err := validID("deployment", s.Deployment); err != nil {
		return fmt.Errorf("rollout state: %w", err)
	}
	if s.Stable == "" {
		return errors.New("rollout state: stable is required")
	}
	if s.CanaryWeight < 0 || s.CanaryWeight > 100 {
		return fmt.Errorf("rollout state: canary_weight %d must be in [0, 100]", s.CanaryWeight)
	}
	if s.Generation < 0 {
		return fmt.Errorf("rollout state: generation %d is negative", s.Generation)
	}
	switch s.State {
	case PhaseSteady:
		if s.Canary != "" || s.CanaryWeight != 0 {
			return errors.New("rollout state: steady has no canary")
		}
	case PhaseCanary, PhasePaused:
		if s.Canary == "" {
			return fmt.Errorf("rollout state: %s needs a canary version", s.State)
		}
	case PhaseRollingBack:
	default:
		return fmt.Errorf("rollout state: unknown state %q", s.State)
	}
	return nil
}

// CanaryRequest is the body of the admin canary call.
type CanaryRequest struct {
	Version string `json:"version"`
	Weight  int    `json:"weight"`
	// Generation, when set, makes the change a compare-and-set against it.
	Generation *int64 `json:"generation,omitempty"`
}

// Validate checks the version and weight.
func (r CanaryRequest) Validate() error {
	if !nameRE.MatchString(r.Version) {
		return fmt.Errorf("version %q must match %s", r.Version, nameRE)
	}
	if r.Weight < 1 || r.Weight > 100 {
		return fmt.Errorf("weight %d must be in [1, 100]", r.Weight)
	}
	return nil
}

// RolloutChange records one change of a rollout: who made it, when, and the
// state before and after. It is published on rollout:{deployment}:events.
type RolloutChange struct {
	Action string       `json:"action"` // canary | promote | rollback | pause | resume
	By     string       `json:"by"`
	At     time.Time    `json:"at"`
	Reason string       `json:"reason,omitempty"`
	From   RolloutState `json:"from"`
	To     RolloutState `json:"to"`
}

// Validate checks that the change names its author and moves the generation forward.
func (c RolloutChange) Validate() error {
	if c.Action == "" || c.By == "" || c.At.IsZero() {
		return errors.New("rollout change: action, by and at are required")
	}
	if c.To.Generation <= c.From.Generation {
		return fmt.Errorf("rollout change: generation %d does not move past %d", c.To.Generation, c.From.Generation)
	}
	return c.To.Validate()
}
