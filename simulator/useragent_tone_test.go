package simulator

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/parleyhq/parley/schema"
)

// TestLearnToneReadsUpsetPlayers logs sessions in which a player who says
// "ugh" quits after the next NPC turn four times as often as one who does
// not, whatever else they say: "ugh" gets a clear positive weight, the
// words every player says stay near zero, a word in too few messages gets
// none, the turn's Tone is the summed weight of the last message and its
// PlayerTone the mean of the messages before it, the demos' first.
func TestLearnToneReadsUpsetPlayers(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	topics := []string{"fishing is fun", "the forge is hot", "my cat sleeps", "bread and cheese"}
	sessions := logSessions(rng, func(i, k int) (schema.Exchange, float64) {
		msg, h := topics[rng.IntN(len(topics))], 0.08
		if rng.IntN(4) == 0 {
			msg, h = "ugh "+msg, 0.32
		}
		if i < 4 && k == 0 {
			msg += " zephyr" // in four messages
		}
		return schema.Exchange{User: msg, NPC: "I see."}, h
	})
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
	q := UserAgentQuery{Current: PromptDialogue{Exchanges: []schema.Exchange{
		{User: "ugh ugh my cat", NPC: "Hm."}, {User: "Ugh, the forge!", NPC: "Hot?"}}}}
	f := wt.featuresOf(q)
	if want := tone["ugh"] + tone["the"] + tone["forge"]; math.Abs(f.Tone-want) > 1e-12 {
		t.Errorf("turn tone %.3f; want the last message's distinct words' %.3f", f.Tone, want)
	}
	if want := tone["ugh"] + tone["my"] + tone["cat"]; math.Abs(f.PlayerTone-want) > 1e-12 {
		t.Errorf("player tone %.3f; want the one message before the last's %.3f", f.PlayerTone, want)
	}
	q.Demos = []PromptDialogue{{Exchanges: []schema.Exchange{{User: "bread and cheese", NPC: "Yum."}, {User: "ugh", NPC: "Oh."}}}}
	demo := tone["bread"] + tone["and"] + tone["cheese"] + tone["ugh"]
	if f, want := wt.featuresOf(q), (demo+tone["ugh"]+tone["my"]+tone["cat"])/3; math.Abs(f.PlayerTone-want) > 1e-12 {
		t.Errorf("player tone with demos %.3f; want the mean of the demos' two messages and the first one's %.3f", f.PlayerTone, want)
	}
	q.Demos, q.Current.Exchanges = nil, q.Current.Exchanges[:1]
	if f := wt.featuresOf(q); f.PlayerTone != 0 || f.Tone == 0 {
		t.Errorf("a first message without demos: tone %.3f, player tone %.3f; want a tone and no player tone", f.Tone, f.PlayerTone)
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

// TestLearnWordingReadsTheNPCsLines logs sessions in which players quit
// after a retention line ("wait, don't rush off!") four times as often as
// after the NPC's other lines: its words get clear positive weights, the
// words of the other lines stay near zero, and a turn's Wording is the
// summed weight of its distinct words, 0 when the topics carry no wording.
func TestLearnWordingReadsTheNPCsLines(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	lines := []string{"The river is calm.", "Fish bite at dawn.", "I like bread.", "The forge is hot."}
	sessions := logSessions(rng, func(int, int) (schema.Exchange, float64) {
		npc, h := lines[rng.IntN(len(lines))], 0.08
		if rng.IntN(4) == 0 {
			npc, h = "Wait, don't rush off!", 0.32
		}
		return schema.Exchange{User: "tell me more", NPC: npc}, h
	})
	wording, err := LearnWording(sessions, 5)
	if err != nil {
		t.Fatal(err)
	}
	// The line's four words share its log 4 ≈ 1.39, less the prior's pull.
	if sum := wording["wait"] + wording["don't"] + wording["rush"] + wording["off"]; sum < 1 || sum > 2 {
		t.Errorf("the retention line weighs %.2f; want about log 4", sum)
	}
	for _, w := range []string{"river", "fish", "bread", "forge", "is"} {
		if math.Abs(wording[w]) > 0.3 {
			t.Errorf("%q weighs %.2f; want about 0", w, wording[w])
		}
	}
	q := UserAgentQuery{Current: PromptDialogue{Exchanges: []schema.Exchange{{User: "hi", NPC: "Wait, wait... the river!"}}}}
	if f, want := (&WordTopics{Wording: wording}).featuresOf(q), wording["wait"]+wording["the"]+wording["river"]; math.Abs(f.Wording-want) > 1e-12 {
		t.Errorf("turn wording %.3f; want its distinct words' %.3f", f.Wording, want)
	}
	if f := (&WordTopics{}).featuresOf(q); f.Wording != 0 {
		t.Errorf("wording %.3f without one; want 0", f.Wording)
	}
	if _, err := LearnWording(sessions[:0], 5); err == nil {
		t.Error("learned a wording without quits")
	}
}

// TestCrossFitDecisionsReadsEachHalfWithTheOther logs two halves of
// sessions in which the players who quit say "ugh" in one half and "zap"
// in the other, after the NPC said "wait" in one and "hold" in the other:
// each half's decisions carry the tone and the wording learned on the
// other half, never their own, and a user agent without word topics is
// refused.
func TestCrossFitDecisionsReadsEachHalfWithTheOther(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a tiny model on the CPU")
	}
	eng, _ := tinyUserAgentEngine(t)
	half := func(player, word, npcWord string) []schema.Dialogue {
		var ds []schema.Dialogue
		for i := range 24 {
			d := schema.Dialogue{SessionID: fmt.Sprintf("%s-%d", player, i), PlayerID: fmt.Sprintf("%s%d", player, i%3), Reason: schema.EndMaxTurns,
				Exchanges: []schema.Exchange{{User: "the forge is hot", NPC: "Hot?"}, {User: "my cat sleeps", NPC: "Aye."}}}
			if i%2 == 0 {
				d.Exchanges[1].User, d.Exchanges[1].NPC, d.Reason = word+" my cat", npcWord+", aye.", schema.EndPlayerEnded
			}
			ds = append(ds, d)
		}
		return ds
	}
	a, b := half("a", "ugh", "wait"), half("b", "zap", "hold")
	ua, err := NewUserAgent(eng, DefaultUserAgentConfig())
	if err != nil {
		t.Fatal(err)
	}
	noDemos := func(schema.Dialogue) []PromptDialogue { return nil }
	if _, err := ua.CrossFitDecisions(t.Context(), a, b, 5, noDemos, nil); err == nil {
		t.Error("cross-fitted without word topics")
	}
	if ua, err = ua.WithWordTopics(&WordTopics{Words: map[string]int{}}); err != nil {
		t.Fatal(err)
	}
	ds, err := ua.CrossFitDecisions(t.Context(), a, b, 5, noDemos, nil)
	if err != nil {
		t.Fatal(err)
	}
	learn := func(sessions []schema.Dialogue) (tone, wording map[string]float64) {
		tone, err := LearnTone(sessions, 5)
		if err != nil {
			t.Fatal(err)
		}
		if wording, err = LearnWording(sessions, 5); err != nil {
			t.Fatal(err)
		}
		return tone, wording
	}
	toneA, wordingA := learn(a)
	toneB, wordingB := learn(b)
	if toneA["ugh"] < 0.5 || toneB["zap"] < 0.5 || wordingA["wait"] < 0.5 || wordingB["hold"] < 0.5 {
		t.Fatalf("ugh weighs %.2f and wait %.2f in a, zap %.2f and hold %.2f in b; want each to read its half's quits",
			toneA["ugh"], wordingA["wait"], toneB["zap"], wordingB["hold"])
	}
	// b's decisions come first, read with a's tone and wording; then a's, with b's.
	var want []TurnFeatures
	for _, h := range []struct {
		sessions      []schema.Dialogue
		tone, wording map[string]float64
	}{{b, toneA, wordingA}, {a, toneB, wordingB}} {
		for _, d := range h.sessions {
			qs, _ := DecisionQueries(d, nil, nil)
			for _, q := range qs {
				last := q.Current.Exchanges[len(q.Current.Exchanges)-1]
				want = append(want, TurnFeatures{Tone: weightOf(h.tone, last.User), Wording: weightOf(h.wording, last.NPC)})
			}
		}
	}
	if len(ds) != len(want) {
		t.Fatalf("%d decisions; want %d", len(ds), len(want))
	}
	for i, d := range ds {
		if math.Abs(d.Features.Tone-want[i].Tone) > 1e-12 || math.Abs(d.Features.Wording-want[i].Wording) > 1e-12 {
			t.Fatalf("decision %d reads tone %.3f and wording %.3f; want %.3f and %.3f, the other half's",
				i, d.Features.Tone, d.Features.Wording, want[i].Tone, want[i].Wording)
		}
	}
}

// logSessions logs 600 sessions of up to 8 exchanges, exchange k of
// session i from next with the hazard at which the player quits after it.
func logSessions(rng *rand.Rand, next func(i, k int) (schema.Exchange, float64)) []schema.Dialogue {
	var sessions []schema.Dialogue
	for i := range 600 {
		d := schema.Dialogue{SessionID: "s", PlayerID: "p", Reason: schema.EndMaxTurns}
		for k := range 8 {
			e, h := next(i, k)
			d.Exchanges = append(d.Exchanges, e)
			if rng.Float64() < h {
				d.Reason = schema.EndPlayerEnded
				break
			}
		}
		sessions = append(sessions, d)
	}
	return sessions
}
