package simulator

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/parleyhq/parley/schema"
)

// TestLearnToneReadsUpsetPlayers logs sessions in which a player who says
// "ugh" quits after the next NPC turn four times as often as one who does
// not, whatever else they say: "ugh" gets a clear positive weight, the
// words every player says stay near zero, a word in too few messages gets
// none, and the turn's Tone is the summed weight of the last message.
func TestLearnToneReadsUpsetPlayers(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	topics := []string{"fishing is fun", "the forge is hot", "my cat sleeps", "bread and cheese"}
	var sessions []schema.Dialogue
	for i := range 600 {
		d := schema.Dialogue{SessionID: "s", PlayerID: "p", Reason: schema.EndMaxTurns}
		for k := range 8 {
			msg, h := topics[rng.IntN(len(topics))], 0.08
			if rng.IntN(4) == 0 {
				msg, h = "ugh "+msg, 0.32
			}
			if i < 4 && k == 0 {
				msg += " zephyr" // in four messages
			}
			d.Exchanges = append(d.Exchanges, schema.Exchange{User: msg, NPC: "I see."})
			if rng.Float64() < h {
				d.Reason = schema.EndPlayerEnded
				break
			}
		}
		sessions = append(sessions, d)
	}
	tone, err := LearnTone(sessions, 5)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ugh %.2f, fishing %.2f, cat %.2f, %d words", tone["ugh"], tone["fishing"], tone["cat"], len(tone))
	if w := tone["ugh"]; w < 1 || w > 2 { // log 4 ≈ 1.39 less the prior's pull
		t.Errorf("ugh weighs %.2f; want about log 4", w)
	}
	for _, w := range []string{"fishing", "forge", "cat", "bread", "is"} {
		if math.Abs(tone[w]) > 0.3 {
			t.Errorf("%q weighs %.2f; want about 0", w, tone[w])
		}
	}
	if _, ok := tone["zephyr"]; ok {
		t.Error("a word of fewer than 5 messages got a tone")
	}
	wt := &WordTopics{Tone: tone}
	f := wt.featuresOf(UserAgentQuery{Current: PromptDialogue{Exchanges: []schema.Exchange{
		{User: "ugh ugh my cat", NPC: "Hm."}, {User: "Ugh, the forge!", NPC: "Hot?"}}}})
	if want := tone["ugh"] + tone["the"] + tone["forge"]; math.Abs(f.Tone-want) > 1e-12 {
		t.Errorf("turn tone %.3f; want the last message's distinct words' %.3f", f.Tone, want)
	}
	for _, s := range []struct {
		name     string
		sessions []schema.Dialogue
		min      int
	}{{"no quits", sessions[:0], 5}, {"min messages 0", sessions, 0}} {
		if _, err := LearnTone(s.sessions, s.min); err == nil {
			t.Errorf("%s: learned a tone", s.name)
		}
	}
}
