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

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/internal/atomicfile"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
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
	// RhoTolerance is how far beyond its sampling noise ρ may fall
	// before a refresh is refused (FidelityGate); within it the end
	// log-loss decides.
	RhoTolerance float64 `json:"rho_tolerance"`
	// SFT is the fine-tuning template: Role is user, Parent is set to the
	// current version, DataDir and Registry come from the learner.
	SFT SFTConfig `json:"sft"`
	// Poll is how often the loop checks whether a refresh is due.
	Poll time.Duration `json:"poll"`
	// NPC is how the refresh plays the serving NPC against a user agent,
	// in the length match and the referee gate.
	NPC NPCPlayConfig `json:"npc"`
	// LengthMatch shifts a refreshed user agent's calibrated offset so
	// that its players last as long as the logged ones (matchLength).
	LengthMatch LengthMatchConfig `json:"length_match"`
	// Referee is the referee gate a refreshed user agent must pass, after
	// the fidelity gate, to be published.
	Referee RefereeGateConfig `json:"referee"`
	// MinCalibrationDecisions is the fewest continue-or-quit decisions of
	// held-out sessions on which a refreshed user agent's calibration is
	// fitted; with fewer it keeps the zero calibration.
	MinCalibrationDecisions int `json:"min_calibration_decisions"`
	// WordTopics learns the topics of the training players' words, whose
	// relevance the calibration weighs (simulator.LearnWordTopics); 0
	// topics turns it off.
	WordTopics simulator.WordTopicsConfig `json:"word_topics"`
}

// NPCPlayConfig is how the refresh plays the dialogue agent against a user
// agent: the newest version of Model (or, in the length match, the one that
// served the sessions) samples its turns with Policy, opening with
// DefaultCard and DefaultGreeting, and UserAgent lays out the user agent's
// prompts and replies, all as the AT-GRPO cycle does (CycleConfig's).
type NPCPlayConfig struct {
	// Model is the dialogue agent's registry name; without a version of
	// it there is no length match and no referee.
	Model           string                    `json:"model"`
	Policy          rl.PolicyConfig           `json:"policy"`
	UserAgent       simulator.UserAgentConfig `json:"user_agent"`
	DefaultCard     string                    `json:"default_card"`
	DefaultGreeting string                    `json:"default_greeting"`
}

// DefaultNPCPlayConfig plays with the AT-GRPO cycle's defaults.
func DefaultNPCPlayConfig() NPCPlayConfig {
	cc := DefaultCycleConfig()
	return NPCPlayConfig{Model: cc.Model, Policy: cc.Policy, UserAgent: cc.UserAgent, DefaultCard: cc.DefaultCard, DefaultGreeting: cc.DefaultGreeting}
}

// Validate reports the first bad field.
func (c NPCPlayConfig) Validate() error {
	if c.Model == "" {
		return errors.New("npc play: model is required")
	}
	for _, err := range []error{c.Policy.Validate(), c.UserAgent.Validate()} {
		if err != nil {
			return fmt.Errorf("npc play: %w", err)
		}
	}
	return nil
}

// LengthMatchConfig sizes the length match: up to Dialogues held-out
// sessions, played and counted up to Depth exchanges; 0 dialogues turns
// it off.
type LengthMatchConfig struct {
	Dialogues int `json:"dialogues"`
	Depth     int `json:"depth"`
}

// RefereeGateConfig configures the refresh's referee gate (issue 15): the
// refreshed and the current user agent are measured with rl.SampleReferee
// and Judge on one sample of sibling groups written by the newest NPC
// version (RefreshConfig.NPC) for the held-out players of a ground-truth
// population, and the refreshed one is published only when its report
// passes Thresholds and is no worse than the current one's.
type RefereeGateConfig struct {
	// Players is the ground-truth population, seeded with PlayersSeed,
	// whose hidden hazard the user agent is measured against; the personas
	// held out of the user agent's training (SFT's split) play. Size 0
	// turns the referee off: a deployment without ground-truth players
	// has the fidelity gate only.
	Players     simulator.PopulationConfig `json:"players"`
	PlayersSeed uint64                     `json:"players_seed"`
	// Measure sizes the measurement and Thresholds is the pass rule.
	Measure    rl.RefereeConfig     `json:"measure"`
	Thresholds rl.RefereeThresholds `json:"thresholds"`
}

// DefaultRefereeGateConfig measures against the simulator's default
// population (seed 1) with rl.DefaultRefereeConfig (300 groups of 8
// siblings, 300 dialogues) and rl.DefaultRefereeThresholds (τ ≥ 0.30 with
// CI low > 0.20, Pearson ≥ 0.6, simulated/real Avg.L within [0.9, 1.1]).
func DefaultRefereeGateConfig() RefereeGateConfig {
	return RefereeGateConfig{Players: simulator.DefaultPopulationConfig(), PlayersSeed: 1,
		Measure: rl.DefaultRefereeConfig(), Thresholds: rl.DefaultRefereeThresholds()}
}

// Validate reports the first bad field of an enabled referee.
func (c RefereeGateConfig) Validate() error {
	if c.Players.Size == 0 {
		return nil
	}
	for _, err := range []error{c.Players.Validate(), c.Measure.Validate(), c.Thresholds.Validate()} {
		if err != nil {
			return fmt.Errorf("referee gate: %w", err)
		}
	}
	return nil
}

// DefaultRefreshConfig refreshes every 200 new sessions or hour (with at
// least 20), replaying half as many older ones, fine-tuning 100 steps at
// the paper's SFT learning rate scaled to the small models (3e-4), and
// calibrates on at least 100 decisions, matching the length on up to 400
// sessions of up to 6 exchanges.
func DefaultRefreshConfig() RefreshConfig {
	sft := DefaultSFTConfig(RoleUser)
	sft.Steps = 100
	sft.Train.LearningRate = 3e-4
	return RefreshConfig{EverySessions: 200, Every: time.Hour, MinSessions: 20, ReplayShare: 0.5, SFT: sft, Poll: 5 * time.Second,
		NPC: DefaultNPCPlayConfig(), LengthMatch: LengthMatchConfig{Dialogues: 400, Depth: 6},
		Referee: DefaultRefereeGateConfig(), MinCalibrationDecisions: 100, WordTopics: simulator.DefaultWordTopicsConfig()}
}

// Validate reports the first bad field.
func (c RefreshConfig) Validate() error {
	switch {
	case c.EverySessions < 0 || c.Every < 0 || c.MinSessions < 0 || c.MinCalibrationDecisions < 0:
		return fmt.Errorf("refresh config: every %d sessions, every %v, min %d sessions, min %d calibration decisions must not be negative",
			c.EverySessions, c.Every, c.MinSessions, c.MinCalibrationDecisions)
	case c.EverySessions == 0 && c.Every == 0:
		return errors.New("refresh config: set every_sessions or every")
	case c.ReplayShare < 0 || c.RhoTolerance < 0:
		return fmt.Errorf("refresh config: replay share %g and rho tolerance %g must not be negative", c.ReplayShare, c.RhoTolerance)
	case c.Poll <= 0:
		return fmt.Errorf("refresh config: poll %v must be positive", c.Poll)
	case c.SFT.Role != RoleUser:
		return fmt.Errorf("refresh config: the refresh trains the user agent, not %q", c.SFT.Role)
	}
	if c.LengthMatch.Dialogues < 0 || c.LengthMatch.Dialogues > 0 && c.LengthMatch.Depth < 1 {
		return fmt.Errorf("refresh config: length match of %d dialogues needs a positive depth, not %d", c.LengthMatch.Dialogues, c.LengthMatch.Depth)
	}
	if c.LengthMatch.Dialogues > 0 || c.Referee.Players.Size > 0 {
		if err := c.NPC.Validate(); err != nil {
			return fmt.Errorf("refresh config: %w", err)
		}
	}
	if err := c.Referee.Validate(); err != nil {
		return fmt.Errorf("refresh config: %w", err)
	}
	if c.WordTopics.Topics != 0 {
		if err := c.WordTopics.Validate(); err != nil {
			return fmt.Errorf("refresh config: %w", err)
		}
	}
	return nil
}

// FidelityGate returns the publication rule of a refreshed user agent: it
// must be at least as faithful as the current one. ρ decides first: when
// the whole interval of its change (rhoChange) lies below −tol the agent
// is refused, above +tol accepted; otherwise (or when neither ρ is
// defined) the log-loss of the end probability must not rise. An
// undefined ρ counts below any defined one.
func FidelityGate(tol float64) func(before, after Metrics) (bool, string) {
	return func(before, after Metrics) (bool, string) {
		delta, low, high := rhoChange(before, after)
		change := fmt.Sprintf("ρ %.3f → %.3f (%+.3f [%+.3f, %+.3f])", before.Rho, after.Rho, delta, low, high)
		switch {
		case before.RhoDefined && !after.RhoDefined:
			return false, fmt.Sprintf("ρ undefined after, %.3f before", before.Rho)
		case !before.RhoDefined && after.RhoDefined:
			return true, fmt.Sprintf("ρ %.3f after, undefined before", after.Rho)
		case before.RhoDefined && high < -tol:
			return false, change + fmt.Sprintf(" fell beyond %.3f", tol)
		case before.RhoDefined && low > tol:
			return true, change + fmt.Sprintf(" rose beyond %.3f", tol)
		case after.EndLogLoss > before.EndLogLoss:
			return false, fmt.Sprintf("%s within its noise and %.3f, end log-loss rose from %.4f to %.4f", change, tol, before.EndLogLoss, after.EndLogLoss)
		default:
			return true, fmt.Sprintf("%s within its noise and %.3f, end log-loss %.4f → %.4f", change, tol, before.EndLogLoss, after.EndLogLoss)
		}
	}
}

// rhoChange is after's ρ minus before's with its 95 % interval: a paired
// bootstrap over the players (rl.ClusterBootstrap) when both were measured
// on the same dialogues, so that a fall within what the held-out sample
// alone would give does not refuse a refresh; the point change as its
// own interval otherwise.
func rhoChange(before, after Metrics) (delta, low, high float64) {
	delta = after.Rho - before.Rho
	b, a := before.lengths, after.lengths
	if !before.RhoDefined || !after.RhoDefined || len(a) != len(b) || len(a) < 3 {
		return delta, delta, delta
	}
	players := make([]string, len(a))
	for i := range a {
		if a[i].player != b[i].player || a[i].real != b[i].real {
			return delta, delta, delta
		}
		players[i] = a[i].player
	}
	low, high, err := rl.ClusterBootstrap(players, func(units []int) float64 {
		ra, errA := lengthsRho(a, units)
		rb, errB := lengthsRho(b, units)
		if errA != nil || errB != nil {
			return delta // a resample without variance: no evidence either way
		}
		return ra - rb
	}, rl.DefaultBootstrapConfig())
	if err != nil {
		return delta, delta, delta
	}
	return delta, low, high
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

// refreshOutcome is the verdict of a refresh's fidelity and referee gates,
// the values they judged, the calibration fitted to the refreshed agent
// and the last training loss.
type refreshOutcome struct {
	Published bool `json:"published"`
	// RhoBefore … EndLogLossAfter are the fidelity of the current and the
	// refreshed agent as served, each with its calibration.
	RhoBefore         float64 `json:"rho_before"`
	RhoAfter          float64 `json:"rho_after"`
	TermLogLossBefore float64 `json:"term_log_loss_before"`
	TermLogLossAfter  float64 `json:"term_log_loss_after"`
	EndLogLossBefore  float64 `json:"end_log_loss_before"`
	EndLogLossAfter   float64 `json:"end_log_loss_after"`
	Loss              float64 `json:"loss"`
	// RefereeBefore and RefereeAfter are the referee's reports of the
	// current and the refreshed user agent; nil when the referee did not
	// measure them (off, no NPC, no current agent, or the fidelity gate
	// refused first).
	RefereeBefore *rl.RefereeReport `json:"referee_before,omitempty"`
	RefereeAfter  *rl.RefereeReport `json:"referee_after,omitempty"`
	// Calibration is what the refresh fitted.
	Calibration *refreshCalibration `json:"calibration,omitempty"`
}

// refreshCalibration is the calibration fitted to a refreshed user agent
// (simulator.FitCalibration) on Decisions decisions of Sessions held-out
// sessions, with the word topics learned from the training players'
// messages (nil when off or too few words); Fitted is false, and the
// calibration zero, when the decisions were too few or held no quit or no
// continue.
type refreshCalibration struct {
	Fitted bool `json:"fitted"`
	simulator.Calibration
	Decisions int `json:"decisions"`
	Sessions  int `json:"sessions"`
	// TopicWords counts the words of the word topics it read.
	TopicWords int `json:"topic_words"`
	// LengthShift is what the length match added to the fitted offset
	// (matchLength); 0 when it did not run.
	LengthShift float64 `json:"length_shift,omitempty"`
	topics      *simulator.WordTopics
}

// metrics are the manifest metrics that carry a fitted calibration with
// the version (simulator.UserAgentConfig.ForVersion reads them); none
// when nothing was fitted.
func (c *refreshCalibration) metrics() map[string]float64 {
	if c == nil || !c.Fitted {
		return nil
	}
	return c.Calibration.Metrics(c.Decisions)
}

// userAgent is cfg serving the refreshed agent as its version will: with
// the fitted calibration and the word topics it reads.
func (c *refreshCalibration) userAgent(cfg simulator.UserAgentConfig) simulator.UserAgentConfig {
	cfg, _ = cfg.ForVersion("", schema.Manifest{Metrics: c.metrics()}) // no dir: nothing to read, no error
	if c != nil && c.Fitted {
		cfg.WordTopics = c.topics
	}
	return cfg
}

// files are the files the refreshed version carries besides the model:
// its word topics, when the calibration reads them.
func (c *refreshCalibration) files() (map[string][]byte, error) {
	if c == nil || !c.Fitted || c.topics == nil {
		return nil, nil
	}
	raw, err := json.Marshal(c.topics)
	if err != nil {
		return nil, fmt.Errorf("word topics: %w", err)
	}
	return map[string][]byte{simulator.WordTopicsFile: raw}, nil
}

// gateFindings is what a refresh's gate found besides its verdict: the
// refreshed agent's calibration, the fidelity of the current and the
// refreshed agent as served (each with its calibration) and the referee's
// reports of both.
type gateFindings struct {
	calibration                 *refreshCalibration
	before, after               Metrics
	refereeBefore, refereeAfter *rl.RefereeReport
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
// the last refresh plus a replay sample of older ones, fits its
// calibration on the held-out players' sessions, and publishes the result,
// the calibration in its manifest, only if the gates accept it.
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
	parent, err := currentVersion(ctx, r.registry, cfg.Model)
	if err != nil {
		return nil, fmt.Errorf("refresh: %w", err)
	}
	cfg.Parent = parent
	var found gateFindings
	cfg.Gate = r.gate(parent, window, &found)
	cfg.RunID = fmt.Sprintf("refresh-%s-%06d", cfg.Model, r.state.Refreshes+1)
	cfg.SkipEvalBefore, cfg.FidelityByGate = true, true // the gate measures both agents as served
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
	r.state.Last = &refreshOutcome{Published: res.Published, RhoBefore: found.before.Rho, RhoAfter: found.after.Rho,
		TermLogLossBefore: found.before.TermLogLoss, TermLogLossAfter: found.after.TermLogLoss,
		EndLogLossBefore: found.before.EndLogLoss, EndLogLossAfter: found.after.EndLogLoss,
		RefereeBefore: found.refereeBefore, RefereeAfter: found.refereeAfter, Calibration: found.calibration}
	if n := len(res.Losses); n > 0 {
		r.state.Last.Loss = float64(res.Losses[n-1])
	}
	if res.Published {
		r.state.Published++
		r.state.LastVersion = res.Version
	}
	r.logger.Info("user-agent refresh done", "published", res.Published, "version", res.Version, "gate", res.GateReason,
		"rho_before", found.before.Rho, "rho_after", found.after.Rho,
		"end_log_loss_before", found.before.EndLogLoss, "end_log_loss_after", found.after.EndLogLoss,
		"sim_avg_l_before", found.before.AvgL, "sim_avg_l_after", found.after.AvgL, "real_avg_l", found.after.RealAvgL,
		slog.Group("calibration", calibrationAttrs(found.calibration)...))
	if err := r.save(); err != nil {
		return res, fmt.Errorf("refresh: %w", err)
	}
	return res, nil
}

// calibrate fits the refreshed user agent m's calibration on the window
// (calibrateUserAgent).
func (r *refresher) calibrate(ctx context.Context, m *inference.Model, tok *inference.Tokenizer, window []schema.Dialogue) (*refreshCalibration, string, error) {
	return calibrateUserAgent(ctx, m, tok, window, r.cfg.SFT, r.cfg.WordTopics, r.cfg.MinCalibrationDecisions, r.logger)
}

// calibrateUserAgent fits the calibration of the user agent m, trained
// with sft on dialogues, on the sessions of the players held out of its
// training (SFT's split, a seeded hash of the player id: no player is in
// both), each laid out as the fidelity evaluation lays it out, with word
// topics (topicsCfg; 0 topics: none), their tone and wording learned from
// the training players' sessions. Only what a deployment logs goes in: what
// the players said and who quit after which NPC turn. With fewer than
// minDecisions decisions, or no quit or no continue among them, it fits
// nothing and says why.
func calibrateUserAgent(ctx context.Context, m *inference.Model, tok *inference.Tokenizer, dialogues []schema.Dialogue, sft SFTConfig,
	topicsCfg simulator.WordTopicsConfig, minDecisions int, logger *slog.Logger) (*refreshCalibration, string, error) {
	train, heldOut := splitPlayers(dialogues, sft.HeldOutShare, sft.Seed)
	fit := &refreshCalibration{Sessions: len(heldOut)}
	quits := 0
	for _, s := range heldOut {
		_, quit := simulator.DecisionQueries(s, nil, nil)
		fit.Decisions += len(quit)
		for _, q := range quit {
			if q {
				quits++
			}
		}
	}
	if fit.Decisions < max(minDecisions, 1) || quits == 0 || quits == fit.Decisions {
		return fit, fmt.Sprintf("calibration kept at zero: %d decisions (%d quits) in %d held-out sessions; it needs %d with quits and continues",
			fit.Decisions, quits, fit.Sessions, minDecisions), nil
	}
	cfg := sft.UserAgent
	topicsWhy := ""
	if topicsCfg.Topics != 0 {
		player, npc := simulator.DialogueMessages(train)
		topics, err := simulator.LearnWordTopics(player, npc, topicsCfg)
		if err != nil {
			topicsWhy = "; no word topics: " + err.Error()
		} else {
			cfg.WordTopics, fit.topics, fit.TopicWords = topics, topics, len(topics.Words)
			topicsWhy = fmt.Sprintf("; %d words in %d topics", len(topics.Words), topicsCfg.Topics)
			if topics.Tone, err = simulator.LearnTone(train, topicsCfg.MinMessages); err != nil {
				topicsWhy += "; no tone: " + err.Error()
			} else {
				topicsWhy += fmt.Sprintf(", %d words with a tone", len(topics.Tone))
			}
			if topics.Wording, err = simulator.LearnWording(train, topicsCfg.MinMessages); err != nil {
				topicsWhy += "; no wording: " + err.Error()
			} else {
				topicsWhy += fmt.Sprintf(", %d NPC words with a weight", len(topics.Wording))
			}
		}
	}
	ua, stop, err := userAgentOn(m, tok, cfg, logger)
	if err != nil {
		return nil, "", fmt.Errorf("calibrate: %w", err)
	}
	defer stop()
	risks := simulator.TrainingRisks(train, sft.MaxTurns)
	demos := byPlayer(heldOut)
	c, n, err := ua.FitCalibrationOn(ctx, heldOut, func(d schema.Dialogue) []simulator.PromptDialogue {
		return promptDemos(pickDemos(demos[d.PlayerID], d), risks)
	}, risks)
	if err != nil {
		return nil, "", fmt.Errorf("calibrate: %w", err)
	}
	fit.Fitted, fit.Calibration, fit.Decisions = true, c, n
	return fit, fmt.Sprintf("calibration %s on %d decisions (%d quits)%s", c.Summary(), n, quits, topicsWhy), nil
}

// calibrationAttrs are a calibration's values as log attributes; none for nil.
func calibrationAttrs(c *refreshCalibration) []any {
	if c == nil {
		return nil
	}
	return []any{"fitted", c.Fitted, "values", c.Summary(), "topic_words", c.TopicWords, "decisions", c.Decisions, "sessions", c.Sessions}
}

// CalibratedGate is an SFTConfig.Gate for a user agent trained with sft
// on dialogues: it publishes the agent with the calibration and the word
// topics (topics; 0 topics: none) fitted as the refresh fits them
// (calibrateUserAgent), on at least minDecisions decisions of the held-out
// players. The first version (`parley dev`'s bootstrap) ships calibrated
// this way, so the first AT-GRPO cycles already read topic relevance.
func CalibratedGate(dialogues []schema.Dialogue, sft SFTConfig, topics simulator.WordTopicsConfig, minDecisions int, logger *slog.Logger) func(context.Context, Metrics, Metrics, *inference.Model, *inference.Tokenizer) (GateVerdict, error) {
	return func(ctx context.Context, _, _ Metrics, m *inference.Model, tok *inference.Tokenizer) (GateVerdict, error) {
		cal, why, err := calibrateUserAgent(ctx, m, tok, dialogues, sft, topics, minDecisions, logger)
		if err != nil {
			return GateVerdict{}, err
		}
		files, err := cal.files()
		if err != nil {
			return GateVerdict{}, err
		}
		return GateVerdict{Publish: true, Reason: why, Metrics: cal.metrics(), Files: files}, nil
	}
}

// gate is a refresh's publication rule on the agents as they are served:
// the refreshed agent is calibrated (calibrate) and its length matched to
// the logged sessions' (matchLength), then FidelityGate compares
// it with the current one, which keeps the calibration its version carries
// (a first agent, with no current one, passes), and, when it accepts, so
// does the referee gate. Judging the agents as trained would not do: ρ's
// expected lengths take the training prior past each dialogue's real end,
// so an agent whose uncalibrated ends come too often gets a ρ that falls
// with the real length however well it ranks the players' decisions. The
// verdict's metrics, which the manifest keeps, are the calibration and the
// fidelity as served; found keeps all it measured.
func (r *refresher) gate(parent string, window []schema.Dialogue, found *gateFindings) func(context.Context, Metrics, Metrics, *inference.Model, *inference.Tokenizer) (GateVerdict, error) {
	fidelity := FidelityGate(r.cfg.RhoTolerance)
	return func(ctx context.Context, _, _ Metrics, m *inference.Model, tok *inference.Tokenizer) (GateVerdict, error) {
		cal, cwhy, err := r.calibrate(ctx, m, tok, window)
		if err != nil {
			return GateVerdict{}, err
		}
		lwhy, err := r.matchLength(ctx, m, tok, cal, window)
		if err != nil {
			return GateVerdict{}, err
		}
		if lwhy != "" {
			cwhy += "; " + lwhy
		}
		found.calibration = cal
		if found.before, found.after, err = r.servedFidelity(ctx, parent, m, tok, cal, window); err != nil {
			return GateVerdict{}, err
		}
		ok, why := true, "no current user agent to compare with"
		if parent != "" {
			ok, why = fidelity(found.before, found.after)
		}
		why += "; " + cwhy
		if !ok {
			return GateVerdict{Reason: why}, nil
		}
		metrics := servedMetrics(cal, found.after)
		files, err := cal.files()
		if err != nil {
			return GateVerdict{}, err
		}
		g := newRefereeGate(r.cfg, r.registry, r.logger)
		if g == nil {
			return GateVerdict{Publish: true, Reason: why, Metrics: metrics, Files: files}, nil
		}
		rc := g.cfg
		npc, err := currentVersion(ctx, r.registry, r.cfg.NPC.Model)
		if err != nil {
			return GateVerdict{}, fmt.Errorf("referee: %w", err)
		}
		if npc == "" {
			r.logger.Warn("user-agent referee skipped: no NPC version writes the siblings", "npc_model", r.cfg.NPC.Model)
			return GateVerdict{Publish: true, Reason: why + "; referee skipped: no " + r.cfg.NPC.Model + " version", Metrics: metrics, Files: files}, nil
		}
		nm, chat, err := g.loadNPC(npc)
		if err != nil {
			return GateVerdict{}, err
		}
		j, err := g.sample(ctx, nm, chat, window)
		if err != nil {
			return GateVerdict{}, err
		}
		defer j.stop()
		if parent != "" {
			if found.refereeBefore, err = g.judgeVersion(ctx, j, parent); err != nil {
				return GateVerdict{}, fmt.Errorf("referee: current %w", err)
			}
		}
		ua, stop, err := userAgentOn(m, tok, cal.userAgent(r.cfg.NPC.UserAgent), r.logger)
		if err != nil {
			return GateVerdict{}, fmt.Errorf("referee: refreshed user agent: %w", err)
		}
		defer stop()
		if found.refereeAfter, err = j.judge(ctx, ua); err != nil {
			return GateVerdict{}, fmt.Errorf("referee: refreshed user agent: %w", err)
		}
		before, after := found.refereeBefore, found.refereeAfter
		pass, rwhy := after.Pass(before, rc.Thresholds)
		r.logger.Info("user-agent referee", "npc", npc, "parent", parent, "passed", pass, "reason", rwhy,
			"seconds", time.Since(j.began).Seconds(), "groups", after.Groups, "ranked_groups", after.RankedGroups, "hazard_within_share", after.HazardWithinShare,
			slog.Group("after", refereeAttrs(after)...), slog.Group("before", refereeAttrs(before)...))
		return GateVerdict{Publish: pass, Reason: why + "; " + rwhy, Metrics: metrics, Files: files}, nil
	}
}

// servedFidelity measures the current user agent (version parent, with
// the calibration its version carries; zero Metrics when there is none)
// and the refreshed one m (with cal) on the window's held-out players, as
// SFT's evaluation does.
func (r *refresher) servedFidelity(ctx context.Context, parent string, m *inference.Model, tok *inference.Tokenizer, cal *refreshCalibration, window []schema.Dialogue) (before, after Metrics, err error) {
	sft := r.cfg.SFT
	train, heldOut := splitPlayers(window, sft.HeldOutShare, sft.Seed)
	demos := byPlayer(heldOut)
	ev := evaluator{role: RoleUser, cfg: sft.Eval, ua: cal.userAgent(sft.UserAgent),
		risks: simulator.TrainingRisks(train, sft.MaxTurns), logger: r.logger}
	if after, err = ev.fidelity(ctx, m, tok, heldOut, demos); err != nil {
		return Metrics{}, Metrics{}, fmt.Errorf("refreshed user agent: %w", err)
	}
	if parent == "" {
		return Metrics{}, after, nil
	}
	dir := filepath.Join(r.registry, sft.Model, parent)
	pm, ptok, man, err := inference.LoadCheckpoint(dir, sft.Backend)
	if err != nil {
		return Metrics{}, Metrics{}, fmt.Errorf("current user agent: %w", err)
	}
	if ev.ua, err = sft.UserAgent.ForVersion(dir, man); err != nil {
		return Metrics{}, Metrics{}, fmt.Errorf("current user agent %s: %w", parent, err)
	}
	if before, err = ev.fidelity(ctx, pm, ptok, heldOut, demos); err != nil {
		return Metrics{}, Metrics{}, fmt.Errorf("current user agent %s: %w", parent, err)
	}
	return before, after, nil
}

// servedMetrics are the manifest metrics of a refreshed agent beyond its
// training run's: the calibration and the fidelity as served, which the
// run itself leaves out (SFTConfig.FidelityByGate).
func servedMetrics(cal *refreshCalibration, served Metrics) map[string]float64 {
	out := cal.metrics()
	if out == nil {
		out = map[string]float64{}
	}
	for k, v := range served.Map() {
		switch k {
		case "rho", "term_log_loss", "end_log_loss", "avg_l", "real_avg_l", "avg_r", "dist1", "dist2", "avg_words":
			out[k] = v
		}
	}
	return out
}

// refereeAttrs are a report's gate values as log attributes; none for nil.
func refereeAttrs(rep *rl.RefereeReport) []any {
	if rep == nil {
		return nil
	}
	return []any{"kendall_tau", rep.KendallTau, "kendall_tau_ci_low", rep.KendallTauCILow, "kendall_tau_ci_high", rep.KendallTauCIHigh,
		"pearson", rep.Pearson, "pearson_within", rep.PearsonWithin, "sim_real_avg_l", rep.SimRealAvgL, "sim_avg_l", rep.SimAvgL, "real_avg_l", rep.RealAvgL,
		"sim_real_exp_l", rep.SimRealExpL}
}

// RefereeGate measures published user agents against the hidden hazard of
// a ground-truth population (RefereeGateConfig): the refresh's gate on a
// refreshed user agent, and the AT-GRPO cycle's on the user agent it would
// train against. The personas held out of the user agent's training (its
// SFT split) play.
type RefereeGate struct {
	cfg      RefereeGateConfig
	npc      NPCPlayConfig
	sft      SFTConfig
	registry string
	logger   *slog.Logger
}

// newRefereeGate is the referee of user agents refreshed with cfg in the
// registry at root; nil when cfg's referee is off.
func newRefereeGate(cfg RefreshConfig, root string, logger *slog.Logger) *RefereeGate {
	if cfg.Referee.Players.Size == 0 {
		return nil
	}
	return &RefereeGate{cfg: cfg.Referee, npc: cfg.NPC, sft: cfg.SFT, registry: root, logger: logger}
}

// Judge measures the published user agent version ua, with the calibration
// its version carries, on sibling groups written by the NPC version npc,
// and says whether it passes the thresholds; window's dialogues of the
// held-out players give its style demos.
func (g *RefereeGate) Judge(ctx context.Context, npc, ua string, window []schema.Dialogue) (rep *rl.RefereeReport, pass bool, reason string, err error) {
	m, chat, err := g.loadNPC(npc)
	if err != nil {
		return nil, false, "", err
	}
	return g.JudgeModel(ctx, m, chat, npc, ua, window)
}

// JudgeModel is Judge on sibling groups written by the NPC model m,
// prompted in chat, which need not be published (the cycle's candidate);
// npc names it in the log.
func (g *RefereeGate) JudgeModel(ctx context.Context, m *inference.Model, chat *inference.ChatFormat, npc, ua string, window []schema.Dialogue) (rep *rl.RefereeReport, pass bool, reason string, err error) {
	j, err := g.sample(ctx, m, chat, window)
	if err != nil {
		return nil, false, "", err
	}
	defer j.stop()
	if rep, err = g.judgeVersion(ctx, j, ua); err != nil {
		return nil, false, "", fmt.Errorf("referee: %w", err)
	}
	pass, reason = rep.Pass(nil, g.cfg.Thresholds)
	g.logger.Info("user-agent referee", "npc", npc, "user_agent", ua, "passed", pass, "reason", reason,
		"seconds", time.Since(j.began).Seconds(), "groups", rep.Groups, "ranked_groups", rep.RankedGroups, "hazard_within_share", rep.HazardWithinShare)
	return rep, pass, reason, nil
}

// judgeVersion measures the published user agent version ua, with the
// calibration its version carries, on j's sample.
func (g *RefereeGate) judgeVersion(ctx context.Context, j *referee, ua string) (*rl.RefereeReport, error) {
	agent, stop, err := serveUserAgent(filepath.Join(g.registry, g.sft.Model, ua), g.npc.UserAgent, g.sft.Backend, g.logger)
	if err != nil {
		return nil, fmt.Errorf("user agent %s: %w", ua, err)
	}
	defer stop()
	rep, err := j.judge(ctx, agent)
	if err != nil {
		return nil, fmt.Errorf("user agent %s: %w", ua, err)
	}
	return rep, nil
}

// referee is one measurement's referee: the NPC version that writes the
// siblings, served, and the sample every user agent is judged on.
type referee struct {
	cfg    RefereeGateConfig
	npc    NPCPlayConfig
	eng    *inference.Engine
	chat   *inference.ChatFormat
	sample *rl.RefereeSample
	began  time.Time
	stop   func()
}

// loadNPC loads the published NPC version npc, whose turns the referee
// samples, and the chat format the gateway prompts it in.
func (g *RefereeGate) loadNPC(npc string) (*inference.Model, *inference.ChatFormat, error) {
	m, chat, _, err := loadChatModel(filepath.Join(g.registry, g.npc.Model, npc), g.sft.Backend)
	if err != nil {
		return nil, nil, fmt.Errorf("referee: %w", err)
	}
	return m, chat, nil
}

// sample serves the NPC model m in chat and samples the referee's groups
// and real dialogues on the held-out personas, whose dialogues in window
// give the user agent its style demos.
func (g *RefereeGate) sample(ctx context.Context, m *inference.Model, chat *inference.ChatFormat, window []schema.Dialogue) (*referee, error) {
	rc := g.cfg
	j := &referee{cfg: rc, npc: g.npc, began: time.Now()}
	eng, stop, err := cycleEngine(m, chat, g.logger)
	if err != nil {
		return nil, fmt.Errorf("referee: %w", err)
	}
	j.eng, j.chat, j.stop = eng, chat, stop
	pop, err := simulator.NewPopulation(rc.Players, rc.PlayersSeed)
	if err != nil {
		stop()
		return nil, fmt.Errorf("referee: %w", err)
	}
	pol, err := j.policy()
	if err != nil {
		stop()
		return nil, fmt.Errorf("referee: %w", err)
	}
	if j.sample, err = rl.SampleReferee(ctx, rc.Measure, pol, rl.NewPlayerEnv(pop), g.prompts(pop, window)); err != nil {
		stop()
		return nil, fmt.Errorf("referee: %w", err)
	}
	return j, nil
}

// policy is the NPC's policy, sampling with the same seeds at every call,
// so every user agent's dialogues open with the same NPC turns.
func (j *referee) policy() (*rl.ModelPolicy, error) {
	return rl.NewChatPolicy(j.eng, j.chat, j.eng.MaxSeq(), j.npc.Policy)
}

// judge measures the user agent ua on the sample.
func (j *referee) judge(ctx context.Context, ua *simulator.UserAgent) (*rl.RefereeReport, error) {
	pol, err := j.policy()
	if err != nil {
		return nil, err
	}
	rep, err := j.sample.Judge(ctx, pol, rl.NewUserAgentEnv(ua, j.cfg.Measure.Seed))
	if err != nil {
		return nil, err
	}
	return &rep, nil
}

// prompts opens one fresh conversation per group or dialogue of the
// referee, cycling through the personas held out of the user agent's
// training (all personas when none is), each with up to two of its
// player's dialogues in window as the user agent's style demos.
func (g *RefereeGate) prompts(pop *simulator.Population, window []schema.Dialogue) []rl.Prompt {
	rc, sft := g.cfg, g.sft
	var ps []*simulator.Persona
	for _, p := range pop.Players() {
		if heldOutPlayer(p.ID, sft.HeldOutShare, sft.Seed) {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		ps = pop.Players()
	}
	risks := simulator.TrainingRisks(window, sft.MaxTurns)
	demos := byPlayer(window)
	out := make([]rl.Prompt, max(rc.Measure.Groups, rc.Measure.Dialogues))
	for i := range out {
		p := ps[i%len(ps)]
		out[i] = rl.PlayerPrompt(p, 7_000_000+uint64(i), g.npc.DefaultCard, g.npc.DefaultGreeting)
		for _, d := range demos[p.ID] {
			if len(out[i].Demos) == 2 {
				break
			}
			out[i].Demos = append(out[i].Demos, simulator.PromptDialogueOf(d, risks))
		}
	}
	return out
}

// serveUserAgent serves the user agent version in dir with cfg and the
// calibration its manifest carries (simulator.UserAgentConfig.ForVersion):
// how the AT-GRPO cycle and the referee load a published user agent. stop
// ends its engine.
func serveUserAgent(dir string, cfg simulator.UserAgentConfig, backend inference.BackendConfig, logger *slog.Logger) (ua *simulator.UserAgent, stop func(), err error) {
	m, tok, man, err := inference.LoadCheckpoint(dir, backend)
	if err != nil {
		return nil, nil, err
	}
	if cfg, err = cfg.ForVersion(dir, man); err != nil {
		return nil, nil, err
	}
	return userAgentOn(m, tok, cfg, logger)
}

// userAgentOn serves the user agent model m with cfg until stop is called.
func userAgentOn(m *inference.Model, tok *inference.Tokenizer, cfg simulator.UserAgentConfig, logger *slog.Logger) (ua *simulator.UserAgent, stop func(), err error) {
	eng, stop, err := cycleEngine(m, inference.ParleyChatFormat(tok), logger)
	if err != nil {
		return nil, nil, err
	}
	if ua, err = simulator.NewUserAgent(eng, cfg); err != nil {
		stop()
		return nil, nil, err
	}
	return ua, stop, nil
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
