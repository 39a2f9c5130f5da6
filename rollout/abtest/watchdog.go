package abtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/parleyhq/parley/schema"
)

// Controller reads and changes a deployment's rollout; *rollout.Client
// (rollout) implements it. The At methods are compare-and-set on the
// generation the decision was made on, so a watchdog never rolls back a
// canary that an operator replaced meanwhile.
type Controller interface {
	Get(ctx context.Context, deployment string) (schema.RolloutState, error)
	RollbackAt(ctx context.Context, deployment string, generation int64, by, reason string) (schema.RolloutChange, error)
	PromoteAt(ctx context.Context, deployment string, generation int64, by, reason string) (schema.RolloutChange, error)
}

// WatchdogConfig configures a Watchdog.
type WatchdogConfig struct {
	Deployment string
	// Interval is how often the experiment is analysed.
	Interval time.Duration
	// By names the watchdog in the rollout history.
	By         string
	Analysis   Config
	Guardrails GuardrailConfig
}

// DefaultWatchdogConfig checks every 30 s with the default analysis and
// guardrails (automatic promotion off).
func DefaultWatchdogConfig() WatchdogConfig {
	return WatchdogConfig{Deployment: "npc", Interval: 30 * time.Second, By: "abtest-watchdog",
		Analysis: DefaultConfig(), Guardrails: DefaultGuardrailConfig()}
}

// Validate reports the first setting out of range.
func (c WatchdogConfig) Validate() error {
	if c.Deployment == "" || c.By == "" {
		return errors.New("watchdog config: deployment and by are required")
	}
	if c.Interval <= 0 {
		return fmt.Errorf("watchdog config: interval %v must be positive", c.Interval)
	}
	return errors.Join(c.Analysis.Validate(), c.Guardrails.Validate())
}

// Watchdog analyses the running canary experiment periodically and acts on
// Decide's verdict: it rolls the canary back when a guardrail is breached
// or the canary is worse, and promotes it when promotion is enabled and the
// sequential test says it is better. Each Check continues the sequential
// tests from the previous one's State (State and Restore let an owner
// persist it across restarts).
type Watchdog struct {
	cfg      WatchdogConfig
	ctl      Controller
	sessions func(experimentID string) []Session
	// pre gives the players' pre-exposure exchange lengths (nil: none).
	pre func(experimentID string) map[string]float64
	log *slog.Logger

	mu    sync.Mutex
	state State
}

// State returns the analysis state after the last Check, for storing.
func (w *Watchdog) State() State {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// Restore continues from a stored State (of the running experiment; one of
// another experiment is ignored by the next Check).
func (w *Watchdog) Restore(s State) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.state = s
}

// NewWatchdog returns a Watchdog reading sessions from sessions (such as
// Collector.Sessions).
func NewWatchdog(cfg WatchdogConfig, ctl Controller, sessions func(experimentID string) []Session, log *slog.Logger) (*Watchdog, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Watchdog{cfg: cfg, ctl: ctl, sessions: sessions, log: log}, nil
}

// Check analyses the experiment once, at now, and acts on the decision. It
// holds unless the deployment is in the canary phase. The returned Report
// and Decision are zero when there was nothing to analyse.
func (w *Watchdog) Check(ctx context.Context, now time.Time) (Report, Decision, error) {
	st, err := w.ctl.Get(ctx, w.cfg.Deployment)
	if err != nil {
		return Report{}, Decision{}, fmt.Errorf("watchdog %q: %w", w.cfg.Deployment, err)
	}
	if st.State != schema.PhaseCanary {
		return Report{}, Decision{Verdict: Hold, Reason: fmt.Sprintf("deployment is %s", st.State)}, nil
	}
	acfg := w.cfg.Analysis
	if share := st.CanaryShare(); acfg.CanaryShare == 0 && share > 0 && share < 1 {
		acfg.CanaryShare = share // the SRM check's expectation
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var pre map[string]float64
	if w.pre != nil {
		pre = w.pre(st.ExperimentID)
	}
	rep, err := Update(w.state, st.ExperimentID, w.sessions(st.ExperimentID), pre, acfg, now)
	if err != nil {
		return Report{}, Decision{}, err
	}
	w.state = rep.State
	d := Decide(rep, w.cfg.Guardrails)
	switch d.Verdict {
	case Rollback:
		_, err = w.ctl.RollbackAt(ctx, w.cfg.Deployment, st.Generation, w.cfg.By, d.Reason)
	case Promote:
		_, err = w.ctl.PromoteAt(ctx, w.cfg.Deployment, st.Generation, w.cfg.By, d.Reason)
	}
	if err != nil {
		return rep, d, fmt.Errorf("watchdog %s %q at generation %d: %w", d.Verdict, w.cfg.Deployment, st.Generation, err)
	}
	if d.Verdict != Hold {
		w.log.Warn("watchdog acted on the canary", "deployment", w.cfg.Deployment, "verdict", d.Verdict,
			"experiment", st.ExperimentID, "canary", st.Canary, "reason", d.Reason)
	}
	return rep, d, nil
}

// Run calls Check every Interval until ctx is done; errors (Redis down, a
// lost compare-and-set) are logged and the next round tries again.
func (w *Watchdog) Run(ctx context.Context) error {
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			if _, _, err := w.Check(ctx, now); err != nil && ctx.Err() == nil {
				w.log.Warn("watchdog check", "err", err)
			}
		}
	}
}
