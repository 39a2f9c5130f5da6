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

// testTopics are four topics of six words each, which no other topic uses.
var testTopics = [][]string{
	{"sword", "shield", "armor", "duel", "boss", "dungeon"},
	{"trout", "lake", "lure", "pier", "salmon", "tackle"},
	{"lute", "ballad", "harp", "chorus", "melody", "fiddle"},
	{"wheat", "barn", "plow", "orchard", "pumpkin", "harvest"},
}

func TestLearnWordTopicsGroupsWordsPlayersUseTogether(t *testing.T) {
	topics := testTopics
	cfg := DefaultWordTopicsConfig()
	// Each topic word is in about 10 % of the messages, a common word in 30 %.
	cfg.Topics, cfg.Dims, cfg.MaxShare = 4, 6, 0.2
	wt, err := LearnWordTopics(topicMessages(rand.New(rand.NewPCG(1, 2)), topics, 3000), nil, cfg)
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
		{"Which lake was it?", TurnFeatures{Turn: 2, Question: 1, OnEarlier: 1, AsksNamed: 1}},
		{"Have you been to the dungeon?", TurnFeatures{Turn: 2, Question: 1, OffTopic: 1, NamesNew: 1}},
		{"A harp by the dungeon.", TurnFeatures{Turn: 2, OnLast: 1, NamesNew: 1}},
		{"Hello there.", TurnFeatures{Turn: 2, NoTopic: 1}},
		{"Hello there?", TurnFeatures{Turn: 2, Question: 1, NoTopic: 1}},
	} {
		if got := wt.Features(nil, player, tt.npc); got != tt.want {
			t.Errorf("Features(%q) = %+v; want %+v", tt.npc, got, tt.want)
		}
	}
	// The player talked about the dungeon in an earlier session, not about
	// the orchard: naming the dungeon names a topic they know.
	earlier := []string{"that boss in the dungeon", "i like my tackle"}
	for _, tt := range []struct {
		npc  string
		want TurnFeatures
	}{
		{"Have you been to the dungeon?", TurnFeatures{Turn: 2, Question: 1, OffTopic: 1, NamesNew: 1, NamesKnown: 1}},
		{"A harp by the orchard.", TurnFeatures{Turn: 2, OnLast: 1, NamesNew: 1}},
		{"Which lake was it?", TurnFeatures{Turn: 2, Question: 1, OnEarlier: 1, AsksNamed: 1}},
	} {
		if got := wt.Features(earlier, player, tt.npc); got != tt.want {
			t.Errorf("Features(%q) after %q = %+v; want %+v", tt.npc, earlier, got, tt.want)
		}
	}
	// As the user agent scores a turn: the earlier messages are its demos'.
	q := UserAgentQuery{
		Demos:   []PromptDialogue{{Exchanges: []schema.Exchange{{User: earlier[0], NPC: "Good luck."}, {User: earlier[1], NPC: "Nice."}}}},
		Current: PromptDialogue{Exchanges: []schema.Exchange{{User: player[0], NPC: "Oh no."}, {User: player[1], NPC: "Have you been to the dungeon?"}}},
	}
	if got := wt.featuresOf(q); got.NamesKnown != 1 || got.NamesNew != 1 {
		t.Errorf("scored with demos: %+v; want a known topic named anew", got)
	}
	if got := (*WordTopics)(nil).Features(earlier, player, "A fine harp tune?"); got != (TurnFeatures{Turn: 2, Question: 1}) {
		t.Errorf("no word topics read %+v; want the turn and its question alone", got)
	}

	if _, err := LearnWordTopics([]string{"sword shield", "trout lake"}, nil, cfg); err == nil {
		t.Error("learned topics from two messages")
	}
	capped := cfg
	capped.MaxWords, capped.MinCosine = 12, 0
	if wt, err := LearnWordTopics(topicMessages(rand.New(rand.NewPCG(1, 2)), topics, 3000), nil, capped); err != nil || len(wt.Words) != 12 {
		t.Errorf("MaxWords 12 gave %v words (err %v); want the 12 most common", wt, err)
	}
	cfg.Topics = 1
	if _, err := LearnWordTopics(topicMessages(rand.New(rand.NewPCG(1, 2)), topics, 100), nil, cfg); err == nil {
		t.Error("learned one topic")
	}
}

// TestLearnWordTopicsLeavesOutWordsOfEveryTopic: a word players use with
// any topic ("best") falls in some cluster but far from its centre, and
// MinCosine leaves it out while every topic word stays.
func TestLearnWordTopicsLeavesOutWordsOfEveryTopic(t *testing.T) {
	topics := testTopics
	rng := rand.New(rand.NewPCG(3, 4))
	messages := topicMessages(rng, topics, 3000)
	for i := range messages {
		if rng.IntN(8) == 0 {
			messages[i] += " best"
		}
	}
	cfg := DefaultWordTopicsConfig()
	cfg.Topics, cfg.Dims, cfg.MaxShare = 4, 6, 0.2
	for _, tt := range []struct {
		minCosine float64
		best      bool
	}{{0, true}, {cfg.MinCosine, false}} {
		c := cfg
		c.MinCosine = tt.minCosine
		wt, err := LearnWordTopics(messages, nil, c)
		if err != nil {
			t.Fatal(err)
		}
		if _, in := wt.Words["best"]; in != tt.best {
			t.Errorf("min cosine %g: \"best\" has a topic: %v; want %v", tt.minCosine, in, tt.best)
		}
		for _, topic := range topics {
			for _, w := range topic {
				if _, in := wt.Words[w]; !in {
					t.Errorf("min cosine %g left out topic word %q", tt.minCosine, w)
				}
			}
		}
	}
	bad := cfg
	bad.MinCosine = 1
	if _, err := LearnWordTopics(messages, nil, bad); err == nil {
		t.Error("min cosine 1 accepted")
	}
}

// TestFitCalibrationReadsFeatures draws decisions whose quits depend on
// the NPC turn's relevance, question, repetition and turn, with a logit
// that knows nothing: the fit gives the weights the signs and about the
// sizes that made the quits, and leaves the features alone when the
// decisions carry none.
func TestFitCalibrationReadsFeatures(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	truth := Calibration{Scale: 1, Offset: -2.5, Early: [3]float64{-0.8, -0.4, 0}, OnLast: -0.7, OffTopic: 1.0, Repeat: 1.5,
		Question: -0.5, OnEarlier: -0.4, NamesNew: 0.3, NoTopic: 0.8, AsksNamed: -0.6, NamesKnown: -0.9, Tone: 0.8, PlayerTone: 0.6, Wording: 0.7}
	var ds []Decision
	for range 12000 {
		f := TurnFeatures{Turn: 1 + rng.IntN(5), Question: float64(rng.IntN(2))}
		switch rng.IntN(4) {
		case 0:
			f.OnLast, f.AsksNamed = 1, f.Question
		case 1:
			f.OffTopic, f.NamesNew, f.NamesKnown = 1, 1, float64(rng.IntN(2))
		case 2:
			f.OnEarlier, f.AsksNamed, f.NamesNew = 1, f.Question, float64(rng.IntN(2))
		default:
			f.NoTopic = 1
		}
		if rng.IntN(3) == 0 {
			f.Repeat = rng.Float64()
		}
		f.Tone, f.PlayerTone, f.Wording = 0.5*rng.NormFloat64(), 0.4*rng.NormFloat64(), 0.5*rng.NormFloat64()
		z := rng.NormFloat64()
		p := EndProbability(truth.TerminationShare(0, f), 1)
		ds = append(ds, Decision{Logit: z, Features: f, Quit: rng.Float64() < p})
	}
	c, err := FitCalibration(ds)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fitted %s; truth %s", c.Summary(), truth.Summary())
	got, want := c.weights(), truth.weights()
	for i := range got {
		if math.Abs(*got[i]-*want[i]) > 0.5 || math.Signbit(*got[i]) != math.Signbit(*want[i]) {
			t.Errorf("weight %s fitted %.2f; want within 0.5 of %.2f, of its sign", weightMetrics[i], *got[i], *want[i])
		}
	}
	if c.Early[0] > c.Early[2] {
		t.Errorf("early offsets %v; want turn 1 below turn 3", c.Early)
	}
	for i := range ds {
		ds[i].Features = TurnFeatures{Turn: ds[i].Features.Turn}
	}
	if c, err = FitCalibration(ds); err != nil || c.Summary() != (Calibration{Scale: c.Scale, Offset: c.Offset}).Summary() {
		t.Errorf("without features fitted %s (err %v); want scale and offset alone", c.Summary(), err)
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
		if got := (*WordTopics)(nil).featuresOf(UserAgentQuery{Current: tt.d}); math.Abs(got.Repeat-tt.want) > 1e-12 || got.Turn != len(tt.d.Exchanges) {
			t.Errorf("%s: features %+v; want turn %d and repeat %g", tt.name, got, len(tt.d.Exchanges), tt.want)
		}
	}
}

// TestLearnWordTopicsLeavesOutTheNPCsStockWords: a word players seldom say
// but say with one topic ("mill") joins that topic from the players'
// messages alone; when the NPC says it in half its turns it is part of how
// the NPC talks and names no topic, while every topic word stays.
func TestLearnWordTopicsLeavesOutTheNPCsStockWords(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	messages := topicMessages(rng, testTopics, 3000)
	for i, m := range messages {
		if strings.Contains(m, testTopics[3][0]) || strings.Contains(m, testTopics[3][1]) {
			messages[i] += " mill"
		}
	}
	npc := make([]string, 1000)
	for i := range npc {
		npc[i] = "Tell me about your " + testTopics[i%4][i%6] + "."
		if i%2 == 0 {
			npc[i] = "The best " + testTopics[i%4][i%6] + " I saw was near the old mill."
		}
	}
	cfg := DefaultWordTopicsConfig()
	cfg.Topics, cfg.Dims, cfg.MaxShare = 4, 6, 0.2
	for _, tt := range []struct {
		npc  []string
		mill bool
	}{{nil, true}, {npc, false}} {
		wt, err := LearnWordTopics(messages, tt.npc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if c, in := wt.Words["mill"]; in != tt.mill || (in && c != wt.Words[testTopics[3][0]]) {
			t.Errorf("%d NPC turns: \"mill\" in topic %d: %v; want %v, with %q", len(tt.npc), c, in, tt.mill, testTopics[3][0])
		}
		for _, topic := range testTopics {
			for _, w := range topic {
				if _, in := wt.Words[w]; !in {
					t.Errorf("%d NPC turns left out topic word %q", len(tt.npc), w)
				}
			}
		}
	}
}
