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
	cfg.Players, cfg.DialoguesPerPlayer, cfg.NPCDialoguesPerPlayer = 120, 3, 3
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
