package learner

import (
	"slices"
	"strings"
	"testing"

	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/simulator"
)

// TestUserInstancesTagDemosAsServing checks that a training instance shows
// its demos exactly as an RL-time prompt does (simulator.PromptDialogueOf
// with the training risks): the same [End Risk] tags in the same places.
func TestUserInstancesTagDemosAsServing(t *testing.T) {
	ds := generatedCorpus(t, 4, 3, 4, 2)
	tok := corpusTokenizer(t, ds)
	ua := simulator.DefaultUserAgentConfig()
	risks := simulator.TrainingRisks(ds, 4)
	players := byPlayer(ds)
	tagged := 0
	for _, d := range ds {
		demos := pickDemos(players[d.PlayerID], d)
		ins, err := userInstances(tok, ua, demos, d, risks, 4096)
		if err != nil {
			t.Fatal(err)
		}
		var served []simulator.PromptDialogue
		for _, x := range demos {
			served = append(served, simulator.PromptDialogueOf(x, risks))
		}
		prompt := ua.RenderUserAgentPrompt(served, simulator.PromptDialogue{Exchanges: d.Exchanges[:1]})
		wantDemos := prompt[:strings.Index(prompt, ua.CurrentHeader)]
		for j, in := range ins {
			text := tok.Decode(in.tokens)
			if got := text[:strings.Index(text, ua.CurrentHeader)]; got != wantDemos {
				t.Fatalf("%s turn %d: demos in training\n%s\nwant as served\n%s", d.SessionID, j+1, got, wantDemos)
			}
		}
		tagged += strings.Count(wantDemos, "[End Risk:")
	}
	if tagged == 0 {
		t.Error("no demo carried an [End Risk] tag")
	}
}

// TestNPCInstancesOpenAsServed: an NPC training dialogue under the default
// SFT configuration opens with the prompt the AT-GRPO cycle, and so the
// gateway (gateway's TestTheLearnerTrainsOnTheServedPrompt), gives the
// NPC's first reply: the card, the default persona's greeting and the
// player's opening, with no loss on any of it. An NPC with a card of its
// own has no known greeting and gets none.
func TestNPCInstancesOpenAsServed(t *testing.T) {
	ds := generatedCorpus(t, 2, 1, 3, 4)
	tok := corpusTokenizer(t, ds)
	d := ds[0]
	cc := DefaultCycleConfig()
	pol, err := rl.NewModelPolicy(nil, tok, 4096, cc.Policy)
	if err != nil {
		t.Fatal(err)
	}
	served, err := pol.Encode(rl.State{Prompt: &rl.Prompt{System: cc.DefaultCard, Greeting: cc.DefaultGreeting, Opening: d.Exchanges[0].User}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultSFTConfig(RoleNPC)
	in, err := cfg.npcPrompt(nil).instance(tok, d, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.tokens) <= len(served) || !slices.Equal(in.tokens[:len(served)], served) {
		t.Fatalf("the training dialogue opens\n%q\nnot as served\n%q", tok.Decode(in.tokens[:min(len(served), len(in.tokens))]), tok.Decode(served))
	}
	if i := slices.IndexFunc(in.weights[:len(served)], func(w float32) bool { return w != 0 }); i >= 0 {
		t.Errorf("loss on token %d of the served prompt", i)
	}
	if in.weights[len(served)] == 0 {
		t.Errorf("no loss on the NPC's first reply")
	}

	cfg.NPCCards = map[string]string{d.NPCID: "You are Brann, a smith."}
	if own := cfg.npcPrompt(nil).messages(d, 0, 0); len(own) != 1 || own[0].Text != "You are Brann, a smith." {
		t.Errorf("an NPC with its own card opens with %+v; want its card alone", own)
	}
}
