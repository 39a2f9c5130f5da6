package testenv

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/schema"
)

// TinyModelConfig is a model small enough to load, serve and train in a
// test in well under a second; its context fits the default persona card.
func TinyModelConfig(vocab int) inference.ModelConfig {
	return inference.ModelConfig{VocabSize: vocab, Dim: 32, Layers: 1, Heads: 2, FFNDim: 64, MaxSeq: 1024, RopeBase: 10000, NormEps: 1e-5}
}

// PublishTinyModel puts a randomly initialised tiny model into the registry
// at root as model/version: a real checkpoint, loaded and verified like any
// other.
func PublishTinyModel(t testing.TB, root, model, version string) schema.Manifest {
	t.Helper()
	tok, err := inference.TrainTokenizer([]string{"Hello traveller, the road north is long.", "Do you like fishing by the river?"}, 300)
	if err != nil {
		t.Fatal(err)
	}
	m, err := inference.NewModel(TinyModelConfig(tok.VocabSize()), inference.DefaultBackendConfig(), 7)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), version)
	if err := inference.SaveCheckpoint(dir, m, tok, schema.Manifest{Model: model, Version: version, Algorithm: "random-init"}); err != nil {
		t.Fatal(err)
	}
	reg, err := registry.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	man, err := reg.Publish(context.Background(), model, version, dir)
	if err != nil {
		t.Fatal(err)
	}
	return man
}
