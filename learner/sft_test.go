package learner

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// generatedCorpus plays a small seeded population against the scripted
// NPCs and returns the dialogues.
func generatedCorpus(t testing.TB, players, perPlayer, maxTurns int, seed uint64) []schema.Dialogue {
	t.Helper()
	cfg := simulator.DefaultCorpusConfig()
	cfg.Players, cfg.DialoguesPerPlayer, cfg.MaxTurns, cfg.Seed, cfg.IncludeHeldOut = players, perPlayer, maxTurns, seed, true
	var buf bytes.Buffer
	if _, err := simulator.GenerateCorpus(context.Background(), cfg, &buf); err != nil {
		t.Fatalf("GenerateCorpus: %v", err)
	}
	ds, err := simulator.ReadCorpus(&buf)
	if err != nil {
		t.Fatalf("ReadCorpus: %v", err)
	}
	return ds
}

// tinySFTConfig is a model and run small enough for the default test run.
func tinySFTConfig(t testing.TB, role Role) SFTConfig {
	cfg := DefaultSFTConfig(role)
	cfg.Arch.Dim, cfg.Arch.Layers, cfg.Arch.Heads, cfg.Arch.FFNDim, cfg.Arch.MaxSeq = 32, 2, 2, 64, 384
	cfg.VocabSize = 400
	cfg.DataDir = t.TempDir()
	cfg.Steps, cfg.BatchSize, cfg.CheckpointEvery = 8, 4, 3
	cfg.Train.LearningRate = 3e-3
	cfg.HeldOutShare = 0.25
	cfg.MaxTurns = 4
	cfg.SkipEvalBefore = true
	cfg.Eval = EvalConfig{MaxDialogues: 2, MaxReplies: 2, ReplyTokens: 4, MaxTurns: 4, ScoreBatch: 4, Seed: 1}
	return cfg
}

var errStop = errors.New("simulated crash")

// TestSFTResumeContinuesLossCurve crashes a run after step 5, resumes it
// from its step-3 checkpoint and checks that the losses of the resumed run
// are exactly those of a run that never stopped; the finished run is
// published with its manifest.
func TestSFTResumeContinuesLossCurve(t *testing.T) {
	if testing.Short() {
		t.Skip("trains three models: skipped in -short")
	}
	ds := generatedCorpus(t, 12, 3, 4, 1)
	ctx := context.Background()

	whole := tinySFTConfig(t, RoleUser)
	want, err := TrainSFT(ctx, whole, ds, nil)
	if err != nil {
		t.Fatalf("uninterrupted run: %v", err)
	}
	if len(want.Losses) != whole.Steps {
		t.Fatalf("uninterrupted run has %d losses; want %d", len(want.Losses), whole.Steps)
	}

	cfg := tinySFTConfig(t, RoleUser)
	cfg.Registry = filepath.Join(cfg.DataDir, "registry")
	crashing := cfg
	crashing.afterStep = func(step int) error {
		if step == 5 {
			return errStop
		}
		return nil
	}
	if _, err := TrainSFT(ctx, crashing, ds, nil); !errors.Is(err, errStop) {
		t.Fatalf("crashing run returned %v; want the simulated crash", err)
	}
	var progress bytes.Buffer
	cfg.Progress = &progress
	got, err := TrainSFT(ctx, cfg, ds, nil)
	if err != nil {
		t.Fatalf("resumed run: %v", err)
	}
	if got.ResumedFrom != 3 {
		t.Errorf("resumed from step %d; want the step-3 checkpoint", got.ResumedFrom)
	}
	if len(got.Losses) != len(want.Losses) {
		t.Fatalf("resumed run has %d losses; want %d", len(got.Losses), len(want.Losses))
	}
	for i := range want.Losses {
		if got.Losses[i] != want.Losses[i] {
			t.Errorf("loss at step %d = %.6f after resume; want %.6f as without the crash", i+1, got.Losses[i], want.Losses[i])
		}
	}
	if !bytes.Contains(progress.Bytes(), []byte("tok/s")) {
		t.Errorf("progress output %q shows no tokens/s", progress.String())
	}

	if !got.Published || got.Version != "v1" {
		t.Fatalf("published %v as %q; want v1", got.Published, got.Version)
	}
	again, err := TrainSFT(ctx, cfg, ds, nil)
	if err != nil || again.Version != "v1" {
		t.Errorf("rerun of the finished run = %q, %v; want v1 again, not a second version", again.Version, err)
	}
	if got := registryVersions(t, cfg.Registry, cfg.Model); len(got) != 1 {
		t.Errorf("registry holds %v after a rerun; want only v1", got)
	}
	m, tok, man, err := inference.LoadCheckpoint(filepath.Join(cfg.Registry, cfg.Model, "v1"), inference.DefaultBackendConfig())
	if err != nil {
		t.Fatalf("load the published version: %v", err)
	}
	if man.Algorithm != "sft" || man.DataWindow == nil || man.DataWindow.Sessions != got.TrainDialogues || man.Metrics["ppl"] <= 0 {
		t.Errorf("manifest = %+v; want algorithm sft, a data window of %d sessions and a PPL", man, got.TrainDialogues)
	}
	if m.Config().VocabSize != tok.VocabSize() {
		t.Errorf("published model has vocab %d, tokenizer %d", m.Config().VocabSize, tok.VocabSize())
	}
}

func TestSFTRefusesAnotherRunsCheckpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model: skipped in -short")
	}
	ds := generatedCorpus(t, 12, 3, 4, 1)
	cfg := tinySFTConfig(t, RoleNPC)
	cfg.Steps = 3
	if _, err := TrainSFT(context.Background(), cfg, ds, nil); err != nil {
		t.Fatal(err)
	}
	cfg.Steps = 6
	other := cfg
	other.Trainer = inference.TrainerGoMLX
	if _, err := TrainSFT(context.Background(), other, ds, nil); !errors.Is(err, ErrRunMismatch) {
		t.Errorf("resume of a native run by the GoMLX trainer returned %v; want ErrRunMismatch", err)
	}
	cfg.Train.LearningRate = 1e-3
	if _, err := TrainSFT(context.Background(), cfg, ds, nil); !errors.Is(err, ErrRunMismatch) {
		t.Errorf("rerun with other settings in the same run dir returned %v; want ErrRunMismatch", err)
	}
}

// TestSFTResumeWithGoMLXTrainer is TestSFTResumeContinuesLossCurve's
// resume on the GoMLX trainer, whose AdamW state is in the model's context.
func TestSFTResumeWithGoMLXTrainer(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two models: skipped in -short")
	}
	ds := generatedCorpus(t, 12, 3, 4, 1)
	ctx := context.Background()
	whole := tinySFTConfig(t, RoleNPC)
	whole.Trainer, whole.Steps = inference.TrainerGoMLX, 6
	want, err := TrainSFT(ctx, whole, ds, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := tinySFTConfig(t, RoleNPC)
	cfg.Trainer, cfg.Steps = inference.TrainerGoMLX, 6
	crashing := cfg
	crashing.afterStep = func(step int) error {
		if step == 4 {
			return errStop
		}
		return nil
	}
	if _, err := TrainSFT(ctx, crashing, ds, nil); !errors.Is(err, errStop) {
		t.Fatalf("crashing run returned %v; want the simulated crash", err)
	}
	got, err := TrainSFT(ctx, cfg, ds, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.ResumedFrom != 3 || !slices.Equal(got.Losses, want.Losses) {
		t.Errorf("resumed from %d with losses %v; want from 3 with %v", got.ResumedFrom, got.Losses, want.Losses)
	}
}

// TestUserInstances checks the user-agent SFT instances of a dialogue:
// one per user turn, loss on that turn only, which opens with [Continue]
// or, for the final turn of a dialogue the player ended, [Terminate]; the
// NPC turns before the judged one carry [End Risk] values, the judged one
// none.
func TestUserInstances(t *testing.T) {
	ds := generatedCorpus(t, 4, 3, 4, 2)
	tok := corpusTokenizer(t, ds)
	user, _ := tok.TokenID(inference.TokUser)
	cont, _ := tok.TokenID(inference.TokContinue)
	term, _ := tok.TokenID(inference.TokTerminate)
	end, _ := tok.TokenID(inference.TokEnd)
	ua := simulator.DefaultUserAgentConfig()
	players := byPlayer(ds)
	for _, d := range ds {
		ins, err := userInstances(tok, ua, pickDemos(players[d.PlayerID], d), d, []float64{0.2, 0.4, 0.6}, 4096)
		if err != nil {
			t.Fatal(err)
		}
		want := len(d.Exchanges)
		if d.Reason.PlayerEnded() {
			want++
		}
		if len(ins) != want {
			t.Fatalf("%s (%d exchanges, %s): %d instances; want %d", d.SessionID, len(d.Exchanges), d.Reason, len(ins), want)
		}
		for j, in := range ins {
			spans := weightedSpans(in.weights)
			if len(spans) != 1 || spans[0][1] != len(in.tokens) {
				t.Errorf("%s turn %d: weighted spans %v of %d tokens; want one span at the end", d.SessionID, j+1, spans, len(in.tokens))
				continue
			}
			s := spans[0][0]
			decision := cont
			if j == len(d.Exchanges) {
				decision = term
			}
			if in.tokens[s] != user || in.tokens[s+1] != decision || in.tokens[len(in.tokens)-1] != end {
				t.Errorf("%s turn %d: weighted turn %v; want <|user|>, %s, ..., <|end|>", d.SessionID, j+1, in.tokens[s:], tok.Decode([]int{decision}))
			}
			text := tok.Decode(in.tokens)
			cur := text[strings.LastIndex(text, ua.CurrentHeader):]
			if got, wantTags := strings.Count(cur, "[End Risk:"), max(0, j-1); got != wantTags {
				t.Errorf("%s turn %d: %d [End Risk] tags in the current dialogue; want %d:\n%s", d.SessionID, j+1, got, wantTags, cur)
			}
		}
	}
}

// TestSFTLowersHeldOutPPL trains the tiny dialogue agent for a few dozen
// steps: the held-out NPC turns must become much more likely.
func TestSFTLowersHeldOutPPL(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model: skipped in -short")
	}
	ds := generatedCorpus(t, 16, 3, 4, 6)
	cfg := tinySFTConfig(t, RoleNPC)
	cfg.Steps, cfg.CheckpointEvery, cfg.SkipEvalBefore = 40, 40, false
	res, err := TrainSFT(context.Background(), cfg, ds, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("held-out NPC PPL %.1f → %.1f over %d tokens; loss %.3f → %.3f",
		res.Before.PPL, res.After.PPL, res.After.Tokens, res.Losses[0], res.Losses[len(res.Losses)-1])
	if res.After.PPL > 0.5*res.Before.PPL {
		t.Errorf("held-out PPL %.1f → %.1f; want at least halved", res.Before.PPL, res.After.PPL)
	}
}

// corpusTokenizer trains a 400-token tokenizer on ds's player and NPC
// turns.
func corpusTokenizer(t *testing.T, ds []schema.Dialogue) *inference.Tokenizer {
	t.Helper()
	var texts []string
	for _, d := range ds {
		for _, x := range d.Exchanges {
			texts = append(texts, x.User, x.NPC)
		}
	}
	tok, err := inference.TrainTokenizer(texts, 400)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
