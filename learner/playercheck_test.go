package learner

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// TestCheckNPC trains a tiny NPC and checks what CheckNPC reports on a few
// held-out players and the README's typed conversations: counts that add
// up, intervals around their means, the paired difference of the two
// hazards, the typed messages in order, and the same report twice.
func TestCheckNPC(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model: skipped in -short")
	}
	ds := generatedCorpus(t, 12, 3, 4, 1)
	cfg := tinySFTConfig(t, RoleNPC)
	// The tiny tokenizer spells the card and greeting almost letter by
	// letter: about 320 tokens before the player's opening.
	cfg.Arch.MaxSeq = 512
	cfg.Registry = filepath.Join(cfg.DataDir, "registry")
	ctx := context.Background()
	res, err := TrainSFT(ctx, cfg, ds, nil)
	if err != nil {
		t.Fatal(err)
	}
	check := DefaultPlayerCheckConfig()
	check.Players, check.MaxTurns, check.Sampling.MaxTokens, check.Resamples, check.Samples, check.TypedRuns = 6, 2, 12, 100, 2, 3
	dir := filepath.Join(cfg.Registry, res.Model, res.Version)
	vocab := simulator.CorpusVocabulary(ds)
	got, err := CheckNPC(ctx, dir, vocab, check, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Players != 6 || got.Replies < 6 || got.Replies > 12 {
		t.Errorf("players %d, replies %d; want 6 players and 6 to 12 replies", got.Players, got.Replies)
	}
	flawed := 0
	for _, n := range got.Flaws {
		flawed += n
	}
	if want := float64(got.Replies-flawed) / float64(got.Replies); math.Abs(got.WellFormed.Mean-want) > 1e-12 {
		t.Errorf("well-formed share %g; want %g (%d replies, %d flawed)", got.WellFormed.Mean, want, got.Replies, flawed)
	}
	for name, iv := range map[string]Interval{"well-formed": got.WellFormed, "hazard": got.Hazard, "generic hazard": got.GenericHazard,
		"difference": got.HazardDiff, "on topic": got.OnTopic} {
		if iv.Low > iv.Mean || iv.Mean > iv.High {
			t.Errorf("%s: mean %g outside its interval [%g, %g]", name, iv.Mean, iv.Low, iv.High)
		}
	}
	if got.Hazard.Mean <= 0 || got.Hazard.Mean >= 1 || got.GenericHazard.Mean <= 0 || got.GenericHazard.Mean >= 1 {
		t.Errorf("hazards %g and %g; want both in (0, 1)", got.Hazard.Mean, got.GenericHazard.Mean)
	}
	if d := got.Hazard.Mean - got.GenericHazard.Mean; math.Abs(got.HazardDiff.Mean-d) > 1e-12 {
		t.Errorf("paired difference %g; want %g", got.HazardDiff.Mean, d)
	}
	if len(got.Samples) != 2 || len(got.Samples[0].Exchanges) == 0 {
		t.Fatalf("%d sample conversations; want 2, not empty", len(got.Samples))
	}
	typedFlawed := 0
	for _, n := range got.TypedFlaws {
		typedFlawed += n
	}
	if got.TypedReplies != 9 || math.Abs(got.TypedWellFormed.Mean-float64(9-typedFlawed)/9) > 1e-12 ||
		got.TypedWellFormed.Low > got.TypedWellFormed.Mean || got.TypedWellFormed.Mean > got.TypedWellFormed.High {
		t.Errorf("typed: %d replies, %d flawed, well-formed %s; want 9 replies (3 plays of 2 + 1 messages) and the share of the unflawed",
			got.TypedReplies, typedFlawed, got.TypedWellFormed)
	}
	if len(got.TypedSamples) != 2 {
		t.Fatalf("%d typed samples; want one of each conversation", len(got.TypedSamples))
	}
	for i, d := range got.TypedSamples {
		var said []string
		for _, x := range d.Exchanges {
			said = append(said, x.User)
		}
		if !slices.Equal(said, READMEConversations[i].Messages) {
			t.Errorf("typed sample %d played %q; want %q", i, said, READMEConversations[i].Messages)
		}
	}
	again, err := CheckNPC(ctx, dir, vocab, check, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, got) {
		t.Errorf("a second check with the same seeds differs:\n%+v\n%+v", again, got)
	}
}

func TestBootstrapRatio(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	if got := bootstrapRatio(rng, []float64{2, 2, 2}, []float64{4, 4, 4}, 50); got != (Interval{0.5, 0.5, 0.5}) {
		t.Errorf("constant units: %v; want 0.5 [0.5, 0.5]", got)
	}
	got := bootstrapRatio(rng, []float64{0, 1, 0, 1, 0, 1, 0, 1}, nil, 2000)
	if got.Mean != 0.5 || got.Low >= 0.5 || got.High <= 0.5 || got.Low < 0 || got.High > 1 {
		t.Errorf("half ones: %v; want mean 0.5 inside a proper interval within [0, 1]", got)
	}
}

// TestPlayerCheckPromptsAsServed: the player check prompts the NPC with the
// default card and greeting in rl.Messages' layout, the one the gateway
// serves (gateway's TestTheLearnerTrainsOnTheServedPrompt).
func TestPlayerCheckPromptsAsServed(t *testing.T) {
	tok, err := inference.TrainTokenizer([]string{"hello there, any news about the bridge?"}, 300)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultPlayerCheckConfig()
	d := schema.Dialogue{Exchanges: []schema.Exchange{{User: "hello there", NPC: "well met"}, {User: "any news?"}}}
	got, err := npcPrompt{defaultCard: cfg.Card, greeting: cfg.Greeting}.generationPrompt(tok, d, 1, 4096)
	if err != nil {
		t.Fatal(err)
	}
	st := rl.State{Prompt: &rl.Prompt{System: inference.CompanionCard, Greeting: inference.CompanionGreeting, Opening: "hello there"},
		History: []rl.Exchange{{NPC: "well met", User: "any news?"}}}
	want, err := inference.ParleyChatFormat(tok).Encode(rl.Messages(st), true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("the player check's prompt\n%q\nis not the served one\n%q", tok.Decode(got), tok.Decode(want))
	}
}
