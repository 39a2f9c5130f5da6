package simulator

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/parleyhq/parley/schema"
)

// topicMessages writes n player messages, each with common words and two
// or three words of one of the topics, as players who talk about what
// they like.
func topicMessages(rng *rand.Rand, topics [][]string, n int) []string {
	common := []string{"the", "i", "my", "today", "so", "it"}
	out := make([]string, n)
	for i := range out {
		ws := []string{common[rng.IntN(len(common))], common[rng.IntN(len(common))]}
		t := topics[rng.IntN(len(topics))]
		for _, j := range rng.Perm(len(t))[:2+rng.IntN(2)] {
			ws = append(ws, t[j])
		}
		out[i] = strings.Join(ws, " ")
	}
	return out
}

func TestLearnWordTopicsGroupsWordsPlayersUseTogether(t *testing.T) {
	topics := [][]string{
		{"sword", "shield", "armor", "duel", "boss", "dungeon"},
		{"trout", "lake", "lure", "pier", "salmon", "tackle"},
		{"lute", "ballad", "harp", "chorus", "melody", "fiddle"},
		{"wheat", "barn", "plow", "orchard", "pumpkin", "harvest"},
	}
	cfg := DefaultWordTopicsConfig()
	// Each topic word is in about 10 % of the messages, a common word in 30 %.
	cfg.Topics, cfg.Dims, cfg.MaxShare = 4, 6, 0.2
	wt, err := LearnWordTopics(topicMessages(rand.New(rand.NewPCG(1, 2)), topics, 3000), cfg)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]string{}
	for _, topic := range topics {
		c, ok := wt.Words[topic[0]]
		for _, w := range topic {
			if got, in := wt.Words[w]; !ok || !in || got != c {
				t.Errorf("%q is in topic %d (known %v); want %q's %d", w, got, in, topic[0], c)
			}
		}
		if other, dup := seen[c]; dup {
			t.Errorf("%q and %q share topic %d", topic[0], other, c)
		}
		seen[c] = topic[0]
	}
	for _, w := range []string{"the", "i", "today"} {
		if _, in := wt.Words[w]; in {
			t.Errorf("common word %q has a topic; want function words left out", w)
		}
	}

	player := []string{"my trout got away", "so i played the lute"}
	for _, tt := range []struct {
		npc  string
		want TurnFeatures
	}{
		{"A fine harp tune!", TurnFeatures{Turn: 2, OnLast: 1}},
		{"Which lake was it?", TurnFeatures{Turn: 2}},
		{"Have you been to the dungeon?", TurnFeatures{Turn: 2, OffTopic: 1}},
		{"Hello there.", TurnFeatures{Turn: 2}},
	} {
		if got := wt.Features(player, tt.npc); got != tt.want {
			t.Errorf("Features(%q) = %+v; want %+v", tt.npc, got, tt.want)
		}
	}
	if got := (*WordTopics)(nil).Features(player, "A fine harp tune!"); got != (TurnFeatures{Turn: 2}) {
		t.Errorf("no word topics read %+v; want the turn alone", got)
	}

	if _, err := LearnWordTopics([]string{"sword shield", "trout lake"}, cfg); err == nil {
		t.Error("learned topics from two messages")
	}
	capped := cfg
	capped.MaxWords = 12
	if wt, err := LearnWordTopics(topicMessages(rand.New(rand.NewPCG(1, 2)), topics, 3000), capped); err != nil || len(wt.Words) != 12 {
		t.Errorf("MaxWords 12 gave %v words (err %v); want the 12 most common", wt, err)
	}
	cfg.Topics = 1
	if _, err := LearnWordTopics(topicMessages(rand.New(rand.NewPCG(1, 2)), topics, 100), cfg); err == nil {
		t.Error("learned one topic")
	}
}

// TestFitCalibrationReadsFeatures draws decisions whose quits depend on
// the NPC turn's relevance, repetition and turn, with a logit that knows
// nothing: the fit gives the weights the signs and about the sizes that
// made the quits, and leaves the features alone when the decisions carry
// none.
func TestFitCalibrationReadsFeatures(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	truth := Calibration{Scale: 1, Offset: -2.5, Early: [3]float64{-0.8, -0.4, 0}, OnLast: -0.7, OffTopic: 1.0, Repeat: 1.5}
	var ds []Decision
	for range 8000 {
		f := TurnFeatures{Turn: 1 + rng.IntN(5)}
		switch rng.IntN(3) {
		case 0:
			f.OnLast = 1
		case 1:
			f.OffTopic = 1
		}
		if rng.IntN(3) == 0 {
			f.Repeat = rng.Float64()
		}
		z := rng.NormFloat64()
		p := EndProbability(truth.TerminationShare(0, f), 1)
		ds = append(ds, Decision{Logit: z, Features: f, Quit: rng.Float64() < p})
	}
	c, err := FitCalibration(ds)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fitted %+v; truth %+v", c, truth)
	if math.Abs(c.OnLast-truth.OnLast) > 0.3 || math.Abs(c.OffTopic-truth.OffTopic) > 0.3 || math.Abs(c.Repeat-truth.Repeat) > 0.5 || c.Early[0] > c.Early[2] {
		t.Errorf("fitted %+v; want on-last, off-topic and repeat within 0.3, 0.3 and 0.5 of %g, %g and %g, and turn 1 below turn 3",
			c, truth.OnLast, truth.OffTopic, truth.Repeat)
	}
	for i := range ds {
		ds[i].Features = TurnFeatures{Turn: ds[i].Features.Turn}
	}
	if c, err = FitCalibration(ds); err != nil || c.OnLast != 0 || c.OffTopic != 0 || c.Repeat != 0 || c.Early != [3]float64{} {
		t.Errorf("without features fitted %+v (err %v); want scale and offset alone", c, err)
	}
}

// TestFeaturesReadRepetition: an NPC turn's Repeat is its largest word-set
// overlap with an earlier NPC turn of the dialogue, with or without word
// topics.
func TestFeaturesReadRepetition(t *testing.T) {
	x := func(user, npc string) schema.Exchange { return schema.Exchange{User: user, NPC: npc} }
	for _, tt := range []struct {
		name string
		d    PromptDialogue
		want float64
	}{
		{"first turn", PromptDialogue{Exchanges: []schema.Exchange{x("hi", "Hello there, traveller.")}}, 0},
		{"said again", PromptDialogue{Exchanges: []schema.Exchange{x("hi", "Hello there, traveller."), x("what?", "hello there traveller")}}, 1},
		{"half of it", PromptDialogue{Exchanges: []schema.Exchange{x("hi", "The river is cold."), x("and?", "A storm came."), x("so?", "The river is wide.")}}, 3.0 / 5},
		{"new words", PromptDialogue{Exchanges: []schema.Exchange{x("hi", "The river is cold."), x("and?", "Bake bread at dawn.")}}, 0},
	} {
		if got := (*WordTopics)(nil).featuresOf(tt.d); math.Abs(got.Repeat-tt.want) > 1e-12 || got.Turn != len(tt.d.Exchanges) {
			t.Errorf("%s: features %+v; want turn %d and repeat %g", tt.name, got, len(tt.d.Exchanges), tt.want)
		}
	}
}
