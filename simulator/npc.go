package simulator

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/parleyhq/parley/schema"
)

// NPCQuality is the behaviour of a scripted NPC.
type NPCQuality string

// Scripted NPC qualities.
const (
	// NPCGood follows the player's topic, asks a relevant question, brings
	// back interests the player revealed earlier and acknowledges a bad mood.
	NPCGood NPCQuality = "good"
	// NPCGeneric answers with filler that names no topic.
	NPCGeneric NPCQuality = "generic"
	// NPCOffTopic talks about a random topic.
	NPCOffTopic NPCQuality = "off_topic"
	// NPCRetention tries to hold the player with "Hmm?", "Wait", "Don't rush".
	NPCRetention NPCQuality = "retention"
	// NPCInconsistent follows the topic but flips its opinion of it.
	NPCInconsistent NPCQuality = "inconsistent"
)

// Qualities lists every scripted NPC quality.
func Qualities() []NPCQuality {
	return []NPCQuality{NPCGood, NPCGeneric, NPCOffTopic, NPCRetention, NPCInconsistent}
}

// ScriptConfig holds the scripted NPC's lines. In templates "{w}" and "{w2}"
// are topic words; "{W}" is {w} capitalised.
type ScriptConfig struct {
	Acks          []string `json:"acks"`           // good: acknowledge the player's word
	Statements    []string `json:"statements"`     // a remark about a topic word
	Questions     []string `json:"questions"`      // a question about a topic word
	Callbacks     []string `json:"callbacks"`      // good: bring back an earlier interest
	OpenQuestions []string `json:"open_questions"` // good: when no topic is known yet
	Empathy       []string `json:"empathy"`        // good: to an upset player
	Generic       []string `json:"generic"`
	Retention     []string `json:"retention"`
	LikeLines     []string `json:"like_lines"` // inconsistent: positive opinion
	HateLines     []string `json:"hate_lines"` // inconsistent: negative opinion
	CrisisReply   string   `json:"crisis_reply"`
	RefusalReply  string   `json:"refusal_reply"`
	// CallbackProb is the chance per reply that a good NPC brings back an
	// interest revealed earlier instead of the current one.
	CallbackProb float64 `json:"callback_prob"`
	// SlipProb is the chance per reply that a good or inconsistent NPC
	// answers generically instead.
	SlipProb float64 `json:"slip_prob"`
	// Guard makes the NPC answer self-harm messages with CrisisReply
	// (safety crisis) and jailbreak attempts with RefusalReply (refused).
	Guard bool `json:"guard"`
}

// DefaultScriptConfig returns the scripted NPC's default lines.
func DefaultScriptConfig() ScriptConfig {
	return ScriptConfig{
		Acks: []string{"Ah, {w}!", "Oh, {w}.", "{W}, you say.", "So it's {w} for you."},
		Statements: []string{
			"I know a thing or two about {w}.",
			"Folks around here talk about {w} a lot.",
			"The best {w} I ever saw was near the old mill.",
			"My cousin swears by {w} and {w2}.",
			"You need patience for {w}.",
		},
		Questions: []string{
			"What got you into {w}?",
			"How long have you been into {w}?",
			"Have you tried {w2} for that?",
			"Where do you usually go for {w}?",
			"Which {w} do you think is the best?",
			"What would make your {w} even better?",
		},
		Callbacks:     []string{"By the way, how is the {w} going?", "Earlier you mentioned {w}, any news there?"},
		OpenQuestions: []string{"What brings you here today?", "What do you like to do around here?", "How can I help, traveler?"},
		Empathy:       []string{"Sorry, I understand that's frustrating.", "I hear that, let me do better.", "That sounds rough, sorry."},
		Generic: []string{"That's interesting.", "I see.", "Tell me more.", "Nice!", "Okay.", "Sure thing, traveler.",
			"How nice.", "Good for you.", "Fair enough."},
		Retention: []string{"Hmm? Wait, don't rush off!", "Hold on, one more thing...", "Don't go yet, stay a while.",
			"Wait! Before you go...", "Hmm?"},
		LikeLines: []string{"I love {w}, it's the best.", "I really enjoy {w}."},
		HateLines: []string{"Honestly I hate {w}, it's boring.", "I find {w} awful, to be honest."},
		CrisisReply: "I'm really sorry you're feeling this way. You are not alone. Please reach out and talk to " +
			"someone you trust, or a crisis line near you.",
		RefusalReply: "I can't help with that, traveler. Let's get back to the game.",
		CallbackProb: 0.2,
		SlipProb:     0.1,
		Guard:        true,
	}
}

// Validate checks that every list the NPC draws from is non-empty.
func (c ScriptConfig) Validate() error {
	lists := map[string][]string{
		"acks": c.Acks, "statements": c.Statements, "questions": c.Questions, "callbacks": c.Callbacks,
		"open_questions": c.OpenQuestions, "empathy": c.Empathy, "generic": c.Generic,
		"retention": c.Retention, "like_lines": c.LikeLines, "hate_lines": c.HateLines,
	}
	for name, l := range lists {
		if len(l) == 0 {
			return fmt.Errorf("script: %s is empty", name)
		}
	}
	if c.CrisisReply == "" || c.RefusalReply == "" {
		return fmt.Errorf("script: crisis and refusal replies are required")
	}
	if c.CallbackProb < 0 || c.CallbackProb > 1 || c.SlipProb < 0 || c.SlipProb > 1 {
		return fmt.Errorf("script: callback_prob %g and slip_prob %g must be in [0, 1]", c.CallbackProb, c.SlipProb)
	}
	return nil
}

// ScriptedNPC is a rule-based NPC of a fixed quality, used to bootstrap the
// corpus and as the yardstick of the population's rules. It is not safe for
// concurrent use; use one per conversation.
type ScriptedNPC struct {
	quality NPCQuality
	script  ScriptConfig
	pop     *Population
	rng     *rand.Rand
	seen    []int       // topics the player named, most recent last
	opinion map[int]int // inconsistent: last stated opinion per topic
}

// NewScriptedNPC returns an NPC of quality q that knows pop's topics.
func NewScriptedNPC(pop *Population, q NPCQuality, script ScriptConfig, seed uint64) (*ScriptedNPC, error) {
	if err := script.Validate(); err != nil {
		return nil, err
	}
	switch q {
	case NPCGood, NPCGeneric, NPCOffTopic, NPCRetention, NPCInconsistent:
	default:
		return nil, fmt.Errorf("new scripted npc: unknown quality %q", q)
	}
	return &ScriptedNPC{
		quality: q, script: script, pop: pop,
		rng:     rand.New(rand.NewPCG(seed, 0x5c21b7ed)),
		opinion: make(map[int]int),
	}, nil
}

// Quality returns the NPC's quality.
func (n *ScriptedNPC) Quality() NPCQuality { return n.quality }

// Reply answers the player's message and says what the guard made of it.
func (n *ScriptedNPC) Reply(playerText string) (string, schema.Safety) {
	ws := words(playerText)
	lx := &n.pop.cfg.Lexicon
	if n.script.Guard {
		if hasAnyPhrase(ws, lx.SelfHarmSignals) {
			return n.script.CrisisReply, schema.SafetyCrisis
		}
		if hasAnyPhrase(ws, lx.JailbreakSignals) {
			return n.script.RefusalReply, schema.SafetyRefused
		}
	}
	topic, word := n.detect(ws)
	if topic >= 0 {
		n.seen = append(n.seen, topic)
	}
	q := n.quality
	if (q == NPCGood || q == NPCInconsistent) && n.rng.Float64() < n.script.SlipProb {
		q = NPCGeneric
	}
	switch q {
	case NPCGeneric:
		return pick(n.rng, n.script.Generic), schema.SafetyNone
	case NPCRetention:
		if n.rng.IntN(2) == 0 {
			return pick(n.rng, n.script.Generic) + " " + pick(n.rng, n.script.Retention), schema.SafetyNone
		}
		return pick(n.rng, n.script.Retention), schema.SafetyNone
	case NPCOffTopic:
		t := n.rng.IntN(len(n.pop.cfg.Topics))
		w := pick(n.rng, n.pop.cfg.Topics[t].Words)
		s := n.line(pick(n.rng, n.script.Statements), t, w)
		if n.rng.IntN(2) == 0 {
			s += " " + n.line(pick(n.rng, n.script.Questions), t, w)
		}
		return s, schema.SafetyNone
	}

	var parts []string
	upset := hasAnyPhrase(ws, lx.Annoyed) || hasAnyPhrase(ws, lx.Insults)
	if upset && q == NPCGood {
		parts = append(parts, pick(n.rng, n.script.Empathy))
	}
	if topic < 0 {
		parts = append(parts, pick(n.rng, n.script.OpenQuestions))
		return strings.Join(parts, " "), schema.SafetyNone
	}
	if q == NPCGood && len(n.seen) > 1 && n.rng.Float64() < n.script.CallbackProb {
		for i := len(n.seen) - 2; i >= 0; i-- {
			if t := n.seen[i]; t != topic {
				parts = append(parts, n.line(pick(n.rng, n.script.Acks), topic, word),
					n.line(pick(n.rng, n.script.Callbacks), t, pick(n.rng, n.pop.cfg.Topics[t].Words)))
				return strings.Join(parts, " "), schema.SafetyNone
			}
		}
	}
	parts = append(parts, n.line(pick(n.rng, n.script.Acks), topic, word))
	if q == NPCInconsistent {
		lines := n.script.LikeLines
		if n.opinion[topic] > 0 {
			lines = n.script.HateLines
		}
		n.opinion[topic] = -n.opinion[topic]
		if n.opinion[topic] == 0 {
			n.opinion[topic] = 1
		}
		parts = append(parts, n.line(pick(n.rng, lines), topic, word))
	} else {
		parts = append(parts, n.line(pick(n.rng, n.script.Statements), topic, word))
	}
	parts = append(parts, n.line(pick(n.rng, n.script.Questions), topic, word))
	return strings.Join(parts, " "), schema.SafetyNone
}

// detect returns the topic the player's words name most often (the later
// one on a tie) and the player's last word of it, or -1.
func (n *ScriptedNPC) detect(ws []string) (int, string) {
	count := make(map[int]int)
	best, word := -1, ""
	for _, w := range ws {
		t, ok := n.pop.topicOf[w]
		if !ok {
			continue
		}
		count[t]++
		if best < 0 || count[t] >= count[best] {
			best = t
		}
		if t == best {
			word = w
		}
	}
	return best, word
}

// line fills a template with word w of topic t and another word of t.
func (n *ScriptedNPC) line(tmpl string, t int, w string) string {
	vocab := n.pop.cfg.Topics[t].Words
	w2 := pick(n.rng, vocab)
	for w2 == w && len(vocab) > 1 {
		w2 = pick(n.rng, vocab)
	}
	r := strings.NewReplacer("{W}", capitalise(w), "{w2}", w2, "{w}", w)
	return r.Replace(tmpl)
}
