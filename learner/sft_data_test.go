package learner

import (
	"strings"
	"testing"

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
