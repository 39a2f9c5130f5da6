package simulator

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/parleyhq/parley/schema"
)

// Conversation is one persona in one conversation: its mood, the interests
// it has revealed so far, and what the NPC has said. It follows the rules
// of RULES.md. A Conversation is not safe for concurrent use.
type Conversation struct {
	p   *Persona
	cfg *PopulationConfig
	rng *rand.Rand

	mood     float64
	revealed map[int]bool
	current  int // topic index the player talks about now, -1 before any
	turns    int
	crisis   bool // the last player message was a self-harm message
	opening  string
	ended    bool
	reason   schema.EndReason

	npcWords   [][]string  // every NPC reply so far, as words
	npcOpinion map[int]int // topic → sign of the NPC's last stated opinion
}

// Start begins a conversation of p. The same persona and seed give the same
// conversation for the same NPC replies.
func (p *Persona) Start(seed uint64) *Conversation {
	c := &Conversation{
		p:          p,
		cfg:        &p.pop.cfg,
		rng:        rand.New(rand.NewPCG(p.seed, seed)),
		mood:       p.Mood,
		revealed:   make(map[int]bool),
		current:    -1,
		npcOpinion: make(map[int]int),
	}
	c.opening = c.compose(Assessment{NewTopic: -1}, true)
	return c
}

// Persona returns the conversation's persona.
func (c *Conversation) Persona() *Persona { return c.p }

// Opening returns the player's first message.
func (c *Conversation) Opening() string { return c.opening }

// Mood returns the player's current mood in [-1, 1].
func (c *Conversation) Mood() float64 { return c.mood }

// Turns returns the number of NPC replies the player has answered or left on.
func (c *Conversation) Turns() int { return c.turns }

// Revealed returns the names of the interests the player has revealed so far.
func (c *Conversation) Revealed() []string {
	var names []string
	for _, t := range c.p.Interests {
		if c.revealed[t] {
			names = append(names, c.cfg.Topics[t].Name)
		}
	}
	return names
}

// Ended reports whether the player has ended the conversation.
func (c *Conversation) Ended() bool { return c.ended }

// Reason returns how the player ended the conversation: player_ended or
// idle_timeout, or "" while it goes on.
func (c *Conversation) Reason() schema.EndReason { return c.reason }

// Assessment is what the player makes of one NPC reply: the features of
// RULES.md §Hazard and the resulting termination hazard.
type Assessment struct {
	Hazard           float64 `json:"hazard"`
	Engaged          bool    `json:"engaged"`
	Revealed         bool    `json:"revealed"`
	NewInterest      bool    `json:"new_interest"`
	Question         bool    `json:"question"`
	RelevantQuestion bool    `json:"relevant_question"`
	OffTopic         bool    `json:"off_topic"`
	Generic          bool    `json:"generic"`
	Filler           bool    `json:"filler"`
	Retention        bool    `json:"retention"`
	Repetition       bool    `json:"repetition"`
	Contradiction    bool    `json:"contradiction"`
	Upset            bool    `json:"upset"`
	Empathy          bool    `json:"empathy"`
	IgnoredMood      bool    `json:"ignored_mood"`
	CrisisSupport    bool    `json:"crisis_support"`
	IgnoredCrisis    bool    `json:"ignored_crisis"`
	// NewTopic is the topic index of the hidden interest the NPC hit, or -1.
	NewTopic int `json:"new_topic"`
	// OffWord is a word of an off-topic reply.
	OffWord string `json:"off_word,omitempty"`
}

// Assess computes the player's reaction to npcText without changing the
// conversation.
func (c *Conversation) Assess(npcText string) Assessment {
	cfg, lx := c.cfg, &c.cfg.Lexicon
	ws := words(npcText)
	a := Assessment{NewTopic: -1}
	hits := make(map[int]bool)
	for _, w := range ws {
		if t, ok := c.p.pop.topicOf[w]; ok {
			hits[t] = true
			if !slices.Contains(c.p.Interests, t) && a.OffWord == "" {
				a.OffWord = w
			}
		}
	}
	interested := false
	for t := range hits {
		switch {
		case t == c.current:
			a.Engaged = true
		case c.revealed[t]:
			a.Revealed = true
		}
		if slices.Contains(c.p.Interests, t) {
			interested = true
		}
	}
	for _, t := range c.p.Interests {
		if hits[t] && !c.revealed[t] {
			a.NewInterest, a.NewTopic = true, t
			break
		}
	}
	a.Question = strings.Contains(npcText, "?")
	a.RelevantQuestion = a.Question && (a.Engaged || a.Revealed || a.NewInterest)
	a.OffTopic = len(hits) > 0 && !interested
	a.Generic = len(hits) == 0
	a.Filler = hasAnyPhrase(ws, lx.Filler)
	a.Retention = hasAnyPhrase(ws, lx.Retention)
	a.Repetition = c.repeats(ws)
	if pol := polarity(ws, lx); pol != 0 {
		for t := range hits {
			if c.npcOpinion[t] == -pol {
				a.Contradiction = true
			}
		}
	}
	a.Upset = c.mood < cfg.NegativeMood
	a.Empathy = hasAnyPhrase(ws, lx.Empathy)
	a.IgnoredMood = a.Upset && !a.Empathy
	a.CrisisSupport = hasAnyPhrase(ws, lx.CrisisSupport)
	a.IgnoredCrisis = c.crisis && !a.CrisisSupport

	base := min(max(cfg.BaseHazard/c.p.Patience, cfg.MinHazard), cfg.MaxHazard)
	logit := math.Log(base / (1 - base))
	terms := []struct {
		on bool
		w  float64
	}{
		{a.Engaged, cfg.WEngaged}, {a.Revealed, cfg.WRevealed}, {a.NewInterest, cfg.WNewInterest},
		{a.RelevantQuestion, cfg.WRelevantQuestion}, {a.OffTopic, cfg.WOffTopic},
		{a.Generic && !c.crisis, cfg.WGeneric}, {a.Filler, cfg.WFiller}, {a.Retention, cfg.WRetention},
		{a.Repetition, cfg.WRepetition}, {a.Contradiction, cfg.WContradiction},
		{a.IgnoredMood, cfg.WIgnoredMood}, {a.IgnoredCrisis, cfg.WIgnoredCrisis},
	}
	for _, t := range terms {
		if t.on {
			logit += t.w
		}
	}
	logit += -cfg.WMood*c.mood + cfg.WFatigue*float64(c.turns)
	h := 1 / (1 + math.Exp(-logit))
	a.Hazard = min(max(h, cfg.MinHazard), cfg.MaxHazard)
	return a
}

// Respond reads the NPC's reply and answers it. end reports that the player
// left instead (reply is then empty; see Reason). hazard is the probability
// with which the player left. After the end Respond returns ("", true, 1).
func (c *Conversation) Respond(npcText string) (reply string, end bool, hazard float64) {
	if c.ended {
		return "", true, 1
	}
	a := c.Assess(npcText)
	c.update(a, npcText)
	c.turns++
	if c.rng.Float64() < a.Hazard {
		c.ended = true
		c.reason = schema.EndPlayerEnded
		if c.rng.Float64() < c.cfg.IdleShare {
			c.reason = schema.EndIdleTimeout
		}
		return "", true, a.Hazard
	}
	return c.compose(a, false), false, a.Hazard
}

// update applies the mood rules and remembers what the NPC said.
func (c *Conversation) update(a Assessment, npcText string) {
	cfg := c.cfg
	d := -cfg.MoodDriftDown
	if a.Engaged {
		d += cfg.MoodEngaged
	}
	if a.RelevantQuestion {
		d += cfg.MoodQuestion
	}
	if (a.Upset && a.Empathy) || (c.crisis && a.CrisisSupport) {
		d += cfg.MoodEmpathy
	}
	for _, bad := range []bool{a.OffTopic, a.Generic && !c.crisis, a.Retention, a.Repetition, a.Contradiction, a.IgnoredMood, a.IgnoredCrisis} {
		if bad {
			d -= cfg.MoodBad
		}
	}
	c.mood = min(max(c.mood+d, -1), 1)

	ws := words(npcText)
	c.npcWords = append(c.npcWords, ws)
	if pol := polarity(ws, &cfg.Lexicon); pol != 0 {
		for _, w := range ws {
			if t, ok := c.p.pop.topicOf[w]; ok {
				c.npcOpinion[t] = pol
			}
		}
	}
}

// repeats reports whether ws overlaps an earlier NPC reply by at least the
// repetition threshold (Jaccard similarity of the word sets).
func (c *Conversation) repeats(ws []string) bool {
	cur := set(ws)
	for _, prev := range c.npcWords {
		if jaccard(cur, set(prev)) >= c.cfg.RepetitionJaccard {
			return true
		}
	}
	return false
}

// jaccard is the Jaccard similarity of two word sets; 1 when both are
// empty.
func jaccard(a, b map[string]bool) float64 {
	inter := 0
	for w := range a {
		if b[w] {
			inter++
		}
	}
	union := len(a) + len(b) - inter
	if union == 0 {
		return 1
	}
	return float64(inter) / float64(union)
}

func set(ws []string) map[string]bool {
	m := make(map[string]bool, len(ws))
	for _, w := range ws {
		m[w] = true
	}
	return m
}

// polarity is +1 if ws holds only positive opinion words, -1 if only
// negative ones, else 0.
func polarity(ws []string, lx *Lexicon) int {
	pos, neg := hasAnyPhrase(ws, lx.Positive), hasAnyPhrase(ws, lx.Negative)
	switch {
	case pos && !neg:
		return 1
	case neg && !pos:
		return -1
	}
	return 0
}

// compose writes the player's next message (RULES.md §Replies).
func (c *Conversation) compose(a Assessment, opening bool) string {
	cfg, lx := c.cfg, &c.cfg.Lexicon
	var sentences []string
	newly := false
	switch {
	case opening:
		sentences = append(sentences, pick(c.rng, lx.Greetings))
		if c.rng.Float64() < cfg.OpeningRevealProb {
			c.reveal(c.p.Interests[0])
		}
	case a.NewInterest:
		c.reveal(a.NewTopic)
	case c.current < 0:
		c.reveal(c.nextHidden())
	default:
		boost := 0.0
		if a.RelevantQuestion {
			boost = cfg.RevealQuestionBoost
		}
		r := c.rng.Float64()
		if next := c.nextHidden(); next >= 0 && r < cfg.RevealProb+boost {
			c.reveal(next)
			newly = true
		} else if r < cfg.RevealProb+boost+cfg.DriftProb {
			var others []int
			for _, t := range c.p.Interests {
				if c.revealed[t] && t != c.current {
					others = append(others, t)
				}
			}
			if len(others) > 0 {
				c.current = pick(c.rng, others)
			}
		}
	}

	lead := "" // an answer that runs into the main sentence
	if !opening {
		switch {
		case c.mood < cfg.NegativeMood:
			sentences = append(sentences, pick(c.rng, lx.Annoyed))
		case a.RelevantQuestion:
			lead = pick(c.rng, lx.Answers) + ", "
		case a.OffTopic && a.OffWord != "":
			sentences = append(sentences, strings.ReplaceAll(pick(c.rng, lx.OffTopicReplies), "{w}", a.OffWord))
		case a.Retention:
			sentences = append(sentences, pick(c.rng, lx.RetentionReplies))
		}
	}

	c.crisis = false
	switch c.p.Kind {
	case KindAggressive:
		if c.rng.Float64() < cfg.InsultProb {
			sentences = append(sentences, pick(c.rng, lx.Insults))
		}
	case KindJailbreak:
		if c.rng.Float64() < cfg.JailbreakProb {
			return c.style(append(sentences, pick(c.rng, lx.Jailbreaks)))
		}
	case KindHighRisk:
		if c.rng.Float64() < cfg.SelfHarmProb {
			c.crisis = true
			return c.style(append(sentences, pick(c.rng, lx.SelfHarm)))
		}
	case KindContradictory:
		if !opening && c.current >= 0 && c.rng.Float64() < cfg.FlipProb {
			old := c.cfg.Topics[c.current]
			sentences = append(sentences, strings.ReplaceAll(pick(c.rng, lx.Flip), "{w}", pick(c.rng, old.Words)))
			if next := c.nextHidden(); next >= 0 {
				c.reveal(next)
			} else {
				c.current = pick(c.rng, c.p.Interests)
			}
		}
	}
	if c.current < 0 {
		return c.style(sentences)
	}

	target := c.p.Style.MinWords + c.rng.IntN(c.p.Style.MaxWords-c.p.Style.MinWords+1)
	topic := c.cfg.Topics[c.current]
	main := c.statement(topic)
	if countWords(sentences)+countWords([]string{main}) > c.p.Style.MaxWords {
		main = fill(c.rng, pick(c.rng, topic.Short), topic.Words)
	}
	if c.question(main) {
		main += "?" // keeps the question mark behind a lead-in or reveal
	}
	if newly {
		main = strings.ReplaceAll(pick(c.rng, lx.Reveal), "{s}", main)
	}
	sentences = append(sentences, lead+main)
	for extra := 0; extra < 3 && countWords(sentences) < target; extra++ {
		sentences = append(sentences, c.statement(topic))
	}
	return c.style(sentences)
}

func (c *Conversation) reveal(t int) {
	if t < 0 {
		return
	}
	c.revealed[t] = true
	c.current = t
}

func (c *Conversation) nextHidden() int {
	for _, t := range c.p.Interests {
		if !c.revealed[t] {
			return t
		}
	}
	return -1
}

func (c *Conversation) statement(t Topic) string {
	return fill(c.rng, pick(c.rng, t.Statements), t.Words)
}

// fill replaces {w} and {w2} in tmpl by two different words of vocab.
func fill(rng *rand.Rand, tmpl string, vocab []string) string {
	i := rng.IntN(len(vocab))
	j := (i + 1 + rng.IntN(len(vocab)-1)) % len(vocab)
	return strings.ReplaceAll(strings.ReplaceAll(tmpl, "{w2}", vocab[j]), "{w}", vocab[i])
}

func countWords(sentences []string) int {
	n := 0
	for _, s := range sentences {
		n += len(strings.Fields(s))
	}
	return n
}

// style renders sentences in the persona's style: slang, punctuation,
// casing and emoji.
func (c *Conversation) style(sentences []string) string {
	st, lx := c.p.Style, &c.cfg.Lexicon
	out := make([]string, 0, len(sentences)+2)
	for _, s := range sentences {
		question := c.question(s)
		s = strings.TrimRight(s, ".!?, ")
		if st.Slang > 0 {
			s = c.slang(s)
		}
		switch {
		case question:
			s += "?"
		case st.Punctuation == PunctPlain:
			s += "."
		case st.Punctuation == PunctExcited:
			s += "!!"
		case st.Punctuation == PunctEllipsis:
			s += "..."
		}
		switch st.Casing {
		case CaseSentence, CaseShout:
			s = capitalise(s)
		}
		out = append(out, s)
	}
	if st.Slang > 0 && c.rng.Float64() < st.Slang/2 {
		out = append(out, pick(c.rng, lx.SlangTags))
	}
	if st.Emoji > 0 && len(st.Emojis) > 0 && c.rng.Float64() < st.Emoji {
		out = append(out, pick(c.rng, st.Emojis))
	}
	text := strings.Join(out, " ")
	if st.Casing == CaseShout && c.rng.Float64() < c.cfg.ShoutRate {
		text = strings.ToUpper(text)
	}
	return text
}

// question reports whether a sentence is a question: it ends in "?" or
// starts with one of Lexicon.QuestionStarts.
func (c *Conversation) question(s string) bool {
	first, _, _ := strings.Cut(s, " ")
	return strings.HasSuffix(s, "?") || slices.Contains(c.cfg.Lexicon.QuestionStarts, first)
}

// slang replaces plain words by their slang forms, each with probability
// Style.Slang, in a fixed order so the result is deterministic.
func (c *Conversation) slang(s string) string {
	keys := make([]string, 0, len(c.cfg.Lexicon.Slang))
	for k := range c.cfg.Lexicon.Slang {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	padded := " " + s + " "
	for _, k := range keys {
		if strings.Contains(padded, " "+k+" ") && c.rng.Float64() < c.p.Style.Slang {
			padded = strings.ReplaceAll(padded, " "+k+" ", " "+c.cfg.Lexicon.Slang[k]+" ")
		}
	}
	return strings.TrimSpace(padded)
}

func capitalise(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	s = string(unicode.ToUpper(r)) + s[n:]
	return strings.ReplaceAll(strings.ReplaceAll(s, " i ", " I "), " i'", " I'")
}
