package learner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/internal/atomicfile"
)

// RefreshConfig configures the user-agent refresh (DESIGN.md §1, §5).
type RefreshConfig struct {
	// EverySessions refreshes once this many ended sessions arrived since
	// the last refresh; Every refreshes after this long if at least
	// MinSessions arrived. Either may be 0 (off), not both.
	EverySessions int           `json:"every_sessions"`
	Every         time.Duration `json:"every"`
	MinSessions   int           `json:"min_sessions"`
	// ReplayShare adds a random sample of older sessions, this share of
	// the new window's size, so the agent does not forget older players.
	ReplayShare float64 `json:"replay_share"`
	// RhoTolerance is how far ρ may fall before a refresh is refused;
	// within it the termination log-loss decides.
	RhoTolerance float64 `json:"rho_tolerance"`
	// SFT is the fine-tuning template: Role is user, Parent is set to the
	// current version, DataDir and Registry come from the learner.
	SFT SFTConfig `json:"sft"`
	// Poll is how often the loop checks whether a refresh is due.
	Poll time.Duration `json:"poll"`
}

// DefaultRefreshConfig refreshes every 200 new sessions or hour (with at
// least 20), replaying half as many older ones, fine-tuning 100 steps at
// the paper's SFT learning rate scaled to the small models (3e-4).
func DefaultRefreshConfig() RefreshConfig {
	sft := DefaultSFTConfig(RoleUser)
	sft.Steps = 100
	sft.Train.LearningRate = 3e-4
	return RefreshConfig{EverySessions: 200, Every: time.Hour, MinSessions: 20, ReplayShare: 0.5, SFT: sft, Poll: 5 * time.Second}
}

// Validate reports the first bad field.
func (c RefreshConfig) Validate() error {
	switch {
	case c.EverySessions < 0 || c.Every < 0 || c.MinSessions < 0:
		return fmt.Errorf("refresh config: every %d sessions, every %v, min %d must not be negative", c.EverySessions, c.Every, c.MinSessions)
	case c.EverySessions == 0 && c.Every == 0:
		return errors.New("refresh config: set every_sessions or every")
	case c.ReplayShare < 0 || c.RhoTolerance < 0:
		return fmt.Errorf("refresh config: replay share %g and rho tolerance %g must not be negative", c.ReplayShare, c.RhoTolerance)
	case c.Poll <= 0:
		return fmt.Errorf("refresh config: poll %v must be positive", c.Poll)
	case c.SFT.Role != RoleUser:
		return fmt.Errorf("refresh config: the refresh trains the user agent, not %q", c.SFT.Role)
	}
	return nil
}

// FidelityGate returns the publication rule of a refreshed user agent: it
// must be at least as faithful as the current one. ρ decides first: a fall
// of more than tol refuses, a rise of more than tol accepts; within tol (or
// when neither ρ is defined) the [Continue]/[Terminate] log-loss must not
// rise. An undefined ρ counts below any defined one.
func FidelityGate(tol float64) func(before, after Metrics) (bool, string) {
	return func(before, after Metrics) (bool, string) {
		switch {
		case before.RhoDefined && !after.RhoDefined:
			return false, fmt.Sprintf("ρ undefined after, %.3f before", before.Rho)
		case !before.RhoDefined && after.RhoDefined:
			return true, fmt.Sprintf("ρ %.3f after, undefined before", after.Rho)
		case before.RhoDefined && after.Rho < before.Rho-tol:
			return false, fmt.Sprintf("ρ fell from %.3f to %.3f", before.Rho, after.Rho)
		case before.RhoDefined && after.Rho > before.Rho+tol:
			return true, fmt.Sprintf("ρ rose from %.3f to %.3f", before.Rho, after.Rho)
		case after.TermLogLoss > before.TermLogLoss:
			return false, fmt.Sprintf("ρ %.3f → %.3f within %.3f, termination log-loss rose from %.4f to %.4f",
				before.Rho, after.Rho, tol, before.TermLogLoss, after.TermLogLoss)
		default:
			return true, fmt.Sprintf("ρ %.3f → %.3f within %.3f, termination log-loss %.4f → %.4f",
				before.Rho, after.Rho, tol, before.TermLogLoss, after.TermLogLoss)
		}
	}
}

// refreshState is what the refresh loop remembers across restarts
// (DataDir/refresh.json).
type refreshState struct {
	// TrainedUpTo is the store position up to which sessions have been
	// part of a refresh window.
	TrainedUpTo int `json:"trained_up_to"`
	// InProgressUpTo is the end of the window of a refresh that started
	// and has not finished: a restart resumes it on the same window, so
	// its checkpoints stay valid.
	InProgressUpTo int       `json:"in_progress_up_to,omitempty"`
	Refreshes      int       `json:"refreshes"`
	Published      int       `json:"published"`
	LastAt         time.Time `json:"last_at"`
	LastVersion    string    `json:"last_version,omitempty"`
	LastReason     string    `json:"last_reason,omitempty"`
	// Last is what the last finished refresh measured; nil before the first.
	Last *refreshOutcome `json:"last,omitempty"`
}

// refreshOutcome is the verdict of a refresh's fidelity gate, the values it
// judged and the last training loss.
type refreshOutcome struct {
	Published         bool    `json:"published"`
	RhoBefore         float64 `json:"rho_before"`
	RhoAfter          float64 `json:"rho_after"`
	TermLogLossBefore float64 `json:"term_log_loss_before"`
	TermLogLossAfter  float64 `json:"term_log_loss_after"`
	Loss              float64 `json:"loss"`
}

// refresher fine-tunes the user agent on windows of the store.
type refresher struct {
	cfg      RefreshConfig
	store    *Store
	registry string
	dataDir  string
	logger   *slog.Logger
	now      func() time.Time
	state    refreshState
	// status is the state as of the last load or save, for metrics.
	status atomic.Pointer[refreshState]
}

func (r *refresher) statePath() string { return filepath.Join(r.dataDir, "refresh.json") }

func (r *refresher) load() error {
	raw, err := os.ReadFile(r.statePath())
	switch {
	case errors.Is(err, os.ErrNotExist):
		r.state.LastAt = r.now()
	case err != nil:
		return fmt.Errorf("read refresh state: %w", err)
	default:
		if err := json.Unmarshal(raw, &r.state); err != nil {
			return fmt.Errorf("read refresh state %q: %w", r.statePath(), err)
		}
	}
	st := r.state
	r.status.Store(&st)
	return nil
}

func (r *refresher) save() error {
	raw, err := json.MarshalIndent(r.state, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(r.statePath(), raw, 0o644); err != nil {
		return fmt.Errorf("write refresh state: %w", err)
	}
	st := r.state
	r.status.Store(&st)
	return nil
}

// due reports whether a refresh should run now.
func (r *refresher) due() bool {
	return schedule{r.cfg.EverySessions, r.cfg.Every, r.cfg.MinSessions}.due(
		r.store.Len()-r.state.TrainedUpTo, r.now().Sub(r.state.LastAt))
}

// run checks every Poll whether a refresh is due and runs it. A failed
// refresh is logged and retried at the next due time: it never touches
// what is served.
func (r *refresher) run(ctx context.Context) error {
	return runEvery(ctx, r.cfg.Poll, r.due,
		func(ctx context.Context) error { _, err := r.refresh(ctx); return err },
		func(err error) {
			r.logger.Error("user-agent refresh failed", "err", err)
			r.state.LastAt = r.now()
		})
}

// refresh fine-tunes the current user agent on the sessions stored since
// the last refresh plus a replay sample of older ones, and publishes the
// result only if FidelityGate accepts it.
func (r *refresher) refresh(ctx context.Context) (*SFTResult, error) {
	upTo := r.state.InProgressUpTo
	if upTo <= r.state.TrainedUpTo || upTo > r.store.Len() {
		upTo = r.store.Len()
	}
	window := r.store.Range(r.state.TrainedUpTo, upTo)
	if len(window) == 0 {
		return nil, errors.New("refresh: no new sessions")
	}
	if r.state.InProgressUpTo != upTo {
		r.state.InProgressUpTo = upTo
		if err := r.save(); err != nil {
			return nil, fmt.Errorf("refresh: %w", err)
		}
	}
	older := r.store.Range(0, r.state.TrainedUpTo)
	rng := rand.New(rand.NewPCG(r.cfg.SFT.Seed, uint64(r.state.Refreshes)+1))
	k := min(len(older), int(math.Round(r.cfg.ReplayShare*float64(len(window)))))
	for _, i := range rng.Perm(len(older))[:k] {
		window = append(window, older[i])
	}

	cfg := r.cfg.SFT
	cfg.Registry, cfg.DataDir, cfg.Version = r.registry, filepath.Join(r.dataDir, "runs"), ""
	cfg.Gate = FidelityGate(r.cfg.RhoTolerance)
	parent, err := currentVersion(ctx, r.registry, cfg.Model)
	if err != nil {
		return nil, fmt.Errorf("refresh: %w", err)
	}
	cfg.Parent = parent
	cfg.RunID = fmt.Sprintf("refresh-%s-%06d", cfg.Model, r.state.Refreshes+1)
	cfg.SkipEvalBefore = false
	r.logger.Info("user-agent refresh", "parent", parent, "new_sessions", upTo-r.state.TrainedUpTo, "replay", k)
	res, err := TrainSFT(ctx, cfg, window, r.logger)
	if errors.Is(err, ErrRunMismatch) {
		// Checkpoints of this refresh under other settings: start it afresh.
		r.logger.Warn("user-agent refresh: discarding checkpoints of other settings", "run", cfg.RunID)
		if rerr := os.RemoveAll(filepath.Join(cfg.DataDir, cfg.RunID)); rerr != nil {
			return nil, fmt.Errorf("refresh: %w", rerr)
		}
		res, err = TrainSFT(ctx, cfg, window, r.logger)
	}
	if errors.Is(err, errNoData) {
		// Too few players to hold some out: wait for more sessions.
		r.logger.Info("user-agent refresh postponed", "reason", err)
		r.state.LastAt, r.state.InProgressUpTo = r.now(), 0
		return nil, r.save()
	}
	if err != nil {
		return nil, fmt.Errorf("refresh: %w", err)
	}
	r.state.TrainedUpTo, r.state.InProgressUpTo, r.state.LastAt, r.state.LastReason = upTo, 0, r.now(), res.GateReason
	r.state.Refreshes++
	r.state.Last = &refreshOutcome{Published: res.Published, RhoBefore: res.Before.Rho, RhoAfter: res.After.Rho,
		TermLogLossBefore: res.Before.TermLogLoss, TermLogLossAfter: res.After.TermLogLoss}
	if n := len(res.Losses); n > 0 {
		r.state.Last.Loss = float64(res.Losses[n-1])
	}
	if res.Published {
		r.state.Published++
		r.state.LastVersion = res.Version
	}
	r.logger.Info("user-agent refresh done", "published", res.Published, "version", res.Version, "gate", res.GateReason,
		"rho_before", res.Before.Rho, "rho_after", res.After.Rho,
		"log_loss_before", res.Before.TermLogLoss, "log_loss_after", res.After.TermLogLoss)
	if err := r.save(); err != nil {
		return res, fmt.Errorf("refresh: %w", err)
	}
	return res, nil
}

// currentVersion is the newest version of model in the registry at root,
// or "" when it has none.
func currentVersion(ctx context.Context, root, model string) (string, error) {
	reg, err := registry.NewLocal(root)
	if err != nil {
		return "", err
	}
	mans, err := reg.List(ctx, model)
	if err != nil {
		return "", fmt.Errorf("list versions of %s: %w", model, err)
	}
	if len(mans) == 0 {
		return "", nil
	}
	return mans[len(mans)-1].Version, nil
}
