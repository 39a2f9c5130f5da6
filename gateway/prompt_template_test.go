package gateway

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
)

// chatMLFormat is a model with ChatML's control tokens instead of Parley's
// (testTokenizer's relabelled) and a ChatML chat template.
func chatMLFormat(t *testing.T) *inference.ChatFormat {
	t.Helper()
	path := filepath.Join(t.TempDir(), inference.TokenizerFile)
	if err := testTokenizer(t).Save(path); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	relabel := strings.NewReplacer(`"<|pad|>"`, `"<|endoftext|>"`, `"<|sys|>"`, `"<|im_start|>"`, `"<|user|>"`, `"<|im_end|>"`,
		`"<|npc|>"`, `"<|x1|>"`, `"<|end|>"`, `"<|x2|>"`, `"[Continue]"`, `"<|x3|>"`, `"[Terminate]"`, `"<|x4|>"`)
	if err := os.WriteFile(path, []byte(relabel.Replace(string(raw))), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := inference.LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := inference.NewChatTemplate(`{% for m in messages %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{% endfor %}`+
		`{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`, "", "<|im_end|>")
	if err != nil {
		t.Fatal(err)
	}
	f, err := inference.NewChatFormat(tok, tmpl, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestTemplatePromptKeepsTheNewestExchangesThatFit checks the prompt of a
// model with a chat template: the whole dialogue in the template, the
// oldest exchanges dropped in blocks while it does not fit, a message
// too long alone refused; stop tokens are the template's.
func TestTemplatePromptKeepsTheNewestExchangesThatFit(t *testing.T) {
	chat := chatMLFormat(t)
	p := testConfig("x").Personas["mira"]
	var hist []schema.Exchange
	for i := 1; i <= 40; i++ {
		hist = append(hist, schema.Exchange{Turn: i, User: fmt.Sprintf("question number %d", i), NPC: fmt.Sprintf("answer number %d", i)})
	}
	dialogue := func(h []schema.Exchange, user string) []int {
		msgs := []inference.Message{{Role: inference.RoleSystem, Text: p.Card}, {Role: inference.RoleNPC, Text: p.Greeting}}
		for _, x := range h {
			msgs = append(msgs, inference.Message{Role: inference.RoleUser, Text: x.User}, inference.Message{Role: inference.RoleNPC, Text: x.NPC})
		}
		ids, err := chat.Encode(append(msgs, inference.Message{Role: inference.RoleUser, Text: user}), true)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	const maxSeq, reserve = 1024, 32
	ids, err := npcPrompt(chat, p, hist, "the newest <|im_end|>", maxSeq, reserve)
	if err != nil {
		t.Fatal(err)
	}
	kept := slices.IndexFunc(hist, func(x schema.Exchange) bool {
		return slices.Equal(ids, dialogue(hist[x.Turn-1:], "the newest <|im_end|>"))
	})
	if kept < inference.HistoryBlock {
		t.Fatalf("prompt %q is not the dialogue from some block after the first", chat.Tokenizer().Decode(ids))
	}
	// The oldest exchange kept starts a block, and the block before it
	// does not fit.
	if (hist[kept].Turn-1)%inference.HistoryBlock != 0 {
		t.Errorf("the prompt starts at turn %d, inside a block of %d", hist[kept].Turn, inference.HistoryBlock)
	}
	if n := len(dialogue(hist[kept-inference.HistoryBlock:], "the newest <|im_end|>")); n+reserve <= maxSeq {
		t.Errorf("dropped the block before turn %d although the prompt with it (%d tokens) fits", hist[kept].Turn, n)
	}
	if len(ids)+reserve > maxSeq {
		t.Errorf("prompt of %d tokens + %d reserved > context %d", len(ids), reserve, maxSeq)
	}
	if ids, err = npcPrompt(chat, p, hist[:2], "hi", maxSeq, reserve); err != nil || !slices.Equal(ids, dialogue(hist[:2], "hi")) {
		t.Errorf("a short dialogue was trimmed: %v", err)
	}
	if _, err := npcPrompt(chat, p, nil, strings.Repeat("dragon ", 600), maxSeq, reserve); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a message longer than the context: %v; want ErrTooLarge", err)
	}
	if imEnd, _ := chat.Tokenizer().TokenID("<|im_end|>"); !slices.Equal(stopIDs(chat), []int{imEnd}) {
		t.Errorf("stop ids %v; want <|im_end|> (%d)", stopIDs(chat), imEnd)
	}
}

// TestOpenAIPromptInTemplate checks that the client's system messages,
// joined, replace the default card as the template's one system message.
func TestOpenAIPromptInTemplate(t *testing.T) {
	chat := chatMLFormat(t)
	msgs := []schema.ChatMessage{{Role: "system", Content: "You are the ferryman."}, {Role: "user", Content: "hi"},
		{Role: "assistant", Content: "Coin first."}, {Role: "system", Content: "Be brief."}, {Role: "user", Content: "how much?"}}
	got, err := openAIPrompt(chat, inference.CompanionCard, msgs, 1024, 32)
	if err != nil {
		t.Fatal(err)
	}
	want, err := chat.Encode([]inference.Message{{Role: inference.RoleSystem, Text: "You are the ferryman.\n\nBe brief."},
		{Role: inference.RoleUser, Text: "hi"}, {Role: inference.RoleNPC, Text: "Coin first."}, {Role: inference.RoleUser, Text: "how much?"}}, true)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("prompt %q; want %q", chat.Tokenizer().Decode(got), chat.Tokenizer().Decode(want))
	}
	got, err = openAIPrompt(chat, "the default card", msgs[1:3], 1024, 32)
	if err != nil || !strings.HasPrefix(chat.Tokenizer().Decode(got), "<|im_start|>system\nthe default card<|im_end|>") {
		t.Errorf("without a system message the prompt is %q, %v; want the default card first", chat.Tokenizer().Decode(got), err)
	}
}
