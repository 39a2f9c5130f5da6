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

// Arms of an A/B experiment. ArmHeld marks the sessions of players in the
// experiment who were served stable because it was paused: they are
// exposure-logged but counted in neither arm.
const (
	ArmStable = "stable"
	ArmCanary = "canary"
	ArmHeld   = "held"
)

// RolloutState is the hash rollout:{deployment} in Redis and the body of the
// admin rollout status. Generation grows by one on every change and is the
// compare-and-set token.
//
// A canary runs one experiment: Salt (random, new for every experiment)
// seeds arm assignment, Split is the canary's share in percent of the
// players in the experiment, fixed for its life, and CanaryWeight is the
// canary's share of all players; the experiment covers
// CanaryWeight/Split of them, so a ramp only widens the coverage (see
// rollout.Route). Steps, when set, are the weights the canary advances
// through (Argo Rollouts' setWeight steps), Step the index of the current
// one, StepGeneration the generation it began at, and MinStepPlayers the
// players each arm needs in a step before it may advance (counted from
// StepGeneration, so a pause and resume keep them). PauseReason says why
// the canary is paused.
type RolloutState struct {
	Deployment     string       `json:"deployment"`
	Stable         string       `json:"stable"`
	Canary         string       `json:"canary,omitempty"`
	CanaryWeight   int          `json:"canary_weight"`
	ExperimentID   string       `json:"experiment_id,omitempty"`
	Salt           string       `json:"salt,omitempty"`
	Split          int          `json:"split,omitempty"`
	Steps          []int        `json:"steps,omitempty"`
	Step           int          `json:"step,omitempty"`
	StepGeneration int64        `json:"step_generation,omitempty"`
	MinStepPlayers int          `json:"min_step_players,omitempty"`
	PauseReason    string       `json:"pause_reason,omitempty"`
	State          RolloutPhase `json:"state"`
	Generation     int64        `json:"generation"`
	UpdatedBy      string       `json:"updated_by"`
	UpdatedAt      time.Time    `json:"updated_at"`
}

// CanaryShare is the share of the experiment's players the canary arm
// should get, for the sample-ratio check: Split/100, or CanaryWeight/100
// for a state without a split (written before salts).
func (s RolloutState) CanaryShare() float64 {
	if s.Split > 0 {
		return float64(s.Split) / 100
	}
	return float64(s.CanaryWeight) / 100
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
	if s.Split < 0 || s.Split > 100 || s.Split > 0 && s.CanaryWeight > s.Split {
		return fmt.Errorf("rollout state: split %d must be in [0, 100] and at least canary_weight %d", s.Split, s.CanaryWeight)
	}
	if err := validSteps(s.Steps); err != nil {
		return fmt.Errorf("rollout state: %w", err)
	}
	if len(s.Steps) > 0 && (s.Step < 0 || s.Step >= len(s.Steps)) {
		return fmt.Errorf("rollout state: step %d of %d steps", s.Step, len(s.Steps))
	}
	if s.MinStepPlayers < 0 {
		return fmt.Errorf("rollout state: min_step_players %d is negative", s.MinStepPlayers)
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
		if len(s.Steps) > 0 && s.CanaryWeight != s.Steps[s.Step] {
			return fmt.Errorf("rollout state: canary_weight %d is not step %d's weight %d", s.CanaryWeight, s.Step, s.Steps[s.Step])
		}
	case PhaseRollingBack:
	default:
		return fmt.Errorf("rollout state: unknown state %q", s.State)
	}
	return nil
}

// CanaryRequest is the body of the admin canary call: a canary of Version
// at Weight percent, or through Steps (the weights it advances through,
// rising; Weight is then the first or left out) with MinStepPlayers
// players per arm in each step before it advances.
type CanaryRequest struct {
	Version        string `json:"version"`
	Weight         int    `json:"weight,omitempty"`
	Steps          []int  `json:"steps,omitempty"`
	MinStepPlayers int    `json:"min_step_players,omitempty"`
	// Generation, when set, makes the change a compare-and-set against it.
	Generation *int64 `json:"generation,omitempty"`
}

// Validate checks the version, weight and steps.
func (r CanaryRequest) Validate() error {
	if !nameRE.MatchString(r.Version) {
		return fmt.Errorf("version %q must match %s", r.Version, nameRE)
	}
	if err := validSteps(r.Steps); err != nil {
		return err
	}
	if len(r.Steps) > 0 && r.Weight != 0 && r.Weight != r.Steps[0] {
		return fmt.Errorf("weight %d is not the first step %d", r.Weight, r.Steps[0])
	}
	if len(r.Steps) == 0 && (r.Weight < 1 || r.Weight > 100) {
		return fmt.Errorf("weight %d must be in [1, 100]", r.Weight)
	}
	if r.MinStepPlayers < 0 {
		return fmt.Errorf("min_step_players %d is negative", r.MinStepPlayers)
	}
	return nil
}

// validSteps checks that canary steps are rising weights in [1, 100].
func validSteps(steps []int) error {
	for i, w := range steps {
		if w < 1 || w > 100 || i > 0 && w <= steps[i-1] {
			return fmt.Errorf("steps %v must be rising weights in [1, 100]", steps)
		}
	}
	return nil
}

// RolloutChange records one change of a rollout: who made it, when, and the
// state before and after. It is published on rollout:{deployment}:events.
type RolloutChange struct {
	Action string       `json:"action"` // canary | advance | promote | rollback | pause | resume
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
