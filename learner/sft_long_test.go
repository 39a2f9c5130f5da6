//go:build long

// The training tests in this file take minutes on 2 cores; run them with
//
//	go test -tags long -run Long -timeout 60m -v ./learner/
package learner

import (
	"context"
	"os"
	"strings"
	"testing"
)

// smallSFTConfig is a ~0.2M-parameter model that trains at a few thousand
// tokens per second here: big enough to learn the generated players.
func smallSFTConfig(t *testing.T, role Role) SFTConfig {
	cfg := DefaultSFTConfig(role)
	cfg.Arch.Dim, cfg.Arch.Layers, cfg.Arch.Heads, cfg.Arch.FFNDim, cfg.Arch.MaxSeq = 64, 2, 2, 192, 512
	cfg.VocabSize = 768
	cfg.DataDir = t.TempDir()
	cfg.Steps, cfg.BatchSize, cfg.CheckpointEvery = 300, 8, 100
	cfg.Train.LearningRate = 3e-3
	cfg.Eval = EvalConfig{MaxDialogues: 80, MaxReplies: 80, ReplyTokens: 24, MaxTurns: 10, ScoreBatch: 8, Seed: 1}
	cfg.Progress = os.Stderr
	return cfg
}

func tableOf(t *testing.T, res *SFTResult) string {
	var b strings.Builder
	real := Metrics{PPL: 1, Dist1: res.After.RealDist1, Dist2: res.After.RealDist2, AvgWords: res.After.RealAvgWords,
		Rho: 1, RhoDefined: true, AvgL: res.After.RealAvgL, RealAvgL: res.After.RealAvgL}
	rows := []MetricsRow{{Name: "real (held-out)", Metrics: real}, {Name: "before SFT", Metrics: res.Before}, {Name: "after SFT", Metrics: res.After}}
	if err := WriteMetricsTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestLongSFTUserAgent trains the user agent on a generated corpus and
// checks that it predicts the held-out players' endings better than the
// untrained model and writes their turns with a much lower perplexity.
func TestLongSFTUserAgent(t *testing.T) {
	ds := generatedCorpus(t, 60, 5, 10, 1)
	res, err := TrainSFT(context.Background(), smallSFTConfig(t, RoleUser), ds, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("user agent, %d training / %d held-out dialogues, %d instances, %.0f tok/s, loss %.3f → %.3f\n%s",
		res.TrainDialogues, res.HeldOutDialogues, res.Instances, res.TokensPerSecond, res.Losses[0], res.Losses[len(res.Losses)-1], tableOf(t, res))
	if res.After.PPL > 0.5*res.Before.PPL {
		t.Errorf("held-out PPL %.2f → %.2f; want at least halved", res.Before.PPL, res.After.PPL)
	}
	if res.After.TermLogLoss >= res.Before.TermLogLoss {
		t.Errorf("termination log-loss %.4f → %.4f; want lower after SFT", res.Before.TermLogLoss, res.After.TermLogLoss)
	}
}

// TestLongSFTDialogueAgent trains the NPC on the same corpus and checks
// that held-out NPC-turn perplexity falls clearly.
func TestLongSFTDialogueAgent(t *testing.T) {
	ds := generatedCorpus(t, 60, 5, 10, 1)
	res, err := TrainSFT(context.Background(), smallSFTConfig(t, RoleNPC), ds, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dialogue agent, %d instances, %.0f tok/s\n%s", res.Instances, res.TokensPerSecond, tableOf(t, res))
	if res.After.PPL > 0.5*res.Before.PPL {
		t.Errorf("held-out PPL %.2f → %.2f; want at least halved", res.Before.PPL, res.After.PPL)
	}
}
