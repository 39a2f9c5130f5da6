package abtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/parleyhq/parley/internal/atomicfile"
	"github.com/parleyhq/parley/rollout"
	"github.com/parleyhq/parley/schema"
)

// OwnerController is what the analysis owner reads and changes;
// *rollout.Client implements it. Every change is a compare-and-set on the
// generation the analysis read.
type OwnerController interface {
	Controller
	AdvanceAt(ctx context.Context, deployment string, generation int64, by, reason string) (schema.RolloutChange, error)
	PauseAt(ctx context.Context, deployment string, generation int64, by, reason string) (schema.RolloutChange, error)
	PublishReport(ctx context.Context, deployment string, v any) error
}

var _ OwnerController = (*rollout.Client)(nil)

// OwnerConfig configures an Owner.
type OwnerConfig struct {
	Watchdog WatchdogConfig
	Follow   FollowConfig
	// Checkpoint is the file the collector and the sequential tests' state
	// are written to before the follower commits its offsets.
	Checkpoint string
	// TimelineStep and TimelinePoints shape the published timeline.
	TimelineStep   time.Duration
	TimelinePoints int
}

// Validate reports the first setting out of range.
func (c OwnerConfig) Validate() error {
	if c.Checkpoint == "" {
		return errors.New("abtest owner: checkpoint file is required")
	}
	if c.TimelineStep <= 0 || c.TimelinePoints < 2 {
		return fmt.Errorf("abtest owner: timeline step %v and points %d must be positive and at least 2", c.TimelineStep, c.TimelinePoints)
	}
	return errors.Join(c.Watchdog.Validate(), c.Follow.Validate())
}

// Actions an Owner round may take besides the watchdog's.
const (
	ActionAdvance = "advance" // the canary moved to its next step
	ActionHold    = "hold"    // the experiment was paused (SRM or audit failure)
)

// Published is what the analysis owner publishes in Redis after each
// round (rollout.Client.PublishReport) and every gateway's dashboard shows.
type Published struct {
	Deployment   string    `json:"deployment"`
	ExperimentID string    `json:"experiment_id"`
	Generation   int64     `json:"generation"`
	At           time.Time `json:"at"`
	By           string    `json:"by"`
	// Guardrails are the settings the owner runs with, AutoPromote among
	// them, as they really are in the learner.
	Guardrails GuardrailConfig `json:"guardrails"`
	Report     Report          `json:"report"`
	Decision   Decision        `json:"decision"`
	Audit      Audit           `json:"audit"`
	// StepPlayers counts each arm's players assigned since the current
	// step began (its progress toward MinStepPlayers).
	StepPlayers map[string]int `json:"step_players,omitempty"`
	// Action is what this round did: the decision's rollback or promote,
	// ActionAdvance, ActionHold, or "" (nothing).
	Action   string  `json:"action,omitempty"`
	Timeline []Point `json:"timeline"`
}

// Owner is a deployment's one A/B analysis: it follows the sessions topic
// as a consumer group into a Collector (checkpointed with the sequential
// tests' state), and every Watchdog interval audits the assignment, lets
// the Watchdog roll back or promote, holds the experiment on a sample
// ratio mismatch or a failed audit, advances a stepped canary when the
// analysis holds and automatic promotion is on, and publishes the result.
type Owner struct {
	cfg OwnerConfig
	ctl OwnerController
	col *Collector
	wd  *Watchdog
	log *slog.Logger
}

// NewOwner returns an Owner over the collector col.
func NewOwner(cfg OwnerConfig, ctl OwnerController, col *Collector, log *slog.Logger) (*Owner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := &Owner{cfg: cfg, ctl: ctl, col: col, log: log}
	wd, err := NewWatchdog(cfg.Watchdog, stepper{o}, col.Sessions, log)
	if err != nil {
		return nil, err
	}
	wd.pre = col.Pre // CUPED's covariate
	o.wd = wd
	return o, nil
}

// checkpoint is the file an Owner keeps.
type checkpoint struct {
	Collector Snapshot `json:"collector"`
	Analysis  State    `json:"analysis"`
}

func (o *Owner) save() error {
	raw, err := json.Marshal(checkpoint{Collector: o.col.Snapshot(), Analysis: o.wd.State()})
	if err != nil {
		return err
	}
	return atomicfile.Write(o.cfg.Checkpoint, raw, 0o644)
}

func (o *Owner) restore() error {
	raw, err := os.ReadFile(o.cfg.Checkpoint)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("abtest owner: read checkpoint: %w", err)
	}
	var cp checkpoint
	if err := json.Unmarshal(raw, &cp); err != nil {
		return fmt.Errorf("abtest owner: checkpoint %s: %w", o.cfg.Checkpoint, err)
	}
	o.col.Restore(cp.Collector)
	o.wd.Restore(cp.Analysis)
	return nil
}

// Run restores the checkpoint, then follows the topic and analyses every
// Watchdog interval until ctx is done. A failed round (Redis down, a lost
// compare-and-set) is logged and the next one tries again.
func (o *Owner) Run(ctx context.Context) error {
	if err := o.restore(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	followed := make(chan error, 1)
	go func() { followed <- Follow(ctx, o.cfg.Follow, o.col, o.save, o.log) }()
	t := time.NewTicker(o.cfg.Watchdog.Interval)
	defer t.Stop()
	for {
		select {
		case err := <-followed:
			return err
		case now := <-t.C:
			if _, err := o.Analyze(ctx, now); err != nil && ctx.Err() == nil {
				o.log.Warn("a/b analysis", "err", err)
			}
		}
	}
}

// Analyze runs one round at now and publishes it. It does nothing (and
// returns a zero Published) unless the deployment runs a canary: the last
// published report stands while the experiment is paused or over.
func (o *Owner) Analyze(ctx context.Context, now time.Time) (Published, error) {
	dep, by := o.cfg.Watchdog.Deployment, o.cfg.Watchdog.By
	st, err := o.ctl.Get(ctx, dep)
	if err != nil {
		return Published{}, fmt.Errorf("a/b analysis of %q: %w", dep, err)
	}
	if st.State != schema.PhaseCanary {
		return Published{}, nil
	}
	sessions := o.col.Sessions(st.ExperimentID)
	pub := Published{Deployment: dep, ExperimentID: st.ExperimentID, Generation: st.Generation, At: now, By: by,
		Guardrails: o.cfg.Watchdog.Guardrails, StepPlayers: stepPlayers(sessions, st),
		Audit:    AuditAssignment(sessions, st.Salt, func(player, salt string) string { return rollout.Assign(player, salt, st.Split) }),
		Timeline: Timeline(sessions, o.cfg.TimelineStep, now, o.cfg.TimelinePoints)}
	var act error
	if pub.Audit.Failed() {
		reason := fmt.Sprintf("assignment audit failed: %d of %d sessions on the wrong arm (%s)", pub.Audit.Wrong, pub.Audit.Checked, pub.Audit.Example)
		pub.Decision = Decision{Verdict: Hold, Reason: reason}
		pub.Action, act = ActionHold, o.hold(ctx, st, reason)
		return pub, errors.Join(act, o.publish(ctx, pub))
	}
	rep, d, err := o.wd.Check(ctx, now)
	if err != nil {
		return pub, err
	}
	if d.Verdict != Hold {
		pub.Report, pub.Decision, pub.Action = rep, d, string(d.Verdict)
		return pub, o.publish(ctx, pub)
	}
	// The sample ratio is checked against the experiment's split, the
	// canary's share of the players the experiment covers.
	rep.SRM = SRMTest(rep.SRM.Stable, rep.SRM.Canary, st.CanaryShare())
	d = Decide(rep, o.cfg.Watchdog.Guardrails)
	pub.Report, pub.Decision = rep, d
	switch {
	case rep.SRM.Failed:
		pub.Action, act = ActionHold, o.hold(ctx, st, d.Reason)
	case d.Verdict == Promote:
		pub.Action = string(Promote)
		_, act = stepper{o}.PromoteAt(ctx, dep, st.Generation, by, d.Reason)
	case o.stepHolds(st, pub):
		pub.Action = ActionAdvance
		_, act = o.ctl.AdvanceAt(ctx, dep, st.Generation, by, fmt.Sprintf("step %d of %v held: %s", st.Step+1, st.Steps, d.Reason))
	}
	return pub, errors.Join(act, o.publish(ctx, pub))
}

func (o *Owner) hold(ctx context.Context, st schema.RolloutState, reason string) error {
	_, err := o.ctl.PauseAt(ctx, st.Deployment, st.Generation, o.cfg.Watchdog.By, reason)
	if err == nil {
		o.log.Warn("a/b analysis held the experiment", "deployment", st.Deployment, "experiment", st.ExperimentID, "reason", reason)
	}
	return err
}

func (o *Owner) publish(ctx context.Context, pub Published) error {
	if pub.Timeline == nil {
		pub.Timeline = []Point{}
	}
	return o.ctl.PublishReport(ctx, pub.Deployment, pub)
}

// stepHolds reports whether a stepped canary may advance: automatic
// promotion is on, steps are left, every guardrail has been judged and
// none breached, and each arm has MinStepPlayers players (at least one)
// assigned in this step.
func (o *Owner) stepHolds(st schema.RolloutState, pub Published) bool {
	if !o.cfg.Watchdog.Guardrails.AutoPromote || st.Step+1 >= len(st.Steps) || len(pub.Decision.Checks) == 0 {
		return false
	}
	for _, ch := range pub.Decision.Checks {
		if !ch.Judged || ch.Breached {
			return false
		}
	}
	need := max(1, st.MinStepPlayers)
	return pub.StepPlayers[schema.ArmStable] >= need && pub.StepPlayers[schema.ArmCanary] >= need
}

// stepPlayers counts each arm's distinct players among the sessions
// assigned since st's step began (its StepGeneration; the current
// generation for a state written without one), so a pause and resume,
// which change the generation, keep the count.
func stepPlayers(sessions []Session, st schema.RolloutState) map[string]int {
	generation := st.StepGeneration
	if generation == 0 {
		generation = st.Generation
	}
	seen := map[[2]string]bool{}
	out := map[string]int{}
	for _, s := range sessions {
		k := [2]string{s.Arm, s.PlayerID}
		if s.Generation >= generation && !seen[k] {
			seen[k] = true
			out[s.Arm]++
		}
	}
	return out
}

// stepper is the Controller the Owner's Watchdog acts through: a
// promotion of a canary with steps left advances it to the next step
// instead, once each arm has its players in this step.
type stepper struct{ o *Owner }

func (s stepper) Get(ctx context.Context, deployment string) (schema.RolloutState, error) {
	return s.o.ctl.Get(ctx, deployment)
}

func (s stepper) RollbackAt(ctx context.Context, deployment string, generation int64, by, reason string) (schema.RolloutChange, error) {
	return s.o.ctl.RollbackAt(ctx, deployment, generation, by, reason)
}

func (s stepper) PromoteAt(ctx context.Context, deployment string, generation int64, by, reason string) (schema.RolloutChange, error) {
	st, err := s.o.ctl.Get(ctx, deployment)
	if err != nil {
		return schema.RolloutChange{}, err
	}
	if st.Step+1 >= len(st.Steps) {
		return s.o.ctl.PromoteAt(ctx, deployment, generation, by, reason)
	}
	players := stepPlayers(s.o.col.Sessions(st.ExperimentID), st)
	if need := max(1, st.MinStepPlayers); players[schema.ArmStable] < need || players[schema.ArmCanary] < need {
		return schema.RolloutChange{}, fmt.Errorf("step %d of %v has %d stable and %d canary players, %d each needed to advance: %w",
			st.Step+1, st.Steps, players[schema.ArmStable], players[schema.ArmCanary], need, rollout.ErrTransition)
	}
	return s.o.ctl.AdvanceAt(ctx, deployment, generation, by, "step held: "+reason)
}
