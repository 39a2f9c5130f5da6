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
// dev` trains when the registry has none: a generated corpus and short SFT
// runs, cached under the data dir so a second start skips them and an
// interrupted one resumes.
type BootstrapConfig struct {
	Players            int
	DialoguesPerPlayer int
	Steps              int
	BatchSize          int
	Seed               uint64
	// Arch is the size of both models (VocabSize is the tokenizer's).
	Arch inference.ModelConfig
}

// DefaultBootstrapConfig takes a few minutes on 2 cores with the native
// trainer: a ~1M-parameter model (the default architecture, d128, 4
// layers, with a 1,024-token vocabulary; 4 MB a checkpoint) trained 250
// steps of 16 sequences (about 6,300 tokens a step, 1.6M tokens for each
// agent) on the ~940 dialogues of 300 generated players. It is a
// starting point for the learner, not a good NPC; a studio bootstraps from
// its own corpus with `parley train sft`.
func DefaultBootstrapConfig() BootstrapConfig {
	arch := inference.DefaultModelConfig()
	arch.VocabSize = 1024
	return BootstrapConfig{Players: 300, DialoguesPerPlayer: 4, Steps: 250, BatchSize: 16, Seed: 1, Arch: arch}
}

// Validate reports the first size that is not positive.
func (c BootstrapConfig) Validate() error {
	if c.Players < 5 || c.DialoguesPerPlayer < 3 || c.Steps < 1 || c.BatchSize < 1 {
		return fmt.Errorf("dev bootstrap: players %d (≥5), dialogues per player %d (≥3), steps %d and batch size %d (≥1) are too small",
			c.Players, c.DialoguesPerPlayer, c.Steps, c.BatchSize)
	}
	return c.Arch.Validate()
}

// bootstrap trains and publishes whichever of the two agents the registry
// lacks. progress receives the training progress (see learner.SFTConfig.Progress).
func bootstrap(ctx context.Context, cfg BootstrapConfig, dataDir, registryDir string, progress io.Writer, log *slog.Logger) error {
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
	dialogues, err := bootstrapCorpus(ctx, cfg, filepath.Join(dir, "corpus.jsonl"), log)
	if err != nil {
		return err
	}
	for _, role := range missing {
		sft := learner.DefaultSFTConfig(role)
		sft.Registry, sft.DataDir, sft.RunID = registryDir, filepath.Join(dir, "runs"), "bootstrap-"+string(role)
		sft.Steps, sft.BatchSize, sft.Seed, sft.Progress = cfg.Steps, cfg.BatchSize, cfg.Seed, progress
		sft.Arch, sft.VocabSize, sft.SkipEvalBefore = cfg.Arch, cfg.Arch.VocabSize, true
		sft.Eval.MaxDialogues, sft.Eval.MaxReplies = 16, 16 // a sanity check, not the fidelity report
		log.Info("bootstrap: training the first version", "role", role, "steps", sft.Steps, "dialogues", len(dialogues))
		res, err := learner.TrainSFT(ctx, sft, dialogues, log)
		if err != nil {
			return fmt.Errorf("dev bootstrap %s: %w", role, err)
		}
		if !res.Published {
			return fmt.Errorf("dev bootstrap %s: not published: %s", role, res.GateReason)
		}
		log.Info("bootstrap: published", "model", res.Model, "version", res.Version, "ppl", res.After.PPL)
	}
	return nil
}

// bootstrapCorpus reads the cached corpus or generates it.
func bootstrapCorpus(ctx context.Context, cfg BootstrapConfig, path string, log *slog.Logger) ([]schema.Dialogue, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		cc := simulator.DefaultCorpusConfig()
		cc.Players, cc.DialoguesPerPlayer, cc.Seed = cfg.Players, cfg.DialoguesPerPlayer, cfg.Seed
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
