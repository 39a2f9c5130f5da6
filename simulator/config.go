package simulator

import (
	"errors"
	"fmt"
	"strings"
)

// PopulationConfig holds every constant of the ground-truth population:
// how personas are drawn and the hazard and mood rules of RULES.md.
type PopulationConfig struct {
	// Size is the number of personas.
	Size int `json:"size"`
	// IDPrefix starts every player id: "sim-" gives "sim-00042".
	IDPrefix string `json:"id_prefix"`
	// HeldOutRate is the share of personas flagged HeldOut, kept out of
	// training corpora so experiments can report on unseen players.
	HeldOutRate float64 `json:"held_out_rate"`

	// AdversarialRate is the share of personas of an adversarial kind;
	// the four kinds are equally likely among them.
	AdversarialRate float64 `json:"adversarial_rate"`
	// MinInterests and MaxInterests bound how many topics a persona cares about.
	MinInterests int `json:"min_interests"`
	MaxInterests int `json:"max_interests"`

	// Style draws.
	ShortWordsMin  int     `json:"short_words_min"` // word range of terse personas
	ShortWordsMax  int     `json:"short_words_max"`
	LongWordsMin   int     `json:"long_words_min"` // word range of the others
	LongWordsMax   int     `json:"long_words_max"`
	TerseShare     float64 `json:"terse_share"`     // share of personas that write short messages
	SlangShare     float64 `json:"slang_share"`     // share of personas that use slang
	SlangRate      float64 `json:"slang_rate"`      // per-substitution probability for slang users
	EmojiShare     float64 `json:"emoji_share"`     // share of personas that use emoji
	EmojiRate      float64 `json:"emoji_rate"`      // per-message probability for emoji users
	LowercaseShare float64 `json:"lowercase_share"` // share that never capitalise
	ShoutShare     float64 `json:"shout_share"`     // share that sometimes write in capitals
	ShoutRate      float64 `json:"shout_rate"`      // per-message probability of all capitals for them

	// Patience scales the base hazard: base = BaseHazard / patience.
	PatienceMin float64 `json:"patience_min"`
	PatienceMax float64 `json:"patience_max"`
	BaseHazard  float64 `json:"base_hazard"`
	// MoodMin and MoodMax bound the starting mood of normal personas (mood is in [-1, 1]).
	MoodMin float64 `json:"mood_min"`
	MoodMax float64 `json:"mood_max"`
	// AggressiveMood is the starting mood of aggressive personas.
	AggressiveMood float64 `json:"aggressive_mood"`
	// NegativeMood is the mood below which a player counts as upset.
	NegativeMood float64 `json:"negative_mood"`

	// Hazard weights, added to the logit of the base hazard (RULES.md §Hazard).
	WEngaged          float64 `json:"w_engaged"`           // NPC used a word of the current topic
	WRevealed         float64 `json:"w_revealed"`          // NPC used a word of another revealed interest
	WNewInterest      float64 `json:"w_new_interest"`      // NPC hit an interest not yet revealed
	WRelevantQuestion float64 `json:"w_relevant_question"` // NPC asked a question about one of the above
	WOffTopic         float64 `json:"w_off_topic"`         // NPC talked only about topics the player doesn't care for
	WGeneric          float64 `json:"w_generic"`           // NPC named no topic at all
	WFiller           float64 `json:"w_filler"`            // NPC used a filler phrase
	WRetention        float64 `json:"w_retention"`         // NPC used a retention tactic
	WRepetition       float64 `json:"w_repetition"`        // NPC repeated an earlier reply
	WContradiction    float64 `json:"w_contradiction"`     // NPC flipped its opinion of a topic
	WIgnoredMood      float64 `json:"w_ignored_mood"`      // player upset, NPC showed no empathy
	WIgnoredCrisis    float64 `json:"w_ignored_crisis"`    // player in crisis, NPC offered no support
	WMood             float64 `json:"w_mood"`              // times -mood
	WFatigue          float64 `json:"w_fatigue"`           // per exchange already played
	MinHazard         float64 `json:"min_hazard"`
	MaxHazard         float64 `json:"max_hazard"`
	// RepetitionJaccard is the word-set overlap with an earlier NPC reply
	// from which a reply counts as a repetition.
	RepetitionJaccard float64 `json:"repetition_jaccard"`

	// Mood changes per exchange (RULES.md §Mood).
	MoodEngaged   float64 `json:"mood_engaged"`
	MoodQuestion  float64 `json:"mood_question"`
	MoodEmpathy   float64 `json:"mood_empathy"`
	MoodBad       float64 `json:"mood_bad"` // per bad feature (off-topic, generic, retention, repetition, contradiction, ignored mood)
	MoodDriftDown float64 `json:"mood_drift_down"`

	// Conversation dynamics (RULES.md §Replies).
	OpeningRevealProb   float64 `json:"opening_reveal_prob"`   // the opening names the first interest
	RevealProb          float64 `json:"reveal_prob"`           // per reply: reveal the next hidden interest
	RevealQuestionBoost float64 `json:"reveal_question_boost"` // added to RevealProb after a relevant question
	DriftProb           float64 `json:"drift_prob"`            // per reply: switch to another revealed interest
	FlipProb            float64 `json:"flip_prob"`             // contradictory kind: disown the current topic
	InsultProb          float64 `json:"insult_prob"`           // aggressive kind
	JailbreakProb       float64 `json:"jailbreak_prob"`        // jailbreak kind
	SelfHarmProb        float64 `json:"self_harm_prob"`        // high-risk kind
	IdleShare           float64 `json:"idle_share"`            // share of player endings that are idle timeouts

	Topics  []Topic `json:"topics"`
	Lexicon Lexicon `json:"lexicon"`
}

// DefaultPopulationConfig returns the documented defaults of RULES.md.
func DefaultPopulationConfig() PopulationConfig {
	return PopulationConfig{
		Size:            100,
		IDPrefix:        "sim-",
		HeldOutRate:     0.2,
		AdversarialRate: 0.08,
		MinInterests:    2,
		MaxInterests:    4,

		ShortWordsMin: 2, ShortWordsMax: 6,
		LongWordsMin: 8, LongWordsMax: 24,
		TerseShare:     0.35,
		SlangShare:     0.4,
		SlangRate:      0.7,
		EmojiShare:     0.35,
		EmojiRate:      0.5,
		LowercaseShare: 0.5,
		ShoutShare:     0.05,
		ShoutRate:      0.3,

		PatienceMin:    0.6,
		PatienceMax:    1.6,
		BaseHazard:     0.12,
		MoodMin:        -0.2,
		MoodMax:        0.6,
		AggressiveMood: -0.8,
		NegativeMood:   -0.25,

		WEngaged:          -0.7,
		WRevealed:         -0.35,
		WNewInterest:      -0.5,
		WRelevantQuestion: -0.8,
		WOffTopic:         0.9,
		WGeneric:          0.7,
		WFiller:           0.3,
		WRetention:        1.2,
		WRepetition:       1.0,
		WContradiction:    1.0,
		WIgnoredMood:      0.9,
		WIgnoredCrisis:    1.5,
		WMood:             0.8,
		WFatigue:          0.07,
		MinHazard:         0.01,
		MaxHazard:         0.95,
		RepetitionJaccard: 0.7,

		MoodEngaged:   0.1,
		MoodQuestion:  0.08,
		MoodEmpathy:   0.25,
		MoodBad:       0.12,
		MoodDriftDown: 0.02,

		OpeningRevealProb:   0.7,
		RevealProb:          0.2,
		RevealQuestionBoost: 0.15,
		DriftProb:           0.1,
		FlipProb:            0.4,
		InsultProb:          0.6,
		JailbreakProb:       0.6,
		SelfHarmProb:        0.5,
		IdleShare:           0.3,

		Topics:  DefaultTopics(),
		Lexicon: DefaultLexicon(),
	}
}

// Validate reports the first value out of range and checks that no word
// names two topics.
func (c PopulationConfig) Validate() error {
	if c.Size < 1 {
		return fmt.Errorf("population: size %d must be at least 1", c.Size)
	}
	if c.IDPrefix == "" || strings.ContainsAny(c.IDPrefix, " \t\n/") {
		return fmt.Errorf("population: id prefix %q must be non-empty without spaces or slashes", c.IDPrefix)
	}
	probs := []struct {
		name string
		v    float64
	}{
		{"held_out_rate", c.HeldOutRate}, {"adversarial_rate", c.AdversarialRate},
		{"terse_share", c.TerseShare}, {"slang_share", c.SlangShare}, {"slang_rate", c.SlangRate},
		{"emoji_share", c.EmojiShare}, {"emoji_rate", c.EmojiRate}, {"lowercase_share", c.LowercaseShare},
		{"shout_share", c.ShoutShare}, {"shout_rate", c.ShoutRate}, {"opening_reveal_prob", c.OpeningRevealProb},
		{"reveal_prob", c.RevealProb}, {"reveal_question_boost", c.RevealQuestionBoost},
		{"drift_prob", c.DriftProb}, {"flip_prob", c.FlipProb}, {"insult_prob", c.InsultProb},
		{"jailbreak_prob", c.JailbreakProb}, {"self_harm_prob", c.SelfHarmProb}, {"idle_share", c.IdleShare},
		{"repetition_jaccard", c.RepetitionJaccard},
	}
	for _, p := range probs {
		if p.v < 0 || p.v > 1 {
			return fmt.Errorf("population: %s %g must be in [0, 1]", p.name, p.v)
		}
	}
	if c.BaseHazard <= 0 || c.BaseHazard >= 1 {
		return fmt.Errorf("population: base_hazard %g must be in (0, 1)", c.BaseHazard)
	}
	if c.MinHazard <= 0 || c.MaxHazard >= 1 || c.MinHazard > c.MaxHazard {
		return fmt.Errorf("population: hazard bounds [%g, %g] must lie in (0, 1) and be ordered", c.MinHazard, c.MaxHazard)
	}
	if c.PatienceMin <= 0 || c.PatienceMin > c.PatienceMax {
		return fmt.Errorf("population: patience [%g, %g] must be positive and ordered", c.PatienceMin, c.PatienceMax)
	}
	if c.MoodMin < -1 || c.MoodMax > 1 || c.MoodMin > c.MoodMax || c.AggressiveMood < -1 || c.AggressiveMood > 1 {
		return fmt.Errorf("population: moods [%g, %g] and aggressive %g must lie in [-1, 1]", c.MoodMin, c.MoodMax, c.AggressiveMood)
	}
	if c.MinInterests < 1 || c.MinInterests > c.MaxInterests || c.MaxInterests > len(c.Topics) {
		return fmt.Errorf("population: interests [%d, %d] must be within [1, %d topics]", c.MinInterests, c.MaxInterests, len(c.Topics))
	}
	if c.ShortWordsMin < 1 || c.ShortWordsMin > c.ShortWordsMax || c.LongWordsMin < 1 || c.LongWordsMin > c.LongWordsMax {
		return errors.New("population: message word ranges must be positive and ordered")
	}
	seen := make(map[string]string)
	for _, t := range c.Topics {
		if t.Name == "" || len(t.Words) < 2 || len(t.Statements) == 0 || len(t.Short) == 0 {
			return fmt.Errorf("population: topic %q needs a name, two words, statements and short forms", t.Name)
		}
		for _, w := range t.Words {
			if w != strings.ToLower(w) || strings.ContainsAny(w, " '") {
				return fmt.Errorf("population: topic %q: word %q must be one lowercase word", t.Name, w)
			}
			if other, ok := seen[w]; ok {
				return fmt.Errorf("population: word %q names both %q and %q", w, other, t.Name)
			}
			seen[w] = t.Name
		}
	}
	lx := c.Lexicon
	lists := map[string][]string{
		"retention": lx.Retention, "filler": lx.Filler, "empathy": lx.Empathy, "crisis_support": lx.CrisisSupport,
		"positive": lx.Positive, "negative": lx.Negative, "greetings": lx.Greetings, "answers": lx.Answers,
		"annoyed": lx.Annoyed, "off_topic_replies": lx.OffTopicReplies, "retention_replies": lx.RetentionReplies,
		"reveal": lx.Reveal, "flip": lx.Flip, "insults": lx.Insults, "jailbreaks": lx.Jailbreaks,
		"self_harm": lx.SelfHarm, "self_harm_signals": lx.SelfHarmSignals, "jailbreak_signals": lx.JailbreakSignals,
		"slang_tags": lx.SlangTags, "question_starts": lx.QuestionStarts, "emojis": lx.Emojis,
	}
	for name, l := range lists {
		if len(l) == 0 {
			return fmt.Errorf("population: lexicon %s is empty", name)
		}
	}
	return nil
}
