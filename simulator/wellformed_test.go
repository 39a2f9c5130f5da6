package simulator

import (
	"testing"

	"github.com/parleyhq/parley/schema"
)

func TestVocabularyCheck(t *testing.T) {
	vocab := CorpusVocabulary([]schema.Dialogue{{Exchanges: []schema.Exchange{
		{User: "hey there. i love fishing at the lake!!", NPC: "Ah, fishing! So it's fishing for you. What got you into bait?"},
		{User: "yeah, my dad... u know", NPC: "Hmm? Wait, don't rush off! Well-known spots are near the old mill."},
		{User: "the lake", NPC: "You know the lake."},
	}}})
	tests := []struct {
		name  string
		reply string
		want  Flaw
	}{
		{"statement and question", "Ah, fishing! What got you into bait?", ""},
		{"capitals and a curly apostrophe", "SO IT’S FISHING FOR YOU.", ""},
		{"ellipsis and hyphen", "Wait, don't rush off... well-known spots are near the old mill.", ""},
		{"a word ends one sentence and starts the next", "So it's bait for you. You know the lake.", ""},
		{"a player's word in an NPC sentence", "Ah, lake! What got you into my dad?", ""},
		{"three words in the slot", "So it's the old mill for you.", ""},
		{"a sentence of the player's turns", "U know, my dad fishing at the lake.", FlawUnknownSentence},
		{"known words in no NPC sentence", "Wait, spots are near the lake.", FlawUnknownSentence},
		{"four words in the slot", "So it's near the old mill for you.", FlawUnknownSentence},
		{"a known sentence, then another", "Ah, fishing! Spots are near the lake you know.", FlawUnknownSentence},
		{"surrounding space", "  Hmm?  ", ""},
		{"empty", "   ", FlawEmpty},
		{"no closing mark", "Ah, fishing", FlawUnfinished},
		{"cut after a comma", "What got you into bait,", FlawUnfinished},
		{"stuttered clitics", "So it's's'se.", FlawUnknownWord},
		{"word cut short", "So it's inte for you.", FlawUnknownWord},
		{"unknown word", "Ah, dragons!", FlawUnknownWord},
		{"two marks after a word", "Ah, fishing,! What?", FlawFragment},
		{"lone punctuation", "Ah . fishing.", FlawFragment},
		{"mark inside a token", "Ah,fishing!", FlawFragment},
		{"emoji", "Ah, fishing 🎣.", FlawFragment},
		{"word twice in a row", "What got you into into bait?", FlawRepeat},
		{"repeated across a comma", "Ah, ah fishing.", FlawRepeat},
		{"sentence twice", "Ah, fishing! So it's fishing for you. Ah, fishing!", FlawRepeat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := vocab.Check(tt.reply); got != tt.want {
				t.Errorf("Check(%q) = %q; want %q", tt.reply, got, tt.want)
			}
			if got := vocab.WellFormed(tt.reply); got != (tt.want == "") {
				t.Errorf("WellFormed(%q) = %v; want %v", tt.reply, got, tt.want == "")
			}
		})
	}
}

// TestScriptedRepliesAreWellFormed holds the definition to the replies the
// NPC policy learns from: every scripted NPC's replies in a corpus are
// well-formed in that corpus's vocabulary.
func TestScriptedRepliesAreWellFormed(t *testing.T) {
	pcfg := DefaultPopulationConfig()
	pcfg.Size = 40
	pop, err := NewPopulation(pcfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	var dialogues []schema.Dialogue
	for i, p := range pop.Players() {
		for k, q := range Qualities() {
			npc, err := NewScriptedNPC(pop, q, DefaultScriptConfig(), uint64(i*10+k))
			if err != nil {
				t.Fatal(err)
			}
			dialogues = append(dialogues, Play(p.Start(uint64(k)), npc, 8))
		}
	}
	vocab := CorpusVocabulary(dialogues)
	for _, d := range dialogues {
		for _, x := range d.Exchanges {
			if f := vocab.Check(x.NPC); f != "" {
				t.Errorf("scripted reply %q: flaw %q; want well-formed", x.NPC, f)
			}
		}
	}
}
