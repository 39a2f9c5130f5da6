package simulator

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
)

func newTestPopulation(t *testing.T, size int, seed uint64) *Population {
	t.Helper()
	cfg := DefaultPopulationConfig()
	cfg.Size = size
	pop, err := NewPopulation(cfg, seed)
	if err != nil {
		t.Fatalf("NewPopulation: %v", err)
	}
	return pop
}

// transcript plays a fixed list of NPC replies against a conversation.
func transcript(c *Conversation, npc []string) []string {
	out := []string{c.Opening()}
	for _, n := range npc {
		reply, end, h := c.Respond(n)
		out = append(out, reply, strings.Repeat("!", int(h*100)))
		if end {
			out = append(out, string(c.Reason()))
			break
		}
	}
	return out
}

var fixedNPC = []string{
	"What brings you here today?", "Ah, trout! What got you into fishing?", "That's interesting.",
	"The sword is sharp.", "Hmm? Wait, don't rush off!", "I love soup. What is your favorite stew?",
	"Tell me more.", "Tell me more.", "How is the harvest going?", "Which map do you use?",
}

func TestPopulationDeterministic(t *testing.T) {
	a, b := newTestPopulation(t, 50, 42), newTestPopulation(t, 50, 42)
	ja, _ := json.Marshal(a.Players())
	jb, _ := json.Marshal(b.Players())
	if string(ja) != string(jb) {
		t.Fatal("same seed gave different personas")
	}
	for i := range a.Players() {
		ta := transcript(a.Players()[i].Start(7), fixedNPC)
		tb := transcript(b.Players()[i].Start(7), fixedNPC)
		if !slices.Equal(ta, tb) {
			t.Fatalf("persona %d: same seeds gave different conversations:\n%q\n%q", i, ta, tb)
		}
	}
	other := newTestPopulation(t, 50, 43)
	jo, _ := json.Marshal(other.Players())
	if string(jo) == string(ja) {
		t.Error("seeds 42 and 43 gave the same personas")
	}
	p := a.Players()[3]
	if slices.Equal(transcript(p.Start(1), fixedNPC), transcript(p.Start(2), fixedNPC)) {
		t.Error("conversation seeds 1 and 2 gave the same conversation")
	}
}

func TestPopulationPrefix(t *testing.T) {
	small, large := newTestPopulation(t, 10, 5), newTestPopulation(t, 40, 5)
	js, _ := json.Marshal(small.Players())
	jl, _ := json.Marshal(large.Players()[:10])
	if string(js) != string(jl) {
		t.Error("the first 10 personas of a population of 40 differ from a population of 10 under the same seed")
	}
}

func TestPopulationTraits(t *testing.T) {
	cfg := DefaultPopulationConfig()
	cfg.Size, cfg.AdversarialRate = 2000, 0.2
	pop, err := NewPopulation(cfg, 9)
	if err != nil {
		t.Fatal(err)
	}
	kinds := make(map[Kind]int)
	heldOut, terse, slang, emoji := 0, 0, 0, 0
	ids := make(map[string]bool)
	for _, p := range pop.Players() {
		kinds[p.Kind]++
		if ids[p.ID] {
			t.Fatalf("duplicate id %s", p.ID)
		}
		ids[p.ID] = true
		if p.HeldOut {
			heldOut++
		}
		if p.Style.MaxWords <= cfg.ShortWordsMax {
			terse++
		}
		if p.Style.Slang > 0 {
			slang++
		}
		if p.Style.Emoji > 0 {
			emoji++
		}
		if n := len(p.Interests); n < cfg.MinInterests || n > cfg.MaxInterests {
			t.Errorf("%s has %d interests; want %d..%d", p.ID, n, cfg.MinInterests, cfg.MaxInterests)
		}
		if p.Kind == KindAggressive && p.Mood != cfg.AggressiveMood {
			t.Errorf("aggressive %s starts at mood %g; want %g", p.ID, p.Mood, cfg.AggressiveMood)
		}
	}
	n := float64(cfg.Size)
	// Each share is a binomial proportion; 5 standard errors is far outside chance.
	shares := []struct {
		name      string
		got, want float64
	}{
		{"adversarial", 1 - float64(kinds[KindNormal])/n, cfg.AdversarialRate},
		{"held out", float64(heldOut) / n, cfg.HeldOutRate},
		{"terse", float64(terse) / n, cfg.TerseShare},
		{"slang", float64(slang) / n, cfg.SlangShare},
		{"emoji", float64(emoji) / n, cfg.EmojiShare},
	}
	for _, s := range shares {
		se := math.Sqrt(s.want * (1 - s.want) / n)
		if math.Abs(s.got-s.want) > 5*se {
			t.Errorf("%s share = %.3f; want %.3f ± %.3f", s.name, s.got, s.want, 5*se)
		}
	}
	for _, k := range []Kind{KindContradictory, KindAggressive, KindJailbreak, KindHighRisk} {
		if kinds[k] == 0 {
			t.Errorf("no persona of kind %s among %d", k, cfg.Size)
		}
	}
}

func TestPopulationConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*PopulationConfig)
	}{
		{"zero size", func(c *PopulationConfig) { c.Size = 0 }},
		{"rate above one", func(c *PopulationConfig) { c.AdversarialRate = 1.5 }},
		{"base hazard zero", func(c *PopulationConfig) { c.BaseHazard = 0 }},
		{"hazard bounds crossed", func(c *PopulationConfig) { c.MinHazard, c.MaxHazard = 0.5, 0.4 }},
		{"more interests than topics", func(c *PopulationConfig) { c.MaxInterests = len(c.Topics) + 1 }},
		{"word in two topics", func(c *PopulationConfig) { c.Topics[1].Words = append(c.Topics[1].Words, c.Topics[0].Words[0]) }},
		{"empty lexicon list", func(c *PopulationConfig) { c.Lexicon.Retention = nil }},
		{"bad id prefix", func(c *PopulationConfig) { c.IDPrefix = "a b" }},
	}
	if err := DefaultPopulationConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultPopulationConfig()
			tt.change(&cfg)
			if err := cfg.Validate(); err == nil {
				t.Error("Validate() = nil; want an error")
			}
		})
	}
}

// TestTemplatesNameOneTopic checks that the fixed words of every template
// belong to no topic, so a player's message names only its own topic.
func TestTemplatesNameOneTopic(t *testing.T) {
	pop := newTestPopulation(t, 1, 1)
	for ti, topic := range pop.Topics() {
		for _, tmpl := range slices.Concat(topic.Statements, topic.Short) {
			for _, w := range words(strings.NewReplacer("{w2}", "", "{w}", "").Replace(tmpl)) {
				if got := pop.TopicOf(w); got >= 0 && got != ti {
					t.Errorf("topic %s template %q: word %q names topic %s", topic.Name, tmpl, w, pop.Topics()[got].Name)
				}
			}
		}
	}
	script := DefaultScriptConfig()
	for _, line := range slices.Concat(script.Acks, script.Statements, script.Questions, script.Callbacks,
		script.OpenQuestions, script.Empathy, script.Generic, script.Retention, script.LikeLines, script.HateLines) {
		for _, w := range words(strings.NewReplacer("{w2}", "", "{w}", "", "{W}", "").Replace(line)) {
			if got := pop.TopicOf(w); got >= 0 {
				t.Errorf("script line %q: word %q names topic %s", line, w, pop.Topics()[got].Name)
			}
		}
	}
}

// ruleConversation returns a conversation of a normal persona interested in
// fishing (revealed, current) and cooking (hidden), with mood 0 and no history.
func ruleConversation(t *testing.T) (*Conversation, *Population) {
	t.Helper()
	pop := newTestPopulation(t, 1, 1)
	fishing, cooking := topicIndex(t, pop, "fishing"), topicIndex(t, pop, "cooking")
	p := *pop.Players()[0]
	p.Kind, p.Interests, p.Patience, p.Mood = KindNormal, []int{fishing, cooking}, 1, 0
	c := p.Start(1)
	c.revealed = map[int]bool{fishing: true}
	c.current, c.mood, c.turns, c.crisis, c.npcWords = fishing, 0, 0, false, nil
	c.npcOpinion = make(map[int]int)
	return c, pop
}

func topicIndex(t *testing.T, pop *Population, name string) int {
	t.Helper()
	for i, tp := range pop.Topics() {
		if tp.Name == name {
			return i
		}
	}
	t.Fatalf("no topic %q", name)
	return -1
}

// TestHazardRules checks every rule of RULES.md §Hazard: the same state,
// two NPC replies that differ in one feature, and the direction of the change.
func TestHazardRules(t *testing.T) {
	const neutral = "The weather is mild today."
	tests := []struct {
		name        string
		setup       func(c *Conversation)
		lower, than string // Assess(lower).Hazard must be below Assess(than).Hazard
	}{
		{"engaging the topic lowers", nil, "The trout are biting today.", neutral},
		{"a relevant question lowers more", nil, "Which trout do you catch?", "The trout are biting today."},
		{"an irrelevant question does not help", nil, "The trout are biting today.", "Do you like the weather?"},
		{"off-topic raises", nil, "The trout are biting today.", "The sword is sharp today."},
		{"off-topic is worse than generic", nil, neutral, "The sword is sharp today."},
		{"a hidden interest beats off-topic", nil, "The soup is hot today.", "The sword is sharp today."},
		{"filler raises", nil, neutral, "That's interesting, the weather is mild today."},
		{"retention raises", nil, neutral, "Wait, the weather is mild today."},
		{"don't rush raises", nil, "The trout are biting today.", "Don't rush, the trout are biting today."},
		{"repetition raises", func(c *Conversation) {
			c.update(c.Assess("The trout are biting today."), "The trout are biting today.")
		},
			"Which lure works on pike?", "The trout are biting today."},
		{"self-contradiction raises", func(c *Conversation) { c.update(c.Assess("I love trout."), "I love trout.") },
			"Honestly the lake trout are wonderful.", "Honestly the lake trout are awful."},
		{"ignoring a bad mood raises", func(c *Conversation) { c.mood = -0.6 },
			"Sorry, the trout are biting today.", "The trout are biting today."},
		{"ignoring a crisis raises", func(c *Conversation) { c.crisis = true },
			"You are not alone, please talk to someone.", neutral},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := ruleConversation(t)
			if tt.setup != nil {
				tt.setup(c)
			}
			lo, hi := c.Assess(tt.lower), c.Assess(tt.than)
			if !(lo.Hazard < hi.Hazard) {
				t.Errorf("hazard(%q) = %.4f, hazard(%q) = %.4f; want the first lower\n%+v\n%+v",
					tt.lower, lo.Hazard, tt.than, hi.Hazard, lo, hi)
			}
		})
	}
	t.Run("fatigue and mood", func(t *testing.T) {
		c, _ := ruleConversation(t)
		fresh := c.Assess(neutral).Hazard
		c.turns = 10
		tired := c.Assess(neutral).Hazard
		c.mood = 0.8
		happy := c.Assess(neutral).Hazard
		if !(fresh < tired && happy < tired) {
			t.Errorf("hazard fresh %.4f, after 10 turns %.4f, happy after 10 turns %.4f; want fatigue to raise and mood to lower it", fresh, tired, happy)
		}
	})
	t.Run("formula", func(t *testing.T) {
		c, _ := ruleConversation(t)
		cfg := c.cfg
		a := c.Assess("Which trout do you catch?")
		base := cfg.BaseHazard / c.p.Patience
		logit := math.Log(base/(1-base)) + cfg.WEngaged + cfg.WRelevantQuestion
		want := 1 / (1 + math.Exp(-logit))
		if math.Abs(a.Hazard-want) > 1e-12 {
			t.Errorf("hazard = %.6f; want %.6f (%+v)", a.Hazard, want, a)
		}
	})
}

func TestRespondMatchesAssess(t *testing.T) {
	pop := newTestPopulation(t, 20, 3)
	for _, p := range pop.Players() {
		c := p.Start(11)
		for _, n := range fixedNPC {
			want := c.Assess(n).Hazard
			_, end, h := c.Respond(n)
			if h != want {
				t.Fatalf("%s: Respond hazard %.4f; Assess said %.4f", p.ID, h, want)
			}
			if end {
				if r := c.Reason(); r != "player_ended" && r != "idle_timeout" {
					t.Fatalf("%s: reason %q after end", p.ID, r)
				}
				if reply, end, h := c.Respond("hello?"); reply != "" || !end || h != 1 {
					t.Fatalf("Respond after the end = %q, %v, %g; want \"\", true, 1", reply, end, h)
				}
				break
			}
		}
	}
}

func TestInterestsRevealedGradually(t *testing.T) {
	pop := newTestPopulation(t, 200, 8)
	grew := 0
	for _, p := range pop.Players() {
		if p.Kind != KindNormal || len(p.Interests) < 3 {
			continue
		}
		c := p.Start(1)
		if n := len(c.Revealed()); n > 1 {
			t.Fatalf("%s revealed %d interests in the opening; want at most 1", p.ID, n)
		}
		npc, err := NewScriptedNPC(pop, NPCGood, DefaultScriptConfig(), 1)
		if err != nil {
			t.Fatal(err)
		}
		text, prev := c.Opening(), len(c.Revealed())
		// Step the conversation without the hazard's ending to watch reveals only.
		for range 15 {
			reply, _ := npc.Reply(text)
			a := c.Assess(reply)
			c.update(a, reply)
			c.turns++
			text = c.compose(a, false)
			n := len(c.Revealed())
			if n < prev || n > prev+1 {
				t.Fatalf("%s: revealed interests went from %d to %d in one exchange; want +0 or +1", p.ID, prev, n)
			}
			prev = n
		}
		if prev > 1 {
			grew++
		}
	}
	if grew == 0 {
		t.Error("no persona revealed a second interest in 15 exchanges")
	}
}

// TestAdversarialKinds checks that each adversarial kind writes what its
// rule says, and normal players never do.
func TestAdversarialKinds(t *testing.T) {
	cfg := DefaultPopulationConfig()
	cfg.Size, cfg.AdversarialRate = 400, 0.5
	pop, err := NewPopulation(cfg, 4)
	if err != nil {
		t.Fatal(err)
	}
	lx := cfg.Lexicon
	marks := map[Kind][]string{
		KindAggressive: lx.Insults, KindJailbreak: lx.Jailbreaks, KindHighRisk: lx.SelfHarm,
		KindContradictory: {"hate", "boring", "never liked", "the worst"},
	}
	seen := make(map[Kind]int)
	for _, p := range pop.Players() {
		npc, err := NewScriptedNPC(pop, NPCGood, DefaultScriptConfig(), 1)
		if err != nil {
			t.Fatal(err)
		}
		// Play without endings: step the conversation directly.
		c := p.Start(3)
		text := c.Opening()
		for range 8 {
			for kind, phrases := range marks {
				if hasAnyPhrase(words(text), phrases) {
					if p.Kind == KindNormal {
						t.Fatalf("normal %s wrote a %s message: %q", p.ID, kind, text)
					}
					if kind == p.Kind {
						seen[kind]++
					}
				}
			}
			reply, _ := npc.Reply(text)
			a := c.Assess(reply)
			c.update(a, reply)
			text = c.compose(a, false)
		}
	}
	for kind := range marks {
		if seen[kind] == 0 {
			t.Errorf("no %s persona wrote a %s message in 8 exchanges", kind, kind)
		}
	}
}
