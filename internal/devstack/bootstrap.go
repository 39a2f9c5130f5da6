package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/learner"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// BootstrapConfig sizes the first NPC policy and user agent that `parley
// dev` trains when the registry has none: generated corpora and short SFT
// runs, cached under the data dir so a second start skips them and an
// interrupted one resumes.
type BootstrapConfig struct {
	// Players and DialoguesPerPlayer size the user agent's corpus: the
	// population talking to scripted NPCs of every quality, so that it
	// learns how players answer good and bad replies alike.
	Players            int
	DialoguesPerPlayer int
	// NPCPlayers, NPCDialoguesPerPlayer, NPCQualities and NPCScript make
	// the NPC's corpus: players of the same population seed talking to the
	// scripted NPCs the policy should imitate, with their lines.
	NPCPlayers            int
	NPCDialoguesPerPlayer int
	NPCQualities          []simulator.QualityWeight
	NPCScript             simulator.ScriptConfig
	// NPCTrain, NPCSteps and NPCBatchSize are the NPC run's optimizer and
	// length; the user agent keeps the SFT default optimizer and runs
	// Steps steps of BatchSize.
	NPCTrain     inference.TrainConfig
	NPCSteps     int
	NPCBatchSize int
	Steps        int
	BatchSize    int
	Seed         uint64
	// Arch is the size of both models (VocabSize is the tokenizer's).
	Arch inference.ModelConfig
}

// DefaultBootstrapConfig takes a few minutes on 2 cores with the native
// trainer: ~1M-parameter models (the default architecture, d128, 4
// layers, with a 1,024-token vocabulary; 4 MB a checkpoint). The user
// agent trains 1,000 steps of 16 sequences (about 6,300 tokens a step,
// 6.3M in all), which it needs to rank an NPC's sibling turns at all
// (docs/experiments/README.md, "A repetition feature lets the referee
// rank siblings"); it is shipped trained (shipped), so a first start
// trains the NPC alone: 1,000 steps of 8 (about 3,800 tokens a step,
// 3.8M), because copying the player's word needs both optimizer steps and
// tokens ("How long the first NPC trains").
// The user agent learns from the ~1,900 dialogues of 600 generated players
// with scripted NPCs of mixed quality and is published calibrated, with
// word topics, on its held-out players' dialogues (learner.CalibratedGate).
// The NPC learns from ~1,900 dialogues of 300 players of the same seed
// with the good scripted NPC alone (from
// the mixed corpus it would learn the off-topic, filler and retention
// lines too), on lines that repeat the player's own word (BootstrapScript),
// at twice the SFT learning rate decaying to a tenth. It is a starting
// point for the learner; a studio bootstraps from its own corpus with
// `parley train sft`.
func DefaultBootstrapConfig() BootstrapConfig {
	arch := inference.DefaultModelConfig()
	arch.VocabSize = 1024
	npcTrain := learner.DefaultSFTConfig(learner.RoleNPC).Train
	npcTrain.LearningRate, npcTrain.Schedule = 2e-3, "cosine"
	return BootstrapConfig{Players: 600, DialoguesPerPlayer: 4,
		NPCPlayers: 300, NPCDialoguesPerPlayer: 8, NPCQualities: []simulator.QualityWeight{{Quality: simulator.NPCGood, Weight: 1}},
		NPCScript: BootstrapScript(), NPCTrain: npcTrain,
		NPCSteps: 1000, NPCBatchSize: 8, Steps: 1000, BatchSize: 16, Seed: 1, Arch: arch}
}

// BootstrapScript is the scripted NPC the bootstrap NPC imitates: the
// default lines without those a small model learns badly in a few
// minutes. Every line names the player's own word in lower case, so the
// model learns to copy a word of the player's message (no capitalised
// "{W}, you say.", whose rare tokens it broke into fragments, and no
// second word of the topic, which it drew from any topic), and it never
// slips into filler.
func BootstrapScript() simulator.ScriptConfig {
	s := simulator.DefaultScriptConfig()
	s.Acks = []string{"Ah, {w}!", "Oh, {w}.", "So it's {w} for you."}
	s.Statements = []string{
		"I know a thing or two about {w}.",
		"Folks around here talk about {w} a lot.",
		"The best {w} I ever saw was near the old mill.",
		"You need patience for {w}.",
	}
	s.Questions = []string{
		"What got you into {w}?",
		"How long have you been into {w}?",
		"Where do you usually go for {w}?",
		"Which {w} do you think is the best?",
		"What would make your {w} even better?",
	}
	s.SlipProb = 0
	return s
}

// Validate reports the first size that is not positive.
func (c BootstrapConfig) Validate() error {
	if c.Players < 5 || c.NPCPlayers < 5 || c.DialoguesPerPlayer < 3 || c.NPCDialoguesPerPlayer < 3 || c.Steps < 1 || c.BatchSize < 1 || c.NPCSteps < 1 || c.NPCBatchSize < 1 {
		return fmt.Errorf("dev bootstrap: players %d and for the npc %d (≥5), dialogues per player %d and for the npc %d (≥3), steps %d and batch size %d, for the npc %d and %d (≥1) are too small",
			c.Players, c.NPCPlayers, c.DialoguesPerPlayer, c.NPCDialoguesPerPlayer, c.Steps, c.BatchSize, c.NPCSteps, c.NPCBatchSize)
	}
	if err := c.corpus(learner.RoleNPC).Validate(); err != nil {
		return fmt.Errorf("dev bootstrap: npc corpus: %w", err)
	}
	return c.Arch.Validate()
}

// corpus returns the configuration of the corpus the agent of role
// learns from.
func (c BootstrapConfig) corpus(role learner.Role) simulator.CorpusConfig {
	cc := simulator.DefaultCorpusConfig()
	cc.Players, cc.DialoguesPerPlayer, cc.Seed = c.Players, c.DialoguesPerPlayer, c.Seed
	if role == learner.RoleNPC {
		cc.Players, cc.DialoguesPerPlayer, cc.Qualities, cc.Script = c.NPCPlayers, c.NPCDialoguesPerPlayer, c.NPCQualities, c.NPCScript
	}
	return cc
}

// corpusFile is the name of the cached corpus of role under the bootstrap
// directory.
func corpusFile(role learner.Role) string {
	if role == learner.RoleNPC {
		return "npc-corpus.jsonl"
	}
	return "corpus.jsonl"
}

// Bootstrap trains and publishes whichever of the two agents the registry
// lacks; the default recipe's user agent is shipped trained (shipped).
// progress receives the training progress (see learner.SFTConfig.Progress).
func Bootstrap(ctx context.Context, cfg BootstrapConfig, dataDir, registryDir string, progress io.Writer, log *slog.Logger) error {
	reg, err := registry.NewLocal(registryDir)
	if err != nil {
		return err
	}
	var missing []learner.Role
	for _, role := range []learner.Role{learner.RoleNPC, learner.RoleUser} {
		versions, err := reg.List(ctx, learner.DefaultSFTConfig(role).Model)
		if err != nil {
			return err
		}
		if len(versions) == 0 {
			missing = append(missing, role)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	dir := filepath.Join(dataDir, "bootstrap")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, role := range missing {
		if role == learner.RoleUser && cfg.shipsUserAgent() {
			err = publishShippedUserAgent(ctx, dir, registryDir, log)
		} else {
			err = trainBootstrapAgent(ctx, cfg, role, dir, registryDir, progress, log)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// trainBootstrapAgent trains the agent of role on its corpus (cached in
// dir) and publishes it to the registry.
func trainBootstrapAgent(ctx context.Context, cfg BootstrapConfig, role learner.Role, dir, registryDir string, progress io.Writer, log *slog.Logger) error {
	dialogues, err := bootstrapCorpus(ctx, cfg.corpus(role), filepath.Join(dir, corpusFile(role)), log)
	if err != nil {
		return err
	}
	sft := learner.DefaultSFTConfig(role)
	sft.Registry, sft.DataDir, sft.RunID = registryDir, filepath.Join(dir, "runs"), "bootstrap-"+string(role)
	sft.Steps, sft.BatchSize, sft.Seed, sft.Progress = cfg.Steps, cfg.BatchSize, cfg.Seed, progress
	sft.Arch, sft.VocabSize, sft.SkipEvalBefore = cfg.Arch, cfg.Arch.VocabSize, true
	sft.Eval.MaxDialogues, sft.Eval.MaxReplies = 16, 16 // a sanity check, not the fidelity report
	if role == learner.RoleNPC {
		sft.Train, sft.Steps, sft.BatchSize = cfg.NPCTrain, cfg.NPCSteps, cfg.NPCBatchSize
	} else {
		rc := learner.DefaultRefreshConfig()
		sft.Gate = learner.CalibratedGate(dialogues, sft, rc.WordTopics, rc.MinCalibrationDecisions, log)
	}
	log.Info("bootstrap: training the first version", "role", role, "steps", sft.Steps, "dialogues", len(dialogues))
	res, err := learner.TrainSFT(ctx, sft, dialogues, log)
	if err != nil {
		return fmt.Errorf("dev bootstrap %s: %w", role, err)
	}
	if !res.Published {
		return fmt.Errorf("dev bootstrap %s: not published: %s", role, res.GateReason)
	}
	log.Info("bootstrap: published", "model", res.Model, "version", res.Version, "ppl", res.After.PPL)
	return nil
}

// bootstrapCorpus reads the cached corpus or generates it.
func bootstrapCorpus(ctx context.Context, cc simulator.CorpusConfig, path string, log *slog.Logger) ([]schema.Dialogue, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		tmp := path + ".tmp"
		f, err := os.Create(tmp)
		if err != nil {
			return nil, err
		}
		stats, err := simulator.GenerateCorpus(ctx, cc, f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("dev bootstrap corpus: %w", err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return nil, err
		}
		log.Info("bootstrap: generated corpus", "path", path, "dialogues", stats.Dialogues, "avg_l", stats.AvgL)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return simulator.ReadCorpus(f)
}
