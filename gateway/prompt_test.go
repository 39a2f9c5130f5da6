package gateway

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/parleyhq/parley/inference"
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
