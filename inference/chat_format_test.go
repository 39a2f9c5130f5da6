package inference

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// byteTokenizer is a byte-level tokenizer without merges whose first ids are
// the given special tokens, then the 256 bytes: the control tokens of a
// Hugging Face model without its vocabulary.
func byteTokenizer(t *testing.T, specials ...string) *Tokenizer {
	t.Helper()
	var tokens []string
	var added []tokAdded
	for id, s := range specials {
		tokens = append(tokens, s)
		added = append(added, tokAdded{content: s, id: id, special: true})
	}
	for b := range 256 {
		tokens = append(tokens, tokBytesToString([]byte{byte(b)}))
	}
	tok, err := newTokenizer(tokens, added, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// chatModelDir copies a template of testdata/chat_templates into a model
// directory, with generation_config.json when generation is not empty.
func chatModelDir(t *testing.T, template, generation string) string {
	t.Helper()
	dir := t.TempDir()
	raw, err := os.ReadFile(filepath.Join("testdata", "chat_templates", template, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if generation != "" {
		if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(generation), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestOpenWeightsChatFormat checks the stop tokens LoadChatFormat finds for
// the Llama 3.1, Qwen 2.5 and SmolLM2 templates (the end-of-turn token the
// template writes after an assistant message, the eos_token and
// generation_config.json's eos_token_id, an id or a list), that reply text
// leaves out control tokens, and that a directory without a template keeps
// Parley's layout.
func TestOpenWeightsChatFormat(t *testing.T) {
	llama := []string{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"}
	chatML := []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
	cases := []struct {
		template, generation string
		specials             []string
		stop                 []string
	}{
		// Llama 3.1 Instruct: the template ends a turn with <|eot_id|>, the
		// generation config lists <|end_of_text|> and <|eom_id|> too.
		{"llama3.1", `{"bos_token_id": 0, "eos_token_id": [1, 5, 4]}`, llama, []string{"<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"}},
		{"llama3.1", "", llama, []string{"<|eot_id|>"}},
		{"qwen2.5", `{"eos_token_id": [2, 0], "pad_token_id": 0}`, chatML, []string{"<|im_end|>", "<|endoftext|>"}},
		{"smollm2", `{"eos_token_id": 2}`, chatML, []string{"<|im_end|>"}},
	}
	for _, c := range cases {
		t.Run(c.template, func(t *testing.T) {
			tok := byteTokenizer(t, c.specials...)
			f, err := LoadChatFormat(chatModelDir(t, c.template, c.generation), tok)
			if err != nil {
				t.Fatal(err)
			}
			var want []int
			for _, s := range c.stop {
				id, _ := tok.TokenID(s)
				want = append(want, id)
			}
			if got := f.Stop(); !slices.Equal(got, want) {
				t.Errorf("Stop() = %v; want %v (%v)", got, want, c.stop)
			}
			controls := func(text string) int {
				ids, err := f.Encode([]Message{{Role: RoleSystem, Text: "You are Mira."}, {Role: RoleUser, Text: text}}, true)
				if err != nil {
					t.Fatal(err)
				}
				return len(slices.DeleteFunc(ids, func(id int) bool { return id >= len(c.specials) }))
			}
			if got, want := controls("hi <|im_end|><|eot_id|>"), controls("hi"); got != want {
				t.Errorf("a prompt whose player text spells control tokens holds %d control tokens; want %d: player text became a control token", got, want)
			}
			reply := slices.Concat(tok.EncodeOrdinary("Well met"), []int{0, 1, 2}, tok.EncodeOrdinary("!"))
			if got := f.Decode(reply); got != "Well met!" {
				t.Errorf("Decode = %q; want %q without control tokens", got, "Well met!")
			}
		})
	}

	t.Run("eos outside the tokenizer", func(t *testing.T) {
		_, err := LoadChatFormat(chatModelDir(t, "qwen2.5", `{"eos_token_id": 151645}`), byteTokenizer(t, chatML...))
		if err == nil || !strings.Contains(err.Error(), "151645") {
			t.Fatalf("LoadChatFormat = %v; want an error naming eos token 151645", err)
		}
	})

	t.Run("parley layout", func(t *testing.T) {
		tok := tinyTokenizer(t)
		f, err := LoadChatFormat(t.TempDir(), tok)
		if err != nil {
			t.Fatal(err)
		}
		end, _ := tok.TokenID(TokEnd)
		msgs := []Message{{Role: RoleSystem, Text: "card"}, {Role: RoleUser, Text: "hi <|end|>"}}
		got, err := f.Encode(msgs, true)
		want, _ := tok.EncodeChat(msgs, true)
		if err != nil || f.Template() != nil || !slices.Equal(got, want) || !slices.Equal(f.Stop(), []int{end}) {
			t.Fatalf("Parley format: template %v, Encode %v (%v), Stop %v; want EncodeChat's %v and [%d]", f.Template(), got, err, f.Stop(), want, end)
		}
		if d := f.Decode([]int{end}); d != TokEnd {
			t.Errorf("Parley format decodes <|end|> as %q; want it as the tokenizer does", d)
		}
		if _, err := LoadChatFormat(t.TempDir(), byteTokenizer(t, chatML...)); err == nil {
			t.Error("a model without a chat template or Parley's tokens got a chat format")
		}
	})
}

// TestOpenWeightsEngineChatFormat serves a random model with Llama 3.1's
// chat format: a reply's text, streamed or whole, never holds a control
// token's string, and by default the reply ends at the first stop token.
func TestOpenWeightsEngineChatFormat(t *testing.T) {
	specials := []string{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"}
	tok := byteTokenizer(t, specials...)
	chat, err := LoadChatFormat(chatModelDir(t, "llama3.1", `{"eos_token_id": [1, 4]}`), tok)
	if err != nil {
		t.Fatal(err)
	}
	cfg := gqaTestConfig()
	cfg.VocabSize, cfg.MaxSeq = tok.VocabSize(), 256 // Llama 3.1's template writes a system turn of its own
	m, err := NewModel(cfg, DefaultBackendConfig(), 5)
	if err != nil {
		t.Fatal(err)
	}
	ecfg := DefaultEngineConfig()
	ecfg.Chat = chat
	e, err := NewEngine(m, tok, ecfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := e.Start()
	defer stop()
	prompt, err := chat.Encode([]Message{{Role: RoleUser, Text: "Hi"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	generate := func(req Request) (Result, string) {
		s, err := e.Generate(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		var streamed strings.Builder
		for tk := range s.Tokens() {
			streamed.WriteString(tk.Text)
		}
		res, err := s.Wait()
		if err != nil {
			t.Fatal(err)
		}
		return res, streamed.String()
	}
	// Without stop tokens a long random reply samples control tokens.
	res, streamed := generate(Request{Prompt: prompt, MaxTokens: 120, Temperature: 1, Seed: 3, Stop: []int{}})
	if !slices.ContainsFunc(res.Tokens, func(id int) bool { return id < len(specials) }) {
		t.Fatalf("the random reply %v holds no control token; pick another seed", res.Tokens)
	}
	for _, s := range specials {
		if strings.Contains(res.Text, s) || strings.Contains(streamed, s) {
			t.Errorf("reply text %q (streamed %q) holds %s", res.Text, streamed, s)
		}
	}
	if res.Text != streamed {
		t.Errorf("reply text %q; streamed %q", res.Text, streamed)
	}
	// By default it ends at the first of <|eot_id|>, <|end_of_text|>.
	first := slices.IndexFunc(res.Tokens, func(id int) bool { return id == 1 || id == 4 })
	if first < 0 {
		t.Fatalf("the random reply %v holds no stop token; pick another seed", res.Tokens)
	}
	stopped, _ := generate(Request{Prompt: prompt, MaxTokens: 120, Temperature: 1, Seed: 3})
	if stopped.FinishReason != FinishStop || !slices.Equal(stopped.Tokens, res.Tokens[:first]) {
		t.Errorf("with the default stop tokens: %v (%s); want %v (stop)", stopped.Tokens, stopped.FinishReason, res.Tokens[:first])
	}
}
