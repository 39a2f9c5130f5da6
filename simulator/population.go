package simulator

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"unicode"
)

// Kind is a persona's kind: an ordinary player or one of the four
// adversarial kinds of the paper's stress test.
type Kind string

// Persona kinds.
const (
	KindNormal        Kind = "normal"
	KindContradictory Kind = "contradictory"
	KindAggressive    Kind = "aggressive"
	KindJailbreak     Kind = "jailbreak"
	KindHighRisk      Kind = "high_risk"
)

// Adversarial reports whether k is one of the four adversarial kinds.
func (k Kind) Adversarial() bool { return k != KindNormal }

// Punctuation is how a persona ends sentences.
type Punctuation string

// Punctuation styles.
const (
	PunctPlain    Punctuation = "plain"    // "."
	PunctNone     Punctuation = "none"     // nothing
	PunctExcited  Punctuation = "excited"  // "!!"
	PunctEllipsis Punctuation = "ellipsis" // "..."
)

// Casing is how a persona capitalises.
type Casing string

// Casing styles.
const (
	CaseLower    Casing = "lower"    // never capitalises
	CaseSentence Casing = "sentence" // capitalises the first letter
	CaseShout    Casing = "shout"    // sentence case, sometimes all capitals
)

// Style is how a persona writes.
type Style struct {
	MinWords    int         `json:"min_words"`
	MaxWords    int         `json:"max_words"`
	Slang       float64     `json:"slang"` // probability of each slang substitution, 0 for none
	Emoji       float64     `json:"emoji"` // probability of an emoji per message
	Emojis      []string    `json:"emojis,omitempty"`
	Punctuation Punctuation `json:"punctuation"`
	Casing      Casing      `json:"casing"`
}

// Persona is one ground-truth player. Its fields are hidden from the NPC;
// they are exported for tests, experiments and reports.
type Persona struct {
	ID   string `json:"id"`
	Kind Kind   `json:"kind"`
	// Interests are topic indexes into the population's topics, in the
	// order the persona reveals them.
	Interests []int   `json:"interests"`
	Style     Style   `json:"style"`
	Patience  float64 `json:"patience"`
	Mood      float64 `json:"mood"` // starting mood in [-1, 1]
	HeldOut   bool    `json:"held_out"`

	seed uint64
	pop  *Population
}

// InterestNames returns the names of the persona's interests in reveal order.
func (p *Persona) InterestNames() []string {
	names := make([]string, len(p.Interests))
	for i, t := range p.Interests {
		names[i] = p.pop.cfg.Topics[t].Name
	}
	return names
}

// Population is a seeded set of personas and the rules they follow. It is
// read-only after NewPopulation and safe to share between goroutines.
type Population struct {
	cfg     PopulationConfig
	seed    uint64
	players []*Persona
	byID    map[string]*Persona
	// topicOf maps a word (and its plural forms) to its topic index.
	topicOf map[string]int
}

// NewPopulation draws cfg.Size personas. Persona i depends only on seed, i
// and cfg, so a larger population under the same seed extends a smaller one.
func NewPopulation(cfg PopulationConfig, seed uint64) (*Population, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pop := &Population{cfg: cfg, seed: seed, topicOf: make(map[string]int)}
	for ti, t := range cfg.Topics {
		for _, w := range t.Words {
			for _, form := range []string{w, w + "s", w + "es"} {
				if _, ok := pop.topicOf[form]; !ok {
					pop.topicOf[form] = ti
				}
			}
		}
	}
	pop.players = make([]*Persona, cfg.Size)
	pop.byID = make(map[string]*Persona, cfg.Size)
	for i := range cfg.Size {
		pop.players[i] = pop.draw(i)
		pop.byID[pop.players[i].ID] = pop.players[i]
	}
	return pop, nil
}

// Config returns the population's configuration.
func (p *Population) Config() PopulationConfig { return p.cfg }

// Players returns every persona, in id order.
func (p *Population) Players() []*Persona { return p.players }

// Player returns the persona with the given id.
func (p *Population) Player(id string) (*Persona, bool) {
	pl, ok := p.byID[id]
	return pl, ok
}

// Topics returns the population's topics.
func (p *Population) Topics() []Topic { return p.cfg.Topics }

// TopicOf returns the index of the topic a word names, or -1.
func (p *Population) TopicOf(word string) int {
	if t, ok := p.topicOf[strings.ToLower(word)]; ok {
		return t
	}
	return -1
}

func (p *Population) draw(i int) *Persona {
	cfg := p.cfg
	seed := p.seed ^ (uint64(i)+1)*0x9e3779b97f4a7c15
	rng := rand.New(rand.NewPCG(seed, uint64(i)))
	pr := &Persona{
		ID:       fmt.Sprintf("%s%05d", cfg.IDPrefix, i),
		Kind:     KindNormal,
		Patience: uniform(rng, cfg.PatienceMin, cfg.PatienceMax),
		Mood:     uniform(rng, cfg.MoodMin, cfg.MoodMax),
		HeldOut:  rng.Float64() < cfg.HeldOutRate,
		seed:     rng.Uint64(),
		pop:      p,
	}
	if rng.Float64() < cfg.AdversarialRate {
		kinds := []Kind{KindContradictory, KindAggressive, KindJailbreak, KindHighRisk}
		pr.Kind = kinds[rng.IntN(len(kinds))]
		if pr.Kind == KindAggressive {
			pr.Mood = cfg.AggressiveMood
		}
	}
	n := cfg.MinInterests + rng.IntN(cfg.MaxInterests-cfg.MinInterests+1)
	pr.Interests = rng.Perm(len(cfg.Topics))[:n]

	st := Style{MinWords: cfg.LongWordsMin, MaxWords: cfg.LongWordsMax, Punctuation: PunctPlain, Casing: CaseSentence}
	if rng.Float64() < cfg.TerseShare {
		st.MinWords, st.MaxWords = cfg.ShortWordsMin, cfg.ShortWordsMax
	} else {
		// Each persona has its own typical length inside the long range.
		lo := cfg.LongWordsMin + rng.IntN(cfg.LongWordsMax-cfg.LongWordsMin+1)
		st.MinWords, st.MaxWords = lo, min(cfg.LongWordsMax, lo+lo/2+1)
	}
	if rng.Float64() < cfg.SlangShare {
		st.Slang = cfg.SlangRate
	}
	if rng.Float64() < cfg.EmojiShare {
		st.Emoji = cfg.EmojiRate
		for _, k := range rng.Perm(len(cfg.Lexicon.Emojis))[:min(2, len(cfg.Lexicon.Emojis))] {
			st.Emojis = append(st.Emojis, cfg.Lexicon.Emojis[k])
		}
	}
	puncts := []Punctuation{PunctPlain, PunctNone, PunctExcited, PunctEllipsis}
	st.Punctuation = puncts[rng.IntN(len(puncts))]
	switch r := rng.Float64(); {
	case r < cfg.ShoutShare:
		st.Casing = CaseShout
	case r < cfg.ShoutShare+cfg.LowercaseShare:
		st.Casing = CaseLower
	}
	pr.Style = st
	return pr
}

func uniform(rng *rand.Rand, lo, hi float64) float64 { return lo + (hi-lo)*rng.Float64() }

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

// words splits text into lowercase words of letters, digits and apostrophes.
func words(text string) []string {
	text = strings.ReplaceAll(strings.ToLower(text), "’", "'")
	return strings.FieldsFunc(text, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\''
	})
}

// hasPhrase reports whether the word sequence of phrase occurs in ws.
func hasPhrase(ws []string, phrase string) bool {
	pw := words(phrase)
	if len(pw) == 0 {
		return false
	}
	for i := 0; i+len(pw) <= len(ws); i++ {
		match := true
		for j := range pw {
			if ws[i+j] != pw[j] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

func hasAnyPhrase(ws []string, phrases []string) bool {
	for _, ph := range phrases {
		if hasPhrase(ws, ph) {
			return true
		}
	}
	return false
}
