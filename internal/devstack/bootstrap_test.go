package devstack

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/simulator"
)

// TestBootstrapTrainsBothAgentsOnce trains tiny bootstrap agents into an
// empty registry, the user agent calibrated with word topics, then checks
// a second start trains nothing.
func TestBootstrapTrainsBothAgentsOnce(t *testing.T) {
	dataDir := t.TempDir()
	regDir := filepath.Join(dataDir, "registry")
	cfg := DefaultBootstrapConfig()
	// Enough players that the held-out ones make 100 decisions.
	cfg.Players, cfg.NPCPlayers, cfg.DialoguesPerPlayer, cfg.NPCDialoguesPerPlayer = 120, 120, 3, 3
	cfg.Steps, cfg.BatchSize, cfg.NPCSteps, cfg.NPCBatchSize, cfg.Arch = 3, 2, 3, 2, testenv.TinyModelConfig(512)
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	if err := Bootstrap(ctx, cfg, dataDir, regDir, io.Discard, log); err != nil {
		t.Fatal(err)
	}
	reg, err := registry.NewLocal(regDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"npc", "user-agent"} {
		vs, err := reg.List(ctx, model)
		if err != nil || len(vs) != 1 {
			t.Fatalf("registry %s: %d versions, err %v; want 1", model, len(vs), err)
		}
		if vs[0].Algorithm != "sft" {
			t.Errorf("%s/%s algorithm %q; want sft", model, vs[0].Version, vs[0].Algorithm)
		}
	}
	uaDir := filepath.Join(regDir, "user-agent", "v1")
	_, _, man, err := inference.LoadCheckpoint(uaDir, inference.BackendConfig{})
	if err != nil {
		t.Fatal(err)
	}
	served, err := simulator.DefaultUserAgentConfig().ForVersion(uaDir, man)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := man.Metrics[simulator.MetricCalibrationScale]; !ok || served.WordTopics == nil || len(served.WordTopics.Words) == 0 {
		t.Errorf("user-agent/v1 serves calibration %+v with word topics %v; want one fitted on the corpus with topics learned from it", served.Calibration, served.WordTopics)
	}
	var corpora []string
	var before []os.FileInfo
	for _, name := range []string{"corpus.jsonl", "npc-corpus.jsonl"} {
		corpus := filepath.Join(dataDir, "bootstrap", name)
		fi, err := os.Stat(corpus)
		if err != nil {
			t.Fatalf("corpus not cached: %v", err)
		}
		corpora, before = append(corpora, corpus), append(before, fi)
	}

	if err := Bootstrap(ctx, cfg, dataDir, regDir, io.Discard, log); err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"npc", "user-agent"} {
		if vs, _ := reg.List(ctx, model); len(vs) != 1 {
			t.Errorf("after a second start %s has %d versions; want still 1", model, len(vs))
		}
	}
	for i, corpus := range corpora {
		if after, _ := os.Stat(corpus); !after.ModTime().Equal(before[i].ModTime()) {
			t.Errorf("the cached corpus %s was regenerated", corpus)
		}
	}
}

// TestBootstrapPublishesTheShippedUserAgent: with the default recipe a
// first start publishes the shipped user agent instead of training one
// (no corpus is generated for it), and the shipped one is that recipe's:
// its steps, batch and seed, its architecture, and a calibration fitted by
// today's code, repetition weight and word topics included.
func TestBootstrapPublishesTheShippedUserAgent(t *testing.T) {
	dataDir := t.TempDir()
	regDir := filepath.Join(dataDir, "registry")
	testenv.PublishTinyModel(t, regDir, "npc", "v1")
	cfg := DefaultBootstrapConfig()
	if err := Bootstrap(t.Context(), cfg, dataDir, regDir, io.Discard, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "bootstrap", "corpus.jsonl")); err == nil {
		t.Error("the user agent's corpus was generated; want the shipped agent published without training")
	}
	uaDir := filepath.Join(regDir, "user-agent", "v1")
	m, _, man, err := inference.LoadCheckpoint(uaDir, inference.BackendConfig{})
	if err != nil {
		t.Fatal(err)
	}
	hp := man.Hyperparameters
	if hp["steps"] != float64(cfg.Steps) || hp["batch_size"] != float64(cfg.BatchSize) || hp["seed"] != float64(cfg.Seed) || m.Config() != cfg.Arch {
		t.Errorf("shipped user agent: steps %v, batch %v, seed %v, architecture %+v; want the default recipe's %d, %d, %d, %+v (retrain it: make user-agent)",
			hp["steps"], hp["batch_size"], hp["seed"], m.Config(), cfg.Steps, cfg.BatchSize, cfg.Seed, cfg.Arch)
	}
	served, err := simulator.DefaultUserAgentConfig().ForVersion(uaDir, man)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := man.Metrics[simulator.MetricCalibrationRepeat]; !ok || served.Calibration.Repeat <= 0 || served.WordTopics == nil {
		t.Errorf("shipped user agent serves calibration %+v with word topics %v; want one with a positive repetition weight and topics (retrain it: make user-agent)",
			served.Calibration, served.WordTopics != nil)
	}
	other := cfg
	other.Steps = 250
	if other.shipsUserAgent() || !cfg.shipsUserAgent() {
		t.Error("another recipe counts as the shipped one, or the default does not")
	}
}

// TestTrainUserAgentWritesTheVersion trains a tiny user agent as the
// bootstrap would and writes its version directory, replacing the
// version that was there, which loads and carries its calibration; the
// work directory goes. A directory that holds no version is refused.
func TestTrainUserAgentWritesTheVersion(t *testing.T) {
	cfg := DefaultBootstrapConfig()
	cfg.Players, cfg.DialoguesPerPlayer, cfg.Steps, cfg.BatchSize, cfg.Arch = 120, 3, 3, 2, testenv.TinyModelConfig(512)
	dir := t.TempDir()
	out := filepath.Join(t.TempDir(), "useragent")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "stale.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := TrainUserAgent(t.Context(), cfg, dir, out, io.Discard, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("replaced a directory that holds no version")
	}
	if _, err := os.Stat(filepath.Join(out, "stale.json")); err != nil {
		t.Fatalf("the refused directory lost its contents: %v", err)
	}
	if err := os.WriteFile(filepath.Join(out, registry.ManifestFile), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := TrainUserAgent(t.Context(), cfg, dir, out, io.Discard, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	_, _, man, err := inference.LoadCheckpoint(out, inference.BackendConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if man.Model != "user-agent" || man.Version != "v1" || man.Hyperparameters["steps"] != float64(cfg.Steps) {
		t.Errorf("wrote %s/%s with steps %v; want user-agent/v1 with %d", man.Model, man.Version, man.Hyperparameters["steps"], cfg.Steps)
	}
	if _, ok := man.Metrics[simulator.MetricCalibrationRepeat]; !ok {
		t.Errorf("manifest metrics %v carry no calibration", man.Metrics)
	}
	if _, err := os.Stat(filepath.Join(out, "stale.json")); err == nil {
		t.Error("the old contents of out are still there")
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("the work directory left %d entries in %s", len(left), dir)
	}
}
