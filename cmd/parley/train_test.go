package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestCorpusTrainEval runs the bootstrap path a studio would: generate a
// corpus, fine-tune the dialogue agent on it, evaluate the published version
// on the corpus and against held-out players.
func TestCorpusTrainEval(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the default-size model for a few steps (about a minute on 2 cores)")
	}
	dir := t.TempDir()
	corpus, reg := filepath.Join(dir, "corpus.jsonl"), filepath.Join(dir, "registry")
	ctx := context.Background()
	if _, err := run(ctx, "corpus", "gen", "--players", "10", "--dialogues-per-player", "3", "--out", corpus); err != nil {
		t.Fatal(err)
	}
	out, err := run(ctx, "train", "sft", "--corpus", corpus, "--role", "npc", "--registry", reg,
		"--data-dir", filepath.Join(dir, "runs"), "--steps", "3", "--batch-size", "2", "--log-level", "warn")
	if err != nil {
		t.Fatalf("train sft: %v\n%s", err, out)
	}
	if !strings.Contains(out, "published npc/v1") {
		t.Fatalf("train sft output lacks the published version:\n%s", out)
	}
	out, err = run(ctx, "eval", "--corpus", corpus, "--role", "npc", "--registry", reg, "--version", "v1",
		"--out", filepath.Join(dir, "eval.json"))
	if err != nil {
		t.Fatalf("eval: %v\n%s", err, out)
	}
	if !strings.Contains(out, "| npc/v1 |") {
		t.Errorf("eval output lacks the metrics row:\n%s", out)
	}
	out, err = run(ctx, "eval", "--corpus", corpus, "--role", "npc", "--registry", reg, "--version", "v1",
		"--players", "4", "--max-turns", "2", "--samples", "1")
	if err != nil {
		t.Fatalf("eval --players: %v\n%s", err, out)
	}
	for _, want := range []string{"on 4 held-out players", "well-formed replies", "scripted generic NPC", "player: "} {
		if !strings.Contains(out, want) {
			t.Errorf("eval --players output lacks %q:\n%s", want, out)
		}
	}
	if _, err := run(ctx, "eval", "--corpus", corpus, "--role", "npc", "--registry", reg, "--version", "v9"); err == nil {
		t.Error("eval of a missing version succeeded; want an error")
	}
}
