package devstack

import (
	"context"
	"embed"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"

	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/learner"
)

// shipped holds the first user agent of DefaultBootstrapConfig's recipe,
// trained once (`make user-agent`, about 10 minutes on 2 cores) and
// published calibrated: a version directory, 4 MB. A first start
// publishes it instead of spending those minutes.
//
//go:embed useragent
var shipped embed.FS

// shippedDir is the directory of shipped that holds the user agent.
const shippedDir = "useragent"

// shipsUserAgent reports whether c's user agent is the shipped one: the
// default recipe's corpus, architecture and training.
func (c BootstrapConfig) shipsUserAgent() bool {
	d := DefaultBootstrapConfig()
	return c.Players == d.Players && c.DialoguesPerPlayer == d.DialoguesPerPlayer && c.Steps == d.Steps &&
		c.BatchSize == d.BatchSize && c.Seed == d.Seed && reflect.DeepEqual(c.Arch, d.Arch)
}

// publishShippedUserAgent publishes the shipped user agent to the registry
// in registryDir, staged under dir.
func publishShippedUserAgent(ctx context.Context, dir, registryDir string, log *slog.Logger) error {
	reg, err := registry.NewLocal(registryDir)
	if err != nil {
		return err
	}
	src, err := fs.Sub(shipped, shippedDir)
	if err != nil {
		return err
	}
	stage, err := os.MkdirTemp(dir, "shipped-user-agent-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	if err := os.CopyFS(stage, src); err != nil {
		return fmt.Errorf("dev bootstrap: stage the shipped user agent: %w", err)
	}
	man, err := reg.Publish(ctx, learner.DefaultSFTConfig(learner.RoleUser).Model, "v1", stage)
	if err != nil {
		return fmt.Errorf("dev bootstrap: publish the shipped user agent: %w", err)
	}
	log.Info("bootstrap: published the shipped user agent", "model", man.Model, "version", man.Version,
		"steps", man.Hyperparameters["steps"], "ppl", man.Metrics["ppl"])
	return nil
}

// TrainUserAgent trains the user agent of cfg's recipe as the bootstrap
// would, under a new directory in dir, and writes its version directory
// to out, replacing the version there: how the shipped one is made. It
// refuses an out that holds anything but a version directory, before it
// trains.
func TrainUserAgent(ctx context.Context, cfg BootstrapConfig, dir, out string, progress io.Writer, log *slog.Logger) error {
	if entries, err := os.ReadDir(out); err == nil && len(entries) > 0 {
		if _, err := os.Stat(filepath.Join(out, registry.ManifestFile)); err != nil {
			return fmt.Errorf("dev user-agent: %s is not empty and holds no %s: refusing to replace it", out, registry.ManifestFile)
		}
	}
	work, err := os.MkdirTemp(dir, "user-agent-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	registryDir := filepath.Join(work, "registry")
	if err := trainBootstrapAgent(ctx, cfg, learner.RoleUser, work, registryDir, progress, log); err != nil {
		return err
	}
	reg, err := registry.NewLocal(registryDir)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	return os.CopyFS(out, os.DirFS(reg.Dir(learner.DefaultSFTConfig(learner.RoleUser).Model, "v1")))
}
