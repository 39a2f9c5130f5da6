package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/schema"
)

// TestOpenWeightsImport imports a checkpoint in the Hugging Face layout
// (grouped-query attention, q/k/v biases: a Qwen2 config.json) with a file
// beside it that is not part of the model, then loads the published
// version, and checks that a truncated weights file is refused.
func TestOpenWeightsImport(t *testing.T) {
	ctx := context.Background()
	tok, err := inference.TrainTokenizer([]string{"Hello traveller, the road north is long.", "Do you like fishing by the river?"}, 300)
	if err != nil {
		t.Fatal(err)
	}
	cfg := inference.ModelConfig{VocabSize: tok.VocabSize(), Dim: 32, Layers: 1, Heads: 4, KVHeads: 2, FFNDim: 64,
		MaxSeq: 128, RopeBase: 10000, NormEps: 1e-5, QKVBias: true}
	m, err := inference.NewModel(cfg, inference.DefaultBackendConfig(), 7)
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "qwen-tiny")
	if err := inference.SaveCheckpoint(src, m, tok, schema.Manifest{Model: "src", Version: "v0", Algorithm: "random-init"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "README.md"), []byte("model card\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	regDir := t.TempDir()
	out, err := run(ctx, "models", "import", src, "--name", "npc", "--registry", regDir)
	if err != nil {
		t.Fatalf("models import: %v\n%s", err, out)
	}
	if !strings.Contains(out, "published npc/v1: 3 files") {
		t.Fatalf("output %q; want npc/v1 with config, tokenizer and weights", out)
	}
	reg, err := registry.NewLocal(regDir)
	if err != nil {
		t.Fatal(err)
	}
	got, _, man, err := inference.LoadCheckpoint(reg.Dir("npc", "v1"), inference.DefaultBackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	if man.Algorithm != "import" || got.Config().KVHeadCount() != 2 || !got.Config().QKVBias {
		t.Fatalf("published %+v with config %+v", man, got.Config())
	}
	if out, err := run(ctx, "models", "import", src, "--name", "npc", "--registry", regDir); err != nil || !strings.Contains(out, "npc/v2") {
		t.Fatalf("second import: %v, %q; want npc/v2", err, out)
	}

	weights := filepath.Join(src, inference.WeightsFile)
	raw, err := os.ReadFile(weights)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(weights, raw[:len(raw)-8], 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = run(ctx, "models", "import", src, "--name", "npc", "--registry", regDir)
	if err == nil || !strings.Contains(err.Error(), inference.WeightsFile) {
		t.Fatalf("import of a truncated shard: %v, %q; want an error naming %s", err, out, inference.WeightsFile)
	}
	if _, err := reg.Manifest(ctx, "npc", "v3"); err == nil {
		t.Fatal("the refused import was published as v3")
	}
}
