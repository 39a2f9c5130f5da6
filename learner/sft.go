package learner

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/internal/atomicfile"
	"github.com/parleyhq/parley/internal/progress"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// ErrRunMismatch is returned when a run directory holds checkpoints of a
// different run (other data or settings): resuming it would mix two runs.
var ErrRunMismatch = errors.New("learner: checkpoints belong to a different run")

// SFTConfig configures supervised fine-tuning of one agent.
type SFTConfig struct {
	Role Role `json:"role"`
	// Registry is the registry root; empty means the model is not
	// published. Model is its name there ("npc" or "user-agent" by default).
	Registry string `json:"registry"`
	Model    string `json:"model"`
	// Version is the version to publish; empty means the next free "vN".
	Version string `json:"version"`
	// Parent is the version of Model to fine-tune; empty means a fresh
	// model with a tokenizer trained on the dialogues.
	Parent string `json:"parent"`
	// DataDir holds the run's checkpoints in DataDir/RunID; a run whose
	// directory has checkpoints resumes from the latest.
	DataDir string `json:"data_dir"`
	RunID   string `json:"run_id"`
	// Arch is the architecture of a fresh model (VocabSize is replaced by
	// the tokenizer's) and VocabSize the size of its tokenizer.
	Arch      inference.ModelConfig   `json:"arch"`
	VocabSize int                     `json:"vocab_size"`
	Backend   inference.BackendConfig `json:"backend"`
	// Trainer is "native" (the CPU trainer), "gomlx" (GoMLX's graph), or
	// empty: native on the "go" backend, gomlx on "xla".
	Trainer string `json:"trainer,omitempty"`
	// Train is AdamW with warm-up. When Train.WarmupSteps is 0 the warm-up
	// is WarmupShare of Steps (the paper's 10 %).
	Train       inference.TrainConfig `json:"train"`
	WarmupShare float64               `json:"warmup_share"`
	// Steps is the number of optimizer steps; 0 means Epochs passes over
	// the training instances.
	Steps     int `json:"steps"`
	Epochs    int `json:"epochs"`
	BatchSize int `json:"batch_size"`
	// CheckpointEvery saves the run every so many steps (and at the end);
	// KeepCheckpoints is how many are kept.
	CheckpointEvery int `json:"checkpoint_every"`
	KeepCheckpoints int `json:"keep_checkpoints"`
	// HeldOutShare of the players (by a seeded hash of their id) are kept
	// out of training and evaluated on.
	HeldOutShare float64 `json:"held_out_share"`
	Seed         uint64  `json:"seed"`
	// MaxTurns is L, the most exchanges of a dialogue.
	MaxTurns int `json:"max_turns"`
	// UserAgent is the user agent's prompt layout (RoleUser).
	UserAgent simulator.UserAgentConfig `json:"user_agent"`
	// DecisionWeight weighs the loss of the user agent's [Continue] /
	// [Terminate] token against that of a text token (RoleUser). One
	// decision competes with a dozen words of text per turn; a weight
	// above 1 makes termination, the thing the agent is for, count more.
	// The default is 20: with 1 the first-start user agent's end
	// probability hardly moves with the NPC's turn, and RL against it
	// drifts (docs/experiments/README.md, "The loop in the product").
	DecisionWeight float64 `json:"decision_weight"`
	// SoftLabelDiagnostic, when set (RoleUser), trains every decision on
	// the players' hidden hazard as a soft label instead of the decision
	// the session logged (softDecisions): a diagnostic of the referee that
	// tells its capacity from the noise of the logged labels
	// (docs/experiments/referee-softlabels.md). A deployment never observes
	// the hazard, so no product path sets it, and no config file can.
	SoftLabelDiagnostic HiddenHazards `json:"-"`
	// NPCCards maps an NPC id to its persona card, the system turn of its
	// dialogues (RoleNPC); others get DefaultCard.
	NPCCards    map[string]string `json:"npc_cards,omitempty"`
	DefaultCard string            `json:"default_card"`
	// Eval sizes the held-out evaluation before and after training;
	// SkipEvalBefore leaves out the first one.
	Eval           EvalConfig `json:"eval"`
	SkipEvalBefore bool       `json:"skip_eval_before"`
	// FidelityByGate (RoleUser) leaves the user agent's fidelity (ρ,
	// log-losses, Avg.L, its replies' Dist-n) out of those evaluations,
	// for a Gate that measures it as the agent will be served: the
	// refresh calibrates the agent first, so its fidelity as trained
	// would be measured for nothing.
	FidelityByGate bool `json:"-"`
	// Gate, when set, decides from the metrics before and after training
	// and from the trained model whether the model is published (and with
	// which metrics besides the evaluation's); its error fails the run
	// before anything is published (a rerun resumes after the training).
	Gate func(ctx context.Context, before, after Metrics, m *inference.Model, tok *inference.Tokenizer) (GateVerdict, error) `json:"-"`
	// Progress receives the training progress (loss, tokens/s, ETA): a bar
	// on a terminal, a line every few seconds otherwise; nil means none.
	Progress io.Writer `json:"-"`

	// afterStep, when set (tests), runs after each step; an error stops
	// the run there, as a crash would.
	afterStep func(step int) error
}

// DefaultSFTConfig returns the small-scale profile for this machine: the
// default 1.3M-parameter model with a 2,048-token vocabulary, batches of
// 16, 300 steps, learning rate 1e-3 with 10 % warm-up then constant, a
// checkpoint every 50 steps, 20 % of the players held out.
func DefaultSFTConfig(role Role) SFTConfig {
	model := "npc"
	if role == RoleUser {
		model = "user-agent"
	}
	tc := inference.DefaultTrainConfig()
	tc.WarmupSteps = 0
	return SFTConfig{
		Role: role, Model: model, Arch: inference.DefaultModelConfig(), VocabSize: 2048,
		Backend: inference.DefaultBackendConfig(), Train: tc, WarmupShare: 0.1,
		Steps: 300, BatchSize: 16, CheckpointEvery: 50, KeepCheckpoints: 2,
		HeldOutShare: 0.2, Seed: 1, MaxTurns: 10,
		UserAgent: simulator.DefaultUserAgentConfig(), DecisionWeight: 20, DefaultCard: DefaultNPCCard,
		Eval: DefaultEvalConfig(),
	}
}

// Validate reports the first bad field.
func (c SFTConfig) Validate() error {
	if err := c.Role.Validate(); err != nil {
		return fmt.Errorf("sft config: %w", err)
	}
	switch {
	case c.Model == "":
		return errors.New("sft config: model name is required")
	case c.DataDir == "":
		return errors.New("sft config: data dir is required")
	case c.Parent != "" && c.Registry == "":
		return errors.New("sft config: a parent version needs a registry")
	case c.Steps < 0 || c.Epochs < 0 || (c.Steps == 0 && c.Epochs == 0):
		return fmt.Errorf("sft config: steps %d or epochs %d must be positive", c.Steps, c.Epochs)
	case c.BatchSize < 1 || c.CheckpointEvery < 1 || c.KeepCheckpoints < 1:
		return fmt.Errorf("sft config: batch size %d, checkpoint every %d, keep %d must be positive",
			c.BatchSize, c.CheckpointEvery, c.KeepCheckpoints)
	case c.HeldOutShare <= 0 || c.HeldOutShare >= 1:
		return fmt.Errorf("sft config: held-out share %g must be in (0, 1)", c.HeldOutShare)
	case c.WarmupShare < 0 || c.WarmupShare >= 1:
		return fmt.Errorf("sft config: warm-up share %g must be in [0, 1)", c.WarmupShare)
	case c.MaxTurns < 1:
		return fmt.Errorf("sft config: max turns %d must be positive", c.MaxTurns)
	case c.DecisionWeight <= 0:
		return fmt.Errorf("sft config: decision weight %g must be positive", c.DecisionWeight)
	case c.Parent == "" && c.VocabSize < 300:
		return fmt.Errorf("sft config: vocab size %d is below the 256 bytes and specials", c.VocabSize)
	}
	if c.Parent == "" {
		if err := c.Arch.Validate(); err != nil {
			return fmt.Errorf("sft config: %w", err)
		}
	}
	if err := c.UserAgent.Validate(); err != nil {
		return fmt.Errorf("sft config: %w", err)
	}
	if err := c.Eval.Validate(); err != nil {
		return fmt.Errorf("sft config: %w", err)
	}
	if err := c.Backend.Validate(); err != nil {
		return fmt.Errorf("sft config: %w", err)
	}
	if _, err := inference.ResolveTrainer(c.Trainer, c.Backend); err != nil {
		return fmt.Errorf("sft config: %w", err)
	}
	return nil
}

// GateVerdict is an SFTConfig.Gate's decision: whether to publish the
// trained model, why, metrics its manifest carries beside the
// evaluation's, and files the version carries beside the model's, by name.
type GateVerdict struct {
	Publish bool
	Reason  string
	Metrics map[string]float64
	Files   map[string][]byte
}

// SFTResult is what a fine-tuning run did.
type SFTResult struct {
	Role    Role   `json:"role"`
	Model   string `json:"model"`
	Version string `json:"version"`
	// Published is set when the version went to the registry; Manifest is
	// then its manifest. GateReason is the gate's word either way.
	Published  bool            `json:"published"`
	Manifest   schema.Manifest `json:"manifest"`
	GateReason string          `json:"gate_reason,omitempty"`
	// Before and After are the held-out metrics of the starting and the
	// trained model (Before is zero with SkipEvalBefore).
	Before Metrics `json:"before"`
	After  Metrics `json:"after"`
	// Losses is the training loss of every step from the first, including
	// those of the run before a resume.
	Losses      []float32 `json:"losses"`
	ResumedFrom int       `json:"resumed_from"`
	// Counts of what was trained on.
	TrainDialogues   int     `json:"train_dialogues"`
	HeldOutDialogues int     `json:"held_out_dialogues"`
	Instances        int     `json:"instances"`
	TokensPerSecond  float64 `json:"tokens_per_second"`
	// TrainedModel and Tokenizer are the trained model, for callers that go
	// on using it.
	TrainedModel *inference.Model     `json:"-"`
	Tokenizer    *inference.Tokenizer `json:"-"`
}

// TrainSFT fine-tunes the configured agent on dialogues (DESIGN.md §5):
// players are split into training and held-out ones, the starting model is
// evaluated, trained with AdamW (checkpointing to DataDir/RunID and
// resuming from there after a crash), evaluated again and, unless the gate
// refuses it, published to the registry with its manifest.
func TrainSFT(ctx context.Context, cfg SFTConfig, dialogues []schema.Dialogue, logger *slog.Logger) (*SFTResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RunID == "" {
		cfg.RunID = "sft-" + cfg.Model
	}
	train, heldOut := splitPlayers(dialogues, cfg.HeldOutShare, cfg.Seed)
	if len(train) == 0 || len(heldOut) == 0 {
		return nil, fmt.Errorf("train sft: %d training and %d held-out dialogues: %w", len(train), len(heldOut), errNoData)
	}
	res := &SFTResult{Role: cfg.Role, Model: cfg.Model, TrainDialogues: len(train), HeldOutDialogues: len(heldOut)}
	runDir := filepath.Join(cfg.DataDir, cfg.RunID)
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return nil, fmt.Errorf("train sft: %w", err)
	}

	ckpt, err := latestCheckpoint(runDir)
	if err != nil {
		return nil, fmt.Errorf("train sft: %w", err)
	}
	m, tok, hf, err := startingModel(ctx, cfg, runDir, ckpt, train, logger)
	if err != nil {
		return nil, fmt.Errorf("train sft: %w", err)
	}
	chat, err := inference.LoadChatFormat(runDir, tok)
	if err != nil {
		return nil, fmt.Errorf("train sft: %w", err)
	}
	prompt := npcPrompt{cards: cfg.NPCCards, defaultCard: cfg.DefaultCard, chat: chat}
	risks := simulator.TrainingRisks(train, cfg.MaxTurns)
	insts, err := buildInstances(cfg.Role, tok, cfg.UserAgent, prompt, train, risks, m.Config().MaxSeq, float32(cfg.DecisionWeight), cfg.SoftLabelDiagnostic)
	if err != nil {
		return nil, fmt.Errorf("train sft: %w", err)
	}
	res.Instances = len(insts)
	steps := cfg.Steps
	if steps == 0 {
		steps = cfg.Epochs * ((len(insts) + cfg.BatchSize - 1) / cfg.BatchSize)
	}
	tc := cfg.Train
	if tc.WarmupSteps == 0 {
		tc.WarmupSteps = int(cfg.WarmupShare * float64(steps))
	}
	if tc.Schedule == "cosine" && tc.TotalSteps == 0 {
		tc.TotalSteps = steps
	}
	fp := fingerprint(cfg, tc, steps, insts)

	ev := evaluator{role: cfg.Role, cfg: cfg.Eval, ua: cfg.UserAgent, prompt: prompt, risks: risks, logger: logger, skipFidelity: cfg.FidelityByGate}
	demos := byPlayer(heldOut)
	if !cfg.SkipEvalBefore && ckpt == nil {
		if res.Before, err = ev.evaluate(ctx, m, tok, heldOut, demos); err != nil {
			return nil, fmt.Errorf("train sft: evaluate the starting model: %w", err)
		}
		logger.Info("sft: starting model evaluated", "role", cfg.Role, "ppl", res.Before.PPL, "rho", res.Before.Rho, "term_log_loss", res.Before.TermLogLoss)
	}

	run := &sftRun{cfg: cfg, tc: tc, steps: steps, insts: insts, m: m, runDir: runDir, fingerprint: fp, logger: logger, before: res.Before}
	if err := run.train(ctx, ckpt); err != nil {
		return nil, fmt.Errorf("train sft: %w", err)
	}
	res.Losses, res.ResumedFrom, res.TokensPerSecond = run.losses, run.resumedFrom, run.tokensPerSecond
	if !cfg.SkipEvalBefore && ckpt != nil {
		res.Before = run.before
	}
	if res.After, err = ev.evaluate(ctx, m, tok, heldOut, demos); err != nil {
		return nil, fmt.Errorf("train sft: evaluate the trained model: %w", err)
	}
	attrs := []any{"role", cfg.Role, "ppl", res.After.PPL}
	if cfg.Role == RoleUser && !cfg.FidelityByGate {
		attrs = append(attrs, "rho", res.After.Rho, "term_log_loss", res.After.TermLogLoss)
	}
	logger.Info("sft: trained model evaluated", attrs...)
	res.TrainedModel, res.Tokenizer = m, tok

	publish := cfg.Registry != ""
	var verdict GateVerdict
	if cfg.Gate != nil {
		if verdict, err = cfg.Gate(ctx, res.Before, res.After, m, tok); err != nil {
			return nil, fmt.Errorf("train sft: gate: %w", err)
		}
		publish, res.GateReason = verdict.Publish && cfg.Registry != "", verdict.Reason
	}
	if !publish {
		logger.Info("sft: not published", "role", cfg.Role, "reason", res.GateReason)
		return res, nil
	}
	marker := filepath.Join(runDir, publishedFile)
	if raw, err := os.ReadFile(marker); err == nil {
		// This run was published before a restart: do not publish it twice.
		if err := json.Unmarshal(raw, &res.Manifest); err != nil {
			return nil, fmt.Errorf("train sft: read %q: %w", marker, err)
		}
		res.Published, res.Version = true, res.Manifest.Version
		return res, nil
	}
	man := schema.Manifest{
		Model: cfg.Model, Parent: cfg.Parent, Algorithm: "sft",
		Hyperparameters: hyperparameters(cfg, tc, steps),
		DataWindow:      dataWindow(train),
		Metrics:         res.After.Map(),
	}
	maps.Copy(man.Metrics, verdict.Metrics)
	if res.Manifest, err = publishModel(ctx, cfg.Registry, cfg.Version, cfg.DataDir, m, tok, hf, verdict.Files, man); err != nil {
		return nil, fmt.Errorf("train sft: %w", err)
	}
	res.Published, res.Version = true, res.Manifest.Version
	raw, err := json.Marshal(res.Manifest)
	if err != nil {
		return nil, fmt.Errorf("train sft: %w", err)
	}
	if err := atomicfile.Write(marker, raw, 0o644); err != nil {
		return nil, fmt.Errorf("train sft: %w", err)
	}
	logger.Info("sft: published", "model", cfg.Model, "version", res.Version)
	return res, nil
}

// startingModel loads the model a run starts from: the run's own
// tokenizer and architecture when resuming (the weights come from the
// checkpoint), else the parent version, else a fresh model with a
// tokenizer trained on the training dialogues. It saves the tokenizer
// into the run directory, and the HFFiles of an NPC parent imported from
// Hugging Face (its chat template among them), which it returns. A
// user-agent parent imported from Hugging Face gets Parley's tokens
// (inference.WithParleyTokens) instead.
func startingModel(ctx context.Context, cfg SFTConfig, runDir string, ckpt *checkpoint, train []schema.Dialogue, logger *slog.Logger) (*inference.Model, *inference.Tokenizer, inference.HFFiles, error) {
	tokPath := filepath.Join(runDir, inference.TokenizerFile)
	if ckpt != nil {
		tok, err := inference.LoadTokenizer(tokPath)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("resume: %w", err)
		}
		hf, err := inference.ReadHFFiles(runDir)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("resume: %w", err)
		}
		m, err := inference.NewModel(ckpt.Arch, cfg.Backend, int64(cfg.Seed))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("resume: %w", err)
		}
		return m, tok, hf, nil
	}
	var m *inference.Model
	var tok *inference.Tokenizer
	var hf inference.HFFiles
	if cfg.Parent != "" {
		parent := filepath.Join(cfg.Registry, cfg.Model, cfg.Parent)
		var err error
		if m, tok, _, err = inference.LoadCheckpoint(parent, cfg.Backend); err != nil {
			return nil, nil, nil, fmt.Errorf("load parent %s/%s: %w", cfg.Model, cfg.Parent, err)
		}
		if hf, err = inference.ReadHFFiles(parent); err != nil {
			return nil, nil, nil, fmt.Errorf("load parent %s/%s: %w", cfg.Model, cfg.Parent, err)
		}
		if cfg.Role == RoleUser {
			// The user agent's prompts are in Parley's layout: an imported
			// parent gains its tokens and leaves its chat template behind.
			if m, tok, err = inference.WithParleyTokens(m, tok); err != nil {
				return nil, nil, nil, fmt.Errorf("load parent %s/%s: %w", cfg.Model, cfg.Parent, err)
			}
			hf = nil
		}
	} else {
		texts := []string{cfg.DefaultCard, cfg.UserAgent.DemoHeader, cfg.UserAgent.CurrentHeader, "[End Risk: 0.00]"}
		for _, c := range cfg.NPCCards {
			texts = append(texts, c)
		}
		for _, d := range train {
			for _, x := range d.Exchanges {
				texts = append(texts, x.User, x.NPC)
			}
		}
		var err error
		if tok, err = inference.TrainTokenizer(texts, cfg.VocabSize); err != nil {
			return nil, nil, nil, fmt.Errorf("train tokenizer: %w", err)
		}
		arch := cfg.Arch
		arch.VocabSize = tok.VocabSize()
		if m, err = inference.NewModel(arch, cfg.Backend, int64(cfg.Seed)); err != nil {
			return nil, nil, nil, err
		}
		logger.Info("sft: fresh model", "params", arch.Params(), "vocab", arch.VocabSize)
	}
	if err := tok.Save(tokPath); err != nil {
		return nil, nil, nil, err
	}
	if err := hf.Write(runDir); err != nil {
		return nil, nil, nil, err
	}
	return m, tok, hf, ctx.Err()
}

// sftRun is the training loop of one run.
type sftRun struct {
	cfg         SFTConfig
	tc          inference.TrainConfig
	steps       int
	insts       []instance
	m           *inference.Model
	runDir      string
	fingerprint string
	logger      *slog.Logger

	losses          []float32
	tokens          int64 // tokens trained on (padding aside), over the whole run
	resumedFrom     int
	tokensPerSecond float64
	before          Metrics
	order           map[int][]int // instance order per epoch

	// The run's trainer: native, or GoMLX's graph when native is nil.
	trainer string
	native  *inference.NativeTrainer
	gomlx   *inference.Trainer
}

// checkpoint is a saved run: every variable of the model and its AdamW
// state, and where the run was. The GoMLX trainer's AdamW state is among
// Vars; the native trainer's is Native. Trainer is empty in checkpoints
// written before there were two trainers: they are GoMLX's.
type checkpoint struct {
	Step        int
	Fingerprint string
	Arch        inference.ModelConfig
	Losses      []float32
	Tokens      int64
	Before      Metrics
	Vars        []savedVar
	Trainer     string
	Native      *inference.NativeTrainerState
}

type savedVar struct {
	Scope, Name string
	Dims        []int
	Data        []float32
}

// Files of a run directory besides the checkpoints and the tokenizer.
const (
	checkpointPrefix = "ckpt-"
	// publishedFile holds the manifest of the version a finished run
	// published.
	publishedFile = "published.json"
)

func (r *sftRun) train(ctx context.Context, ckpt *checkpoint) error {
	var err error
	if r.trainer, err = inference.ResolveTrainer(r.cfg.Trainer, r.m.BackendConfig()); err != nil {
		return err
	}
	var trainStep func(inference.Batch) (float32, error)
	if r.trainer == inference.TrainerNative {
		if r.native, err = inference.NewNativeTrainer(r.m, r.tc); err != nil {
			return err
		}
		defer r.native.Close()
		trainStep = r.native.Step
	} else {
		if r.gomlx, err = inference.NewTrainer(r.m, r.tc); err != nil {
			return err
		}
		trainStep = r.gomlx.Step
	}
	start := 0
	if ckpt != nil {
		if ckpt.Fingerprint != r.fingerprint {
			return fmt.Errorf("resume %s at step %d: %w", r.runDir, ckpt.Step, ErrRunMismatch)
		}
		if err := r.restore(ckpt); err != nil {
			return err
		}
		start, r.losses, r.tokens, r.before = ckpt.Step, ckpt.Losses, ckpt.Tokens, ckpt.Before
		r.resumedFrom = start
		r.logger.Info("sft: resumed from checkpoint", "step", start, "run", r.runDir)
	}
	bar := progress.New(r.cfg.Progress, "sft "+string(r.cfg.Role), "step", r.steps)
	bar.Resume(start)
	began := time.Now()
	var runTokens int64
	for step := start; step < r.steps; step++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := r.batch(step)
		loss, err := trainStep(b)
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		var n int64
		for _, seq := range b.Tokens {
			n += int64(len(seq))
		}
		r.losses = append(r.losses, loss)
		r.tokens += n
		runTokens += n
		r.tokensPerSecond = float64(runTokens) / time.Since(began).Seconds()
		bar.Describe(fmt.Sprintf("sft %s loss %.3f %5.0f tok/s", r.cfg.Role, loss, r.tokensPerSecond))
		bar.Add(1)
		done := step + 1
		if done%r.cfg.CheckpointEvery == 0 || done == r.steps {
			if err := r.save(done); err != nil {
				return err
			}
			r.logger.Info("sft: checkpoint", "step", done, "loss", loss, "tokens_per_s", r.tokensPerSecond)
		}
		if r.cfg.afterStep != nil {
			if err := r.cfg.afterStep(done); err != nil {
				return err
			}
		}
	}
	bar.Finish()
	return nil
}

// batch returns the batch of a step: each epoch visits every instance once
// in a seeded order, sorted by length within windows of 8 batches so that
// a batch pads little. The same step always gets the same batch.
func (r *sftRun) batch(step int) inference.Batch {
	bs := min(r.cfg.BatchSize, len(r.insts))
	perEpoch := (len(r.insts) + bs - 1) / bs
	epoch, k := step/perEpoch, step%perEpoch
	if r.order == nil {
		r.order = map[int][]int{}
	}
	order, ok := r.order[epoch]
	if !ok {
		rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(epoch)+1))
		order = rng.Perm(len(r.insts))
		win := 8 * bs
		for i := 0; i < len(order); i += win {
			w := order[i:min(i+win, len(order))]
			slices.SortStableFunc(w, func(a, b int) int { return cmp.Compare(len(r.insts[a].tokens), len(r.insts[b].tokens)) })
		}
		// Shuffle whole batches so that lengths do not rise through an epoch.
		var batches [][]int
		for i := 0; i < len(order); i += bs {
			batches = append(batches, order[i:min(i+bs, len(order))])
		}
		rng.Shuffle(len(batches), func(i, j int) { batches[i], batches[j] = batches[j], batches[i] })
		order = slices.Concat(batches...)
		r.order = map[int][]int{epoch: order}
	}
	var b inference.Batch
	for _, i := range order[k*bs : min((k+1)*bs, len(order))] {
		b.Tokens = append(b.Tokens, r.insts[i].tokens)
		b.Weights = append(b.Weights, r.insts[i].weights)
	}
	return b
}

// save writes a checkpoint atomically and removes the oldest beyond
// KeepCheckpoints.
func (r *sftRun) save(step int) error {
	ck := checkpoint{Step: step, Fingerprint: r.fingerprint, Arch: r.m.Config(), Losses: r.losses, Tokens: r.tokens, Before: r.before, Trainer: r.trainer}
	if r.native != nil {
		st := r.native.State()
		ck.Native = &st
	}
	for v := range r.m.Context().IterVariables() {
		if !strings.HasPrefix(v.Scope(), "/model") && !strings.HasPrefix(v.Scope(), "/adamw") {
			continue
		}
		t, err := v.Value()
		if err != nil {
			return fmt.Errorf("checkpoint %s/%s: %w", v.Scope(), v.Name(), err)
		}
		data, err := tensors.CopyFlatData[float32](t)
		if err != nil {
			return fmt.Errorf("checkpoint %s/%s: %w", v.Scope(), v.Name(), err)
		}
		ck.Vars = append(ck.Vars, savedVar{Scope: v.Scope(), Name: v.Name(), Dims: t.Shape().Dimensions, Data: data})
	}
	path := filepath.Join(r.runDir, fmt.Sprintf("%s%08d.gob", checkpointPrefix, step))
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return fmt.Errorf("checkpoint step %d: %w", step, err)
	}
	werr := gob.NewEncoder(f).Encode(&ck)
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("checkpoint step %d: %w", step, err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("checkpoint step %d: %w", step, err)
	}
	if err := atomicfile.SyncDir(r.runDir); err != nil {
		return fmt.Errorf("checkpoint step %d: %w", step, err)
	}
	steps, err := checkpointSteps(r.runDir)
	if err != nil {
		return err
	}
	for _, s := range steps[:max(0, len(steps)-r.cfg.KeepCheckpoints)] {
		_ = os.Remove(filepath.Join(r.runDir, fmt.Sprintf("%s%08d.gob", checkpointPrefix, s)))
	}
	return nil
}

// restore puts a checkpoint's variables into the model and its optimiser
// state into the trainer. The native trainer takes its state as it was;
// GoMLX's Trainer's own step counter, which drives the learning-rate
// schedule, cannot be set through inference's API, so it is advanced first
// by steps whose loss has no weight, and every variable they touched is
// then overwritten from the checkpoint: the resumed run continues exactly
// where the saved one was.
func (r *sftRun) restore(ck *checkpoint) error {
	if saved := cmp.Or(ck.Trainer, inference.TrainerGoMLX); saved != r.trainer {
		return fmt.Errorf("resume %s at step %d: saved by the %s trainer, this run uses %s: %w", r.runDir, ck.Step, saved, r.trainer, ErrRunMismatch)
	}
	if r.native != nil {
		if ck.Native == nil {
			return fmt.Errorf("resume %s at step %d: no native trainer state: %w", r.runDir, ck.Step, ErrRunMismatch)
		}
		if err := r.native.SetState(*ck.Native); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
	}
	noop := inference.Batch{Tokens: [][]int{{0, 0}}, Weights: [][]float32{{0, 0}}}
	for r.gomlx != nil && r.gomlx.Steps() < ck.Step {
		if _, err := r.gomlx.Step(noop); err != nil {
			return fmt.Errorf("resume: advance the schedule: %w", err)
		}
	}
	ctx := r.m.Context()
	for _, sv := range ck.Vars {
		v := ctx.GetVariableByScopeAndName(sv.Scope, sv.Name)
		if v == nil {
			return fmt.Errorf("resume: variable %s/%s is not in the model: %w", sv.Scope, sv.Name, ErrRunMismatch)
		}
		if err := v.SetValue(tensors.FromFlatDataAndDimensions(sv.Data, sv.Dims...)); err != nil {
			return fmt.Errorf("resume: set %s/%s: %w", sv.Scope, sv.Name, err)
		}
	}
	return nil
}

// checkpointSteps lists the steps of the run's checkpoints, ascending.
func checkpointSteps(runDir string) ([]int, error) {
	ents, err := os.ReadDir(runDir)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, checkpointPrefix) || !strings.HasSuffix(name, ".gob") {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(name, checkpointPrefix), ".gob"))
		if err == nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// latestCheckpoint reads the run's latest checkpoint, or returns nil when
// it has none.
func latestCheckpoint(runDir string) (*checkpoint, error) {
	steps, err := checkpointSteps(runDir)
	if err != nil || len(steps) == 0 {
		return nil, err
	}
	path := filepath.Join(runDir, fmt.Sprintf("%s%08d.gob", checkpointPrefix, steps[len(steps)-1]))
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ck checkpoint
	if err := gob.NewDecoder(f).Decode(&ck); err != nil {
		return nil, fmt.Errorf("read checkpoint %q: %w", path, err)
	}
	return &ck, nil
}

// fingerprint identifies a run by its settings and data, so that a resume
// never continues another run's checkpoints.
func fingerprint(cfg SFTConfig, tc inference.TrainConfig, steps int, insts []instance) string {
	h := sha256.New()
	meta, _ := json.Marshal(struct {
		Role          Role
		Model, Parent string
		Train         inference.TrainConfig
		Steps, Batch  int
		Seed          uint64
		Instances     int
		Arch          inference.ModelConfig
	}{cfg.Role, cfg.Model, cfg.Parent, tc, steps, cfg.BatchSize, cfg.Seed, len(insts), cfg.Arch})
	h.Write(meta)
	for _, in := range insts {
		for _, t := range in.tokens {
			fmt.Fprintf(h, "%d,", t)
		}
		h.Write([]byte{';'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

func hyperparameters(cfg SFTConfig, tc inference.TrainConfig, steps int) map[string]any {
	return map[string]any{
		"role": string(cfg.Role), "steps": steps, "batch_size": cfg.BatchSize, "learning_rate": tc.LearningRate,
		"warmup_steps": tc.WarmupSteps, "schedule": tc.Schedule, "weight_decay": tc.WeightDecay,
		"clip_norm": tc.ClipNorm, "held_out_share": cfg.HeldOutShare, "seed": cfg.Seed, "max_turns": cfg.MaxTurns,
		"decision_weight": cfg.DecisionWeight,
	}
}

// dataWindow spans the dialogues' start and end times.
func dataWindow(ds []schema.Dialogue) *schema.DataWindow {
	w := &schema.DataWindow{Sessions: len(ds)}
	for _, d := range ds {
		if w.From.IsZero() || d.Started.Before(w.From) {
			w.From = d.Started
		}
		end := d.Ended
		if end.IsZero() {
			end = d.Started
		}
		if end.After(w.To) {
			w.To = end
		}
	}
	return w
}

// publishModel saves m as a new version of man.Model in the registry at
// root: version, or the next free "vN" when empty. hf are the files of an
// imported model's checkpoint the version carries (nil for Parley's own).
func publishModel(ctx context.Context, root, version, scratch string, m *inference.Model, tok *inference.Tokenizer, hf inference.HFFiles, files map[string][]byte, man schema.Manifest) (schema.Manifest, error) {
	reg, err := registry.NewLocal(root)
	if err != nil {
		return schema.Manifest{}, err
	}
	if version == "" {
		if version, err = registry.NextVersion(ctx, reg, man.Model); err != nil {
			return schema.Manifest{}, err
		}
	}
	man.Version = version
	tmp, err := os.MkdirTemp(scratch, "publish-")
	if err != nil {
		return schema.Manifest{}, fmt.Errorf("publish %s/%s: %w", man.Model, version, err)
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, version)
	if err := inference.SaveImportedCheckpoint(dir, m, tok, hf, man); err != nil {
		return schema.Manifest{}, fmt.Errorf("publish %s/%s: %w", man.Model, version, err)
	}
	if err := addVersionFiles(dir, files); err != nil {
		return schema.Manifest{}, fmt.Errorf("publish %s/%s: %w", man.Model, version, err)
	}
	return reg.Publish(ctx, man.Model, version, dir)
}

// addVersionFiles writes files into the checkpoint in dir and lists them,
// with their sha256, in its manifest.
func addVersionFiles(dir string, files map[string][]byte) error {
	if len(files) == 0 {
		return nil
	}
	path := filepath.Join(dir, inference.ManifestFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var man schema.Manifest
	if err := json.Unmarshal(raw, &man); err != nil {
		return err
	}
	for name, data := range files {
		if filepath.Base(name) != name || man.Files[name] != "" {
			return fmt.Errorf("version file %q must be a new name inside the version", name)
		}
		file := filepath.Join(dir, name)
		if err := atomicfile.Write(file, data, 0o644); err != nil {
			return err
		}
		if man.Files[name], err = schema.FileSHA256(file); err != nil {
			return err
		}
	}
	if raw, err = json.MarshalIndent(man, "", "  "); err != nil {
		return err
	}
	return atomicfile.Write(path, append(raw, '\n'), 0o644)
}
