package learner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/internal/atomicfile"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// CycleConfig configures the periodic AT-GRPO cycle (DESIGN.md §1, §7):
// every EverySessions new ended sessions, or every Every once MinSessions
// arrived, it trains the serving policy for RL.Steps steps against the
// newest user agent and publishes the result as a candidate version.
type CycleConfig struct {
	EverySessions int           `json:"every_sessions"`
	Every         time.Duration `json:"every"`
	MinSessions   int           `json:"min_sessions"`
	// Poll is how often the loop checks whether a cycle is due.
	Poll time.Duration `json:"poll"`
	// Model is the dialogue agent's registry name; UserAgentModel the user
	// agent's.
	Model          string `json:"model"`
	UserAgentModel string `json:"user_agent_model"`
	// Serving returns the version of Model that serves now (the rollout's
	// stable version); nil means the newest version in the registry.
	Serving func(ctx context.Context) (string, error) `json:"-"`
	// RL is the AT-GRPO run; its Steps is K, the steps of one cycle.
	RL     rl.Config       `json:"rl"`
	Policy rl.PolicyConfig `json:"policy"`
	// UserAgent is the user agent's prompt layout; keep it as trained. A
	// version's own calibration, fitted by the refresh, replaces its
	// Calibration (simulator.UserAgentConfig.ForVersion).
	UserAgent simulator.UserAgentConfig `json:"user_agent"`
	// Players is the ground-truth population the candidate and its parent
	// are evaluated on (its held-out personas), seeded with PlayersSeed;
	// Players.Size 0 leaves that evaluation out (a studio has no
	// ground-truth players; the dev stack's bots are one).
	Players     simulator.PopulationConfig `json:"players"`
	PlayersSeed uint64                     `json:"players_seed"`
	// HeldOutShare of the stored players (by a seeded hash of their id,
	// as in SFT) are the held-out simulated players of the user-agent
	// evaluation; the rest give the training prompts.
	HeldOutShare float64 `json:"held_out_share"`
	Seed         uint64  `json:"seed"`
	// MaxDialogues bounds the newest stored dialogues one cycle reads.
	MaxDialogues int `json:"max_dialogues"`
	// MaxTurns is L of the termination statistics shown in demos.
	MaxTurns int `json:"max_turns"`
	// EvalPrompts dialogues of up to EvalDepth exchanges are played per
	// evaluation; the curves use CurvePrompts of them every CurveEvery steps.
	EvalPrompts  int `json:"eval_prompts"`
	EvalDepth    int `json:"eval_depth"`
	CurvePrompts int `json:"curve_prompts"`
	CurveEvery   int `json:"curve_every"`
	// Gate, when set, decides from the candidate's and the parent's
	// evaluations whether the candidate is published (DESIGN.md §1's eval
	// gate), and says why; nil publishes every candidate and leaves the
	// judgement to the A/B test.
	Gate func(candidate, parent CycleEval) (bool, string) `json:"-"`
	// Referee, when set, must pass the user agent before the cycle trains
	// against it: measured on sibling turns of the serving version, once
	// per pair of versions. A user agent that does not rank the players'
	// choices among such turns teaches RL its own noise, and the A/B test
	// then finds the candidate worse only after players met it
	// (docs/experiments/README.md, loop run 11). Nil trains against any
	// user agent.
	Referee *RefereeGate `json:"-"`
	// DefaultCard is the NPC's system prompt and DefaultGreeting its first
	// line, as the gateway serves its default NPC (gateway.DefaultConfig):
	// the policy is trained and judged on the prompt it is served with.
	DefaultCard     string                  `json:"default_card"`
	DefaultGreeting string                  `json:"default_greeting"`
	Backend         inference.BackendConfig `json:"backend"`
}

// DefaultCycleConfig runs a small AT-GRPO cycle (W=4, w=2, γ=2, L=6, four
// trees per step, 10 steps: the experiment's small profile, trained and
// evaluated at the same L; NPC turns sampled as the gateway serves them,
// temperature 0.7, top-k 50, up to 64 tokens) every 200 new
// sessions or 6 hours, fitting 2 CPU cores, with the acceptance run's KL
// weight β 0.2 and lr 6e-4. On the first-start NPC's own sessions, lr 2e-4
// with β 0.01 gained six times more on the user agent than on the players
// and hardly moved them; β 0.2 at lr 6e-4 keeps the policy close (KL ≤ 0.2)
// and gained on the players in both seeds tried (docs/experiments/README.md,
// "The loop in the product"). Candidate and parent are compared on 400
// held-out openings, paired, as in the experiment.
func DefaultCycleConfig() CycleConfig {
	c := rl.DefaultConfig()
	c.Tree.W, c.Tree.Width, c.Tree.Depth = 4, 2, 6
	c.Batch, c.Workers, c.Steps = 4, 4, 10
	c.Update.Train.LearningRate, c.Update.Beta = 6e-4, 0.2
	c.Update.MiniBatch = 32
	pc := rl.DefaultPolicyConfig()
	pc.Sampling = inference.DefaultSampling()
	ua := simulator.DefaultUserAgentConfig()
	ua.Sampling.MaxTokens = 16
	pop := simulator.DefaultPopulationConfig()
	pop.Size = 0
	return CycleConfig{
		EverySessions: 200, Every: 6 * time.Hour, MinSessions: 20, Poll: 10 * time.Second,
		Model: "npc", UserAgentModel: "user-agent", RL: c, Policy: pc, UserAgent: ua, Players: pop, PlayersSeed: 1,
		HeldOutShare: 0.2, Seed: 1, MaxDialogues: 2000, MaxTurns: 10,
		EvalPrompts: 400, EvalDepth: 6, CurvePrompts: 8, CurveEvery: 2,
		DefaultCard: DefaultNPCCard, DefaultGreeting: inference.CompanionGreeting, Backend: inference.DefaultBackendConfig(),
	}
}

// Validate reports the first bad field.
func (c CycleConfig) Validate() error {
	switch {
	case c.EverySessions < 0 || c.Every < 0 || c.MinSessions < 0:
		return fmt.Errorf("cycle config: every %d sessions, every %v, min %d must not be negative", c.EverySessions, c.Every, c.MinSessions)
	case c.EverySessions == 0 && c.Every == 0:
		return errors.New("cycle config: set every_sessions or every")
	case c.Poll <= 0:
		return fmt.Errorf("cycle config: poll %v must be positive", c.Poll)
	case c.Model == "" || c.UserAgentModel == "":
		return errors.New("cycle config: model and user_agent_model are required")
	case c.RL.Algorithm != rl.ATGRPO:
		return fmt.Errorf("cycle config: the cycle runs %q, not %q", rl.ATGRPO, c.RL.Algorithm)
	case c.HeldOutShare <= 0 || c.HeldOutShare >= 1:
		return fmt.Errorf("cycle config: held-out share %g must be in (0, 1)", c.HeldOutShare)
	case c.MaxDialogues < 1 || c.MaxTurns < 1:
		return fmt.Errorf("cycle config: max dialogues %d and max turns %d must be positive", c.MaxDialogues, c.MaxTurns)
	case c.EvalPrompts < 1 || c.EvalDepth < 1 || c.CurvePrompts < 1 || c.CurveEvery < 1:
		return fmt.Errorf("cycle config: evaluation sizes %d, %d, %d, %d must be positive", c.EvalPrompts, c.EvalDepth, c.CurvePrompts, c.CurveEvery)
	}
	if err := c.RL.Validate(); err != nil {
		return fmt.Errorf("cycle config: %w", err)
	}
	if err := c.Policy.Validate(); err != nil {
		return fmt.Errorf("cycle config: %w", err)
	}
	if err := c.UserAgent.Validate(); err != nil {
		return fmt.Errorf("cycle config: %w", err)
	}
	if c.Players.Size > 0 {
		if err := c.Players.Validate(); err != nil {
			return fmt.Errorf("cycle config: %w", err)
		}
	}
	return c.Backend.Validate()
}

// CycleResult is what one cycle did.
type CycleResult struct {
	// Version is the published candidate, Parent the serving version it
	// started from, UserAgent the user-agent version it trained against.
	Version string `json:"version"`
	Parent  string `json:"parent"`
	// Published is false when Gate or the referee gate on the candidate's
	// turns refused it (and the players did not overrule it:
	// playersOverrule), or there is none; GateReason says why.
	Published  bool   `json:"published"`
	GateReason string `json:"gate_reason,omitempty"`
	// KeptBack is the checkpoint directory a refused candidate was saved
	// to (in Cycle.KeptBackRegistry), empty when it was published.
	KeptBack  string `json:"kept_back,omitempty"`
	UserAgent string `json:"user_agent"`
	// Referee is the referee gate's verdict on the user agent (nil without
	// CycleConfig.Referee); when it did not pass, the cycle trained nothing.
	// CandidateReferee is its verdict on the same user agent as the referee
	// of the trained candidate's turns; when it did not pass, the candidate
	// was not published.
	Referee          *RefereeVerdict `json:"referee,omitempty"`
	CandidateReferee *RefereeVerdict `json:"candidate_referee,omitempty"`
	// Candidate and ParentEval are the evaluations on the held-out players:
	// UA… with the user agent (α = 1), GT… with the ground-truth personas
	// (zero without a population).
	Candidate  CycleEval `json:"candidate"`
	ParentEval CycleEval `json:"parent_eval"`
	// UADelta and GTDelta are candidate − parent on the same held-out
	// dialogues, paired, with bootstrap intervals over players (rl.Compare);
	// GTDelta is nil without a population.
	UADelta *rl.Comparison `json:"ua_delta,omitempty"`
	GTDelta *rl.Comparison `json:"gt_delta,omitempty"`
	Steps   []rl.StepStats
	Curves  schema.Curves `json:"curves"`
	Seconds float64       `json:"seconds"`
}

// CycleEval is Avg.L, Avg.r and the expected length from the hazards
// (rl.ExpectedLength) of one policy with both environments.
type CycleEval struct {
	UAAvgL float64 `json:"ua_avg_l"`
	UAAvgR float64 `json:"ua_avg_r"`
	UAExpL float64 `json:"ua_exp_l"`
	GTAvgL float64 `json:"gt_avg_l"`
	GTAvgR float64 `json:"gt_avg_r"`
	GTExpL float64 `json:"gt_exp_l"`
	// ua and gt are the dialogues, for the paired comparison.
	ua, gt []rl.Outcome
}

// cycleState is what the cycle loop remembers across restarts
// (DataDir/cycle.json).
type cycleState struct {
	// TrainedUpTo is the store length at the start of the last finished
	// cycle.
	TrainedUpTo int       `json:"trained_up_to"`
	Cycles      int       `json:"cycles"`
	LastAt      time.Time `json:"last_at"`
	LastVersion string    `json:"last_version,omitempty"`
	// Last is what the last finished cycle measured; nil before the first.
	Last *cycleOutcome `json:"last,omitempty"`
	// Referee is the referee gate's last verdict, kept for its pair of
	// versions.
	Referee *RefereeVerdict `json:"referee,omitempty"`
}

// RefereeVerdict is the referee gate's verdict on the user agent version
// UserAgent as the referee of RL from the NPC version NPC.
type RefereeVerdict struct {
	NPC       string            `json:"npc"`
	UserAgent string            `json:"user_agent"`
	Passed    bool              `json:"passed"`
	Reason    string            `json:"reason"`
	Report    *rl.RefereeReport `json:"report"`
}

// cycleOutcome is the verdict of a cycle's gates and why, the evaluations
// the eval gate judged and the last AT-GRPO loss.
type cycleOutcome struct {
	Published bool   `json:"published"`
	Reason    string `json:"reason,omitempty"`
	// KeptBack is where the unpublished candidate was saved.
	KeptBack   string    `json:"kept_back,omitempty"`
	Candidate  CycleEval `json:"candidate"`
	ParentEval CycleEval `json:"parent_eval"`
	Loss       float64   `json:"loss"`
}

// Cycle runs periodic AT-GRPO cycles on a learner's session store.
type Cycle struct {
	cfg      CycleConfig
	store    *Store
	registry string
	dataDir  string
	logger   *slog.Logger
	now      func() time.Time

	mu    sync.Mutex
	state cycleState
}

// NewCycle prepares cycles on store that publish to the registry at
// registryRoot, keeping their state and scratch files in dataDir.
func NewCycle(cfg CycleConfig, store *Store, registryRoot, dataDir string, logger *slog.Logger) (*Cycle, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil || registryRoot == "" || dataDir == "" {
		return nil, errors.New("new cycle: a store, a registry and a data dir are required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Cycle{cfg: cfg, store: store, registry: registryRoot, dataDir: dataDir, logger: logger, now: time.Now}
	raw, err := os.ReadFile(c.statePath())
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.state.LastAt = c.now()
	case err != nil:
		return nil, fmt.Errorf("new cycle: %w", err)
	default:
		if err := json.Unmarshal(raw, &c.state); err != nil {
			return nil, fmt.Errorf("new cycle: read %q: %w", c.statePath(), err)
		}
	}
	return c, nil
}

func (c *Cycle) statePath() string { return filepath.Join(c.dataDir, "cycle.json") }

func (c *Cycle) save() error {
	raw, err := json.MarshalIndent(c.state, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.dataDir, 0o755); err != nil {
		return fmt.Errorf("write cycle state: %w", err)
	}
	if err := atomicfile.Write(c.statePath(), raw, 0o644); err != nil {
		return fmt.Errorf("write cycle state: %w", err)
	}
	return nil
}

// due reports whether a cycle should run now: its schedule says so, or the
// user agent the referee gate refused is no longer the current one (a
// refresh published another, often from the very window the refusal
// consumed), so the cycle judges that one without waiting for a window.
func (c *Cycle) due() bool {
	c.mu.Lock()
	scheduled := schedule{c.cfg.EverySessions, c.cfg.Every, c.cfg.MinSessions}.due(
		c.store.Len()-c.state.TrainedUpTo, c.now().Sub(c.state.LastAt))
	refused := ""
	if v := c.state.Referee; v != nil && !v.Passed {
		refused = v.UserAgent
	}
	c.mu.Unlock()
	if scheduled || refused == "" {
		return scheduled
	}
	ua, err := currentVersion(context.Background(), c.registry, c.cfg.UserAgentModel)
	return err == nil && ua != "" && ua != refused
}

// Run checks every Poll whether a cycle is due and runs it until ctx is
// done. A failed cycle is logged and retried at the next due time.
func (c *Cycle) Run(ctx context.Context) error {
	return runEvery(ctx, c.cfg.Poll, c.due,
		func(ctx context.Context) error { _, err := c.RunOnce(ctx); return err },
		func(err error) {
			c.logger.Error("at-grpo cycle failed", "err", err)
			c.mu.Lock()
			c.state.LastAt = c.now()
			c.mu.Unlock()
		})
}

// RunOnce runs one cycle now on the stored sessions. It returns nil and no
// error when the store has too few players for training and held-out
// prompts, and a result with the verdict and nothing trained when Referee
// refuses the user agent. A cycle stopped midway publishes nothing.
func (c *Cycle) RunOnce(ctx context.Context) (*CycleResult, error) {
	start := time.Now()
	upTo := c.store.Len()
	ds := c.store.Range(max(0, upTo-c.cfg.MaxDialogues), upTo)
	pool, held := c.prompts(ds)
	if len(pool) == 0 || len(held) == 0 {
		c.logger.Info("at-grpo cycle postponed: too few players", "dialogues", len(ds), "train_prompts", len(pool), "held_out_prompts", len(held))
		c.mu.Lock()
		c.state.LastAt = c.now()
		c.mu.Unlock()
		return nil, nil
	}
	reg, err := registry.NewLocal(c.registry)
	if err != nil {
		return nil, fmt.Errorf("at-grpo cycle: %w", err)
	}
	parent, err := c.serving(ctx, reg)
	if err != nil {
		return nil, err
	}
	uaVersion, err := currentVersion(ctx, c.registry, c.cfg.UserAgentModel)
	if err != nil {
		return nil, fmt.Errorf("at-grpo cycle: %w", err)
	}
	if uaVersion == "" {
		return nil, fmt.Errorf("at-grpo cycle: no version of %q: %w", c.cfg.UserAgentModel, registry.ErrNotFound)
	}
	res := &CycleResult{Parent: parent, UserAgent: uaVersion}
	if c.cfg.Referee != nil {
		if res.Referee, err = c.refereed(ctx, parent, uaVersion, ds); err != nil {
			return nil, fmt.Errorf("at-grpo cycle: %w", err)
		}
		if !res.Referee.Passed {
			c.logger.Warn("at-grpo cycle waits for a user agent that passes the referee gate", "parent", parent, "user_agent", uaVersion, "reason", res.Referee.Reason)
			res.Seconds = time.Since(start).Seconds()
			c.mu.Lock()
			defer c.mu.Unlock()
			c.state.TrainedUpTo, c.state.LastAt = upTo, c.now()
			if err := c.save(); err != nil {
				return res, fmt.Errorf("at-grpo cycle: %w", err)
			}
			return res, nil
		}
	}
	c.logger.Info("at-grpo cycle", "parent", parent, "user_agent", uaVersion, "steps", c.cfg.RL.Steps,
		"train_prompts", len(pool), "held_out_prompts", len(held))

	// An imported parent is prompted in its chat template, and the
	// candidate carries the template on.
	model, chat, _, err := loadChatModel(reg.Dir(c.cfg.Model, parent), c.cfg.Backend)
	if err != nil {
		return nil, fmt.Errorf("at-grpo cycle: %w", err)
	}
	tok := chat.Tokenizer()
	hf, err := inference.ReadHFFiles(reg.Dir(c.cfg.Model, parent))
	if err != nil {
		return nil, fmt.Errorf("at-grpo cycle: %w", err)
	}
	eng, stopEng, err := cycleEngine(model, chat, c.logger)
	if err != nil {
		return nil, fmt.Errorf("at-grpo cycle: %w", err)
	}
	defer stopEng()
	ua, stopUA, err := serveUserAgent(reg.Dir(c.cfg.UserAgentModel, uaVersion), c.cfg.UserAgent, c.cfg.Backend, c.logger)
	if err != nil {
		return nil, fmt.Errorf("at-grpo cycle: %w", err)
	}
	defer stopUA()
	maxSeq := model.Config().MaxSeq
	pol, err := rl.NewChatPolicy(eng, chat, maxSeq, c.cfg.Policy)
	if err != nil {
		return nil, fmt.Errorf("at-grpo cycle: %w", err)
	}
	up, err := rl.NewUpdater(model, c.cfg.RL.Update)
	if err != nil {
		return nil, fmt.Errorf("at-grpo cycle: %w", err)
	}
	defer up.Close()
	var gtEnv *rl.PlayerEnv
	var gtPrompts []rl.Prompt
	if c.cfg.Players.Size > 0 {
		pop, err := simulator.NewPopulation(c.cfg.Players, c.cfg.PlayersSeed)
		if err != nil {
			return nil, fmt.Errorf("at-grpo cycle: %w", err)
		}
		gtEnv, gtPrompts = rl.NewPlayerEnv(pop), c.groundTruthPrompts(pop)
	}
	held = held[:min(len(held), c.cfg.EvalPrompts)]
	curve := held[:min(len(held), c.cfg.CurvePrompts)]
	// Every evaluation samples with the same seeds, so the parent's and the
	// candidate's differ only by their weights.
	evaluate := func(env rl.Environment, prompts []rl.Prompt) (rl.EvalResult, error) {
		pc := c.cfg.Policy
		pc.Seed = c.cfg.Seed*31337 + 5
		ep, err := rl.NewChatPolicy(eng, chat, maxSeq, pc)
		if err != nil {
			return rl.EvalResult{}, err
		}
		if env == nil {
			env = rl.NewUserAgentEnv(ua, c.cfg.Seed*7727+3)
		}
		return rl.Evaluate(ctx, ep, env, prompts, c.cfg.EvalDepth, 0)
	}
	both := func() (CycleEval, error) {
		var e CycleEval
		r, err := evaluate(nil, held)
		if err != nil {
			return e, err
		}
		e.UAAvgL, e.UAAvgR, e.UAExpL, e.ua = r.AvgL, r.AvgR, r.ExpL, r.Outcomes
		if gtEnv != nil {
			r, err := evaluate(gtEnv, gtPrompts)
			if err != nil {
				return e, err
			}
			e.GTAvgL, e.GTAvgR, e.GTExpL, e.gt = r.AvgL, r.AvgR, r.ExpL, r.Outcomes
		}
		return e, nil
	}
	avgR := schema.CurveSeries{Name: "avg_r"}
	avgL := schema.CurveSeries{Name: "avg_l"}
	point := func(step int) error {
		r, err := evaluate(nil, curve)
		if err != nil {
			return err
		}
		avgR.Points = append(avgR.Points, schema.CurvePoint{X: float64(step), Y: r.AvgR})
		avgL.Points = append(avgL.Points, schema.CurvePoint{X: float64(step), Y: r.AvgL})
		return nil
	}
	if res.ParentEval, err = both(); err != nil {
		return nil, fmt.Errorf("at-grpo cycle: evaluate parent: %w", err)
	}
	if err := point(0); err != nil {
		return nil, fmt.Errorf("at-grpo cycle: %w", err)
	}
	cfg := c.cfg.RL
	c.mu.Lock()
	cfg.Seed = c.cfg.Seed + uint64(c.state.Cycles)
	c.mu.Unlock()
	tr, err := rl.NewTrainer(cfg, pol, rl.NewUserAgentEnv(ua, cfg.Seed*104729), up, c.logger)
	if err != nil {
		return nil, fmt.Errorf("at-grpo cycle: %w", err)
	}
	for step := range cfg.Steps {
		st, _, err := tr.Step(ctx, pool)
		if err != nil {
			return nil, fmt.Errorf("at-grpo cycle: %w", err)
		}
		res.Steps = append(res.Steps, st)
		if (step+1)%c.cfg.CurveEvery == 0 || step+1 == cfg.Steps {
			if err := point(step + 1); err != nil {
				return nil, fmt.Errorf("at-grpo cycle: %w", err)
			}
		}
	}
	if res.Candidate, err = both(); err != nil {
		return nil, fmt.Errorf("at-grpo cycle: evaluate candidate: %w", err)
	}
	if res.UADelta, res.GTDelta, err = compareCycle(res.Candidate, res.ParentEval, c.cfg.EvalDepth); err != nil {
		return nil, fmt.Errorf("at-grpo cycle: %w", err)
	}
	res.Curves = schema.Curves{Model: c.cfg.Model, X: "step", Series: []schema.CurveSeries{avgR, avgL}}
	res.Published = true
	if c.cfg.Gate != nil {
		res.Published, res.GateReason = c.cfg.Gate(res.Candidate, res.ParentEval)
	}
	// RL moves the policy to turns the referee was never judged on, and
	// the user agent may not rank those: a candidate whose turns it does
	// not rank is not sent to players, unless the ground-truth players
	// themselves gain from it.
	if res.Published && c.cfg.Referee != nil {
		rep, pass, why, err := c.cfg.Referee.JudgeModel(ctx, model, chat, "candidate", uaVersion, ds)
		if err != nil {
			return nil, fmt.Errorf("at-grpo cycle: the candidate's referee: %w", err)
		}
		res.CandidateReferee = &RefereeVerdict{NPC: "candidate", UserAgent: uaVersion, Passed: pass, Reason: why, Report: rep}
		if !pass {
			res.Published, res.GateReason = playersOverrule(res.GTDelta, why)
		}
	}
	if res.Published {
		if err := c.publish(ctx, reg, res, model, tok, hf, ds); err != nil {
			return nil, err
		}
	} else if err := c.keepBack(res, model, tok, hf, ds); err != nil {
		return nil, err
	}
	res.Seconds = time.Since(start).Seconds()
	c.mu.Lock()
	c.state.TrainedUpTo, c.state.LastAt, c.state.LastVersion = upTo, c.now(), res.Version
	c.state.Cycles++
	c.state.Last = &cycleOutcome{Published: res.Published, Reason: res.GateReason, KeptBack: res.KeptBack, Candidate: res.Candidate, ParentEval: res.ParentEval}
	if n := len(res.Steps); n > 0 {
		c.state.Last.Loss = res.Steps[n-1].Loss
	}
	err = c.save()
	c.mu.Unlock()
	msg := "at-grpo cycle published a candidate"
	if !res.Published {
		msg = "at-grpo cycle candidate refused by the gate"
	}
	c.logger.Info(msg, "version", res.Version, "parent", parent, "user_agent", uaVersion, "gate", res.GateReason,
		"ua_avg_l", res.Candidate.UAAvgL, "ua_avg_l_parent", res.ParentEval.UAAvgL,
		"ua_avg_r", res.Candidate.UAAvgR, "ua_avg_r_parent", res.ParentEval.UAAvgR,
		"gt_avg_l", res.Candidate.GTAvgL, "gt_avg_l_parent", res.ParentEval.GTAvgL,
		"gt_avg_r", res.Candidate.GTAvgR, "gt_avg_r_parent", res.ParentEval.GTAvgR, "seconds", res.Seconds)
	if err != nil {
		return res, fmt.Errorf("at-grpo cycle: %w", err)
	}
	return res, nil
}

// playersOverrule decides on a candidate the referee gate refused on its
// own turns (why): it is published only when the cycle's ground-truth
// players gain from it, the player-level paired CI of Avg.L (gt, nil
// without players) above zero. The referee stands in for those players,
// whose hidden hazard it is measured against; where they measured the
// candidate itself, their verdict is the better evidence. The candidates
// this gate kept back in runs 14 to 16 were all worse for them; run 19's,
// which the user agent no longer ranked, gained them +1.2
// (docs/experiments/README.md, "A start with room").
func playersOverrule(gt *rl.Comparison, why string) (publish bool, reason string) {
	if gt == nil || gt.CILow <= 0 {
		return false, "the referee gate on the candidate's turns: " + why
	}
	return true, fmt.Sprintf("the referee gate on the candidate's turns refused (%s), but the players gain %+.3f [%+.3f, %+.3f] exchanges from it, paired",
		why, gt.DeltaAvgL, gt.CILow, gt.CIHigh)
}

// refereed is the referee gate's verdict on the user agent version ua as
// the referee of RL from the NPC version npc: the kept one for that pair,
// else measured now with window's demos and kept.
func (c *Cycle) refereed(ctx context.Context, npc, ua string, window []schema.Dialogue) (*RefereeVerdict, error) {
	c.mu.Lock()
	v := c.state.Referee
	c.mu.Unlock()
	if v != nil && v.NPC == npc && v.UserAgent == ua {
		return v, nil
	}
	rep, pass, why, err := c.cfg.Referee.Judge(ctx, npc, ua, window)
	if err != nil {
		return nil, err
	}
	v = &RefereeVerdict{NPC: npc, UserAgent: ua, Passed: pass, Reason: why, Report: rep}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state.Referee = v
	return v, c.save()
}

// compareCycle pairs the candidate's dialogues with the parent's (rl.Compare):
// with the user agent, and with the players when there are some.
func compareCycle(cand, parent CycleEval, depth int) (ua, gt *rl.Comparison, err error) {
	one := func(a, b []rl.Outcome) (*rl.Comparison, error) {
		if len(a) == 0 {
			return nil, nil
		}
		c, err := rl.Compare([][]rl.Outcome{a}, [][]rl.Outcome{b}, depth, rl.DefaultBootstrapConfig())
		if err != nil {
			return nil, fmt.Errorf("compare candidate and parent: %w", err)
		}
		return &c, nil
	}
	if ua, err = one(cand.ua, parent.ua); err != nil {
		return nil, nil, err
	}
	gt, err = one(cand.gt, parent.gt)
	return ua, gt, err
}

// serving is the version the cycle starts from.
func (c *Cycle) serving(ctx context.Context, reg *registry.Local) (string, error) {
	if c.cfg.Serving != nil {
		v, err := c.cfg.Serving(ctx)
		if err != nil {
			return "", fmt.Errorf("at-grpo cycle: serving version: %w", err)
		}
		return v, nil
	}
	v, err := currentVersion(ctx, reg.Root(), c.cfg.Model)
	if err != nil {
		return "", fmt.Errorf("at-grpo cycle: %w", err)
	}
	if v == "" {
		return "", fmt.Errorf("at-grpo cycle: no version of %q: %w", c.cfg.Model, registry.ErrNotFound)
	}
	return v, nil
}

// prompts turns stored dialogues into the training pool (players outside
// the held-out share) and the held-out prompts: each dialogue's opening,
// with two other dialogues of its player as style demonstrations.
func (c *Cycle) prompts(ds []schema.Dialogue) (pool, held []rl.Prompt) {
	var usable []schema.Dialogue
	for _, d := range ds {
		if len(d.Exchanges) > 0 && d.Exchanges[0].User != "" {
			usable = append(usable, d)
		}
	}
	risks := simulator.TrainingRisks(usable, c.cfg.MaxTurns)
	players := byPlayer(usable)
	for i, d := range usable {
		p := rl.Prompt{ID: d.SessionID, PlayerID: d.PlayerID, System: c.cfg.DefaultCard, Greeting: c.cfg.DefaultGreeting,
			Opening: d.Exchanges[0].User, Seed: c.cfg.Seed*1_000_003 + uint64(i)}
		for _, o := range players[d.PlayerID] {
			if o.SessionID == d.SessionID {
				continue
			}
			p.Demos = append(p.Demos, simulator.PromptDialogueOf(o, risks))
			if len(p.Demos) == 2 {
				break
			}
		}
		if heldOutPlayer(d.PlayerID, c.cfg.HeldOutShare, c.cfg.Seed) {
			held = append(held, p)
		} else {
			pool = append(pool, p)
		}
	}
	return pool, held
}

// groundTruthPrompts opens EvalPrompts fresh conversations of the
// population's held-out personas (all personas when none is held out).
func (c *Cycle) groundTruthPrompts(pop *simulator.Population) []rl.Prompt {
	var ps []*simulator.Persona
	for _, p := range pop.Players() {
		if p.HeldOut {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		ps = pop.Players()
	}
	out := make([]rl.Prompt, 0, c.cfg.EvalPrompts)
	for i := range c.cfg.EvalPrompts {
		out = append(out, rl.PlayerPrompt(ps[i%len(ps)], 9_000_000+uint64(i), c.cfg.DefaultCard, c.cfg.DefaultGreeting))
	}
	return out
}

// publish saves the trained model with its manifest and curves (and an
// imported parent's HFFiles hf) and puts it into the registry as the next
// version, atomically.
func (c *Cycle) publish(ctx context.Context, reg *registry.Local, res *CycleResult, m *inference.Model, tok *inference.Tokenizer, hf inference.HFFiles, ds []schema.Dialogue) error {
	version, err := registry.NextVersion(ctx, reg, c.cfg.Model)
	if err != nil {
		return fmt.Errorf("at-grpo cycle: %w", err)
	}
	res.Version, res.Curves.Version = version, version
	scratch := filepath.Join(c.dataDir, "runs")
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return fmt.Errorf("at-grpo cycle: %w", err)
	}
	tmp, err := os.MkdirTemp(scratch, "cycle-")
	if err != nil {
		return fmt.Errorf("at-grpo cycle: %w", err)
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, version)
	if err := c.saveCandidate(dir, version, res, m, tok, hf, ds); err != nil {
		return err
	}
	if _, err := reg.Publish(ctx, c.cfg.Model, version, dir); err != nil {
		return fmt.Errorf("at-grpo cycle: %w", err)
	}
	return nil
}

// KeptBackRegistry is a registry root that holds the last candidate the
// cycle did not publish, as version "kept-back" of the model, with the
// metrics and curves a published one has, so that live-ops can measure it
// (`parley eval --registry DIR --version kept-back`) until the next
// refused candidate replaces it.
func (c *Cycle) KeptBackRegistry() string { return filepath.Join(c.dataDir, "kept-back") }

// keepBack saves a refused candidate to KeptBackRegistry, replacing the
// one there.
func (c *Cycle) keepBack(res *CycleResult, m *inference.Model, tok *inference.Tokenizer, hf inference.HFFiles, ds []schema.Dialogue) error {
	dir := filepath.Join(c.KeptBackRegistry(), c.cfg.Model, keptBack)
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("at-grpo cycle: keep back the candidate: %w", err)
	}
	if err := c.saveCandidate(tmp, keptBack, res, m, tok, hf, ds); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("at-grpo cycle: keep back the candidate: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("at-grpo cycle: keep back the candidate: %w", err)
	}
	res.KeptBack = dir
	return nil
}

// keptBack is the version name of a refused candidate.
const keptBack = "kept-back"

// saveCandidate writes the trained model to dir as version, with its manifest
// (hyperparameters, data window, evaluations) and curves.
func (c *Cycle) saveCandidate(dir, version string, res *CycleResult, m *inference.Model, tok *inference.Tokenizer, hf inference.HFFiles, ds []schema.Dialogue) error {
	rc := c.cfg.RL
	man := schema.Manifest{Model: c.cfg.Model, Version: version, Parent: res.Parent, Algorithm: string(rl.ATGRPO)}
	man.Hyperparameters = map[string]any{
		"steps": rc.Steps, "batch": rc.Batch, "w_group": rc.Tree.W, "width": rc.Tree.Width, "gamma": rc.Tree.Gamma,
		"omega": rc.Tree.Omega, "depth": rc.Tree.Depth, "beta": rc.Update.Beta, "epsilon": rc.Update.Epsilon,
		"lambda": rc.Lambda, "learning_rate": rc.Update.Train.LearningRate, "user_agent": res.UserAgent,
		"seed": rc.Seed,
	}
	man.DataWindow = dataWindow(ds)
	cand, par := res.Candidate, res.ParentEval
	man.Metrics = map[string]float64{
		"ua_avg_l": cand.UAAvgL, "ua_avg_r": cand.UAAvgR, "parent_ua_avg_l": par.UAAvgL, "parent_ua_avg_r": par.UAAvgR,
	}
	if c.cfg.Players.Size > 0 {
		man.Metrics["avg_l"], man.Metrics["avg_r"] = cand.GTAvgL, cand.GTAvgR
		man.Metrics["parent_avg_l"], man.Metrics["parent_avg_r"] = par.GTAvgL, par.GTAvgR
	}
	if err := inference.SaveImportedCheckpoint(dir, m, tok, hf, man); err != nil {
		return fmt.Errorf("at-grpo cycle: %w", err)
	}
	cv := res.Curves
	cv.Version = version
	if err := addCurves(dir, cv); err != nil {
		return fmt.Errorf("at-grpo cycle: %w", err)
	}
	return nil
}

// addCurves writes curves.json into a saved checkpoint and lists it, with
// its sha256, in the checkpoint's manifest.
func addCurves(dir string, cv schema.Curves) error {
	raw, err := json.MarshalIndent(cv, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, schema.CurvesFile), raw, 0o644); err != nil {
		return err
	}
	mpath := filepath.Join(dir, inference.ManifestFile)
	mraw, err := os.ReadFile(mpath)
	if err != nil {
		return fmt.Errorf("add curves: %w", err)
	}
	var man schema.Manifest
	if err := json.Unmarshal(mraw, &man); err != nil {
		return fmt.Errorf("add curves: %w", err)
	}
	sum := sha256.Sum256(raw)
	man.Files[schema.CurvesFile] = hex.EncodeToString(sum[:])
	out, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(mpath, append(out, '\n'), 0o644)
}

// loadChatModel loads the model version in dir as the gateway serves it:
// its weights, its chat format (an imported model's template, else
// Parley's layout) and its manifest.
func loadChatModel(dir string, backend inference.BackendConfig) (*inference.Model, *inference.ChatFormat, schema.Manifest, error) {
	m, tok, man, err := inference.LoadCheckpoint(dir, backend)
	if err != nil {
		return nil, nil, schema.Manifest{}, err
	}
	chat, err := inference.LoadChatFormat(dir, tok)
	if err != nil {
		return nil, nil, schema.Manifest{}, err
	}
	return m, chat, man, nil
}

// cycleEngine serves m in chat's format with room for whole tree levels of
// several trees until the returned stop is called. The engine does not stop with the
// cycle's context: requests already queued when the cycle is cancelled
// still finish, so nothing waits on a stream of a stopped engine.
func cycleEngine(m *inference.Model, chat *inference.ChatFormat, logger *slog.Logger) (*inference.Engine, func(), error) {
	cfg := inference.DefaultEngineConfig()
	cfg.MaxBatch, cfg.QueueSize, cfg.Chat = 64, 4096, chat
	eng, err := inference.NewEngine(m, chat.Tokenizer(), cfg, logger)
	if err != nil {
		return nil, nil, err
	}
	return eng, eng.Start(), nil
}
