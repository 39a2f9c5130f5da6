package gateway

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/learner"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/schema"
)

func TestBuildPromptKeepsTheNewestExchangesThatFit(t *testing.T) {
	tok := testTokenizer(t)
	p := testConfig("x").Personas["mira"]
	var hist []schema.Exchange
	for i := 1; i <= 40; i++ {
		hist = append(hist, schema.Exchange{Turn: i, User: fmt.Sprintf("question number %d", i), NPC: fmt.Sprintf("answer number %d", i)})
	}
	const maxSeq, reserve = 256, 32
	ids, err := buildPrompt(tok, p, hist, "the newest question", maxSeq, reserve)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids)+reserve > maxSeq {
		t.Errorf("prompt of %d tokens + %d reserved > context %d", len(ids), reserve, maxSeq)
	}
	text := tok.Decode(ids)
	for _, want := range []string{p.Card, p.Greeting, "answer number 40", "the newest question"} {
		if !strings.Contains(text, want) {
			t.Errorf("prompt lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "question number 1<") {
		t.Errorf("prompt kept the oldest exchange although the history does not fit:\n%s", text)
	}
	if !strings.HasSuffix(text, inference.TokUser+"the newest question"+inference.TokEnd+inference.TokNPC) {
		t.Errorf("prompt does not end with the user's message and the NPC marker:\n%s", text)
	}
	// Everything fits: nothing is dropped.
	ids, err = buildPrompt(tok, p, hist[:2], "hi", maxSeq, reserve)
	if err != nil || !strings.Contains(tok.Decode(ids), "question number 1<") {
		t.Errorf("short history was trimmed: %v\n%s", err, tok.Decode(ids))
	}
	// A message too long for the context is too large.
	if _, err := buildPrompt(tok, p, nil, strings.Repeat("dragon ", 300), maxSeq, reserve); err == nil {
		t.Error("a message longer than the context built a prompt")
	}
}

// TestBuildPromptFromTheCacheIsTheWholeEncoding builds the same prompt twice,
// the second time from cached turns: both are the encoding of the whole
// conversation at once.
func TestBuildPromptFromTheCacheIsTheWholeEncoding(t *testing.T) {
	tok := testTokenizer(t)
	p := testConfig("x").Personas["mira"]
	hist := []schema.Exchange{{Turn: 1, User: "hello there", NPC: "well met"}, {Turn: 2, User: "any news?", NPC: ""}}
	msgs := []inference.Message{{Role: inference.RoleSystem, Text: p.Card}, {Role: inference.RoleNPC, Text: p.Greeting}}
	for _, x := range hist {
		msgs = append(msgs, inference.Message{Role: inference.RoleUser, Text: x.User}, inference.Message{Role: inference.RoleNPC, Text: x.NPC})
	}
	want, err := tok.EncodeChat(append(msgs, inference.Message{Role: inference.RoleUser, Text: "and now?"}), true)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		got, err := buildPrompt(tok, p, hist, "and now?", 1024, 32)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("build %d = %v, %v; want %v", i+1, got, err, want)
		}
	}
}

// TestTheLearnerTrainsOnTheServedPrompt: the AT-GRPO cycle's prompt of a
// dialogue (learner.DefaultCycleConfig's card and greeting, rl's layout) is
// the gateway's prompt of the same dialogue with its default NPC, token for
// token, and the cycle samples turns as the gateway does. Without the
// greeting the mixed-quality first NPC of the loop run is a different
// policy: 3.0–3.2 exchanges with the players at L 6, served 4.1–4.2
// (docs/experiments/README.md, "The prompt RL trained on").
func TestTheLearnerTrainsOnTheServedPrompt(t *testing.T) {
	tok := testTokenizer(t)
	gc := DefaultConfig()
	p := gc.Personas[gc.DefaultNPC]
	hist := []schema.Exchange{{Turn: 1, User: "hello there", NPC: "well met"}, {Turn: 2, User: "any news?", NPC: "the bridge is out"}}
	want, err := buildPrompt(tok, p, hist, "and now?", 4096, 48)
	if err != nil {
		t.Fatal(err)
	}
	cc := learner.DefaultCycleConfig()
	pol, err := rl.NewModelPolicy(nil, tok, 4096, cc.Policy)
	if err != nil {
		t.Fatal(err)
	}
	st := rl.State{Prompt: &rl.Prompt{System: cc.DefaultCard, Greeting: cc.DefaultGreeting, Opening: "hello there"},
		History: []rl.Exchange{{NPC: "well met", User: "any news?"}, {NPC: "the bridge is out", User: "and now?"}}}
	got, err := pol.Encode(st)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("the cycle's prompt\n%q\nis not the served one\n%q", tok.Decode(got), tok.Decode(want))
	}
	sp, gs := cc.Policy.Sampling, gc.Sampling
	if sp.MaxTokens != gs.MaxTokens || sp.Temperature != gs.Temperature || sp.TopK != gs.TopK || sp.TopP != gs.TopP {
		t.Errorf("the cycle samples %+v; the gateway serves %+v", sp, gs)
	}
}

// TestTheLearnerTrainsOnTheServedPromptPastTheContext plays a conversation
// longer than the context, in Parley's layout and in a chat template: on
// every turn the cycle's policy renders the same prompt the gateway serves,
// the oldest exchanges left out in the same blocks.
func TestTheLearnerTrainsOnTheServedPromptPastTheContext(t *testing.T) {
	tok := testTokenizer(t)
	for _, chat := range []*inference.ChatFormat{inference.ParleyChatFormat(tok), chatMLFormat(t)} {
		p := testConfig("x").Personas["mira"]
		const maxSeq, reserve, turns = 256, 32, 30
		pc := learner.DefaultCycleConfig().Policy
		pc.Sampling.MaxTokens = reserve - 1 // the policy keeps one token more for the turn's end
		pol, err := rl.NewChatPolicy(nil, chat, maxSeq, pc)
		if err != nil {
			t.Fatal(err)
		}
		var hist []schema.Exchange
		st := rl.State{Prompt: &rl.Prompt{System: p.Card, Greeting: p.Greeting}}
		saturated := 0
		for turn := 1; turn <= turns; turn++ {
			user := fmt.Sprintf("question number %02d", turn)
			if turn == 1 {
				st.Prompt.Opening = user
			} else {
				st.History[len(st.History)-1].User = user
			}
			want, err := npcPrompt(chat, p, hist, user, maxSeq, reserve)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pol.Encode(st)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("template %v, turn %d: the cycle's prompt\n%q\nis not the served one\n%q", chat.Template() != nil, turn, tok.Decode(got), tok.Decode(want))
			}
			if full, _ := npcPrompt(chat, p, hist, user, 1<<20, reserve); len(full) > len(want) {
				saturated++
			}
			npc := fmt.Sprintf("answer number %02d", turn)
			hist = append(hist, schema.Exchange{Turn: turn, User: user, NPC: npc})
			st.History = append(st.History, rl.Exchange{NPC: npc})
		}
		if saturated < 10 {
			t.Fatalf("only %d of %d turns dropped history; the test needs a longer conversation", saturated, turns)
		}
	}
}

// TestPromptKeepsItsBeginningBetweenDrops plays a long conversation turn by
// turn, in Parley's layout and in a chat template: once the history no
// longer fits, a turn's prompt still begins with the last turn's prompt on
// about half the turns or more (the engine, which kept that prompt and its
// reply, then prefills only the new line), and every prompt fits. Dropping
// one exchange a turn would change the beginning on every turn.
func TestPromptKeepsItsBeginningBetweenDrops(t *testing.T) {
	tok := testTokenizer(t)
	for _, chat := range []*inference.ChatFormat{inference.ParleyChatFormat(tok), chatMLFormat(t)} {
		p := testConfig("x").Personas["mira"]
		const maxSeq, reserve, turns = 256, 32, 30
		var hist []schema.Exchange
		var last []int
		kept, saturated := 0, 0
		for turn := 1; turn <= turns; turn++ {
			user := fmt.Sprintf("question number %02d", turn)
			ids, err := npcPrompt(chat, p, hist, user, maxSeq, reserve)
			if err != nil {
				t.Fatal(err)
			}
			if len(ids)+reserve > maxSeq {
				t.Fatalf("turn %d: prompt of %d tokens + %d reserved > context %d", turn, len(ids), reserve, maxSeq)
			}
			full, err := npcPrompt(chat, p, hist, user, 1<<20, reserve)
			if err != nil {
				t.Fatal(err)
			}
			if len(full) > len(ids) {
				saturated++
				if last != nil && slices.Equal(ids[:min(len(last), len(ids))], last) {
					kept++
				}
			}
			hist = append(hist, schema.Exchange{Turn: turn, User: user, NPC: fmt.Sprintf("answer number %02d", turn)})
			last = ids
		}
		if saturated < 10 {
			t.Fatalf("only %d of %d turns dropped history; the test needs a longer conversation", saturated, turns)
		}
		if want := saturated/2 - 1; kept < want {
			t.Errorf("template %v: %d of %d turns past the context kept the last prompt's beginning; want at least %d", chat.Template() != nil, kept, saturated, want)
		}
	}
}
