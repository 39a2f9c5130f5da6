package inference

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// ErrNoChatTemplate reports a model directory whose tokenizer_config.json
// (or chat_template.jinja) holds no chat template.
var ErrNoChatTemplate = errors.New("inference: no chat template")

// ChatTemplate is a Hugging Face model's chat template: the Jinja template
// from its tokenizer_config.json, rendered by github.com/ardanlabs/jinja
// with the variables transformers' apply_chat_template passes (messages,
// add_generation_prompt, bos_token, eos_token). A ChatTemplate is safe for
// concurrent use.
type ChatTemplate struct {
	tmpl     *jinja.Template
	bosToken any // string, or nil where the model has none
	eosToken any
}

// hfTokenizerConfig is the part of tokenizer_config.json a chat template
// needs. chat_template is a string, or a list of named templates; the tokens
// are strings or serialized AddedTokens ({"content": ...}).
type hfTokenizerConfig struct {
	ChatTemplate json.RawMessage `json:"chat_template"`
	BOSToken     json.RawMessage `json:"bos_token"`
	EOSToken     json.RawMessage `json:"eos_token"`
}

// LoadChatTemplate reads the chat template of a Hugging Face model
// directory: chat_template.jinja if present (as transformers writes it since
// 4.43), else tokenizer_config.json's chat_template (its "default" entry
// when it is a list), with the bos_token and eos_token that file names.
func LoadChatTemplate(dir string) (*ChatTemplate, error) {
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("load chat template: %w", err)
	}
	var cfg hfTokenizerConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("load chat template %q: %w", cfgPath, err)
	}
	bos, err := hfConfigToken(cfg.BOSToken)
	if err != nil {
		return nil, fmt.Errorf("load chat template %q: bos_token: %w", cfgPath, err)
	}
	eos, err := hfConfigToken(cfg.EOSToken)
	if err != nil {
		return nil, fmt.Errorf("load chat template %q: eos_token: %w", cfgPath, err)
	}
	source, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja"))
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist):
		s, err := hfConfigTemplate(cfg.ChatTemplate)
		if err != nil {
			return nil, fmt.Errorf("load chat template %q: %w", cfgPath, err)
		}
		source = []byte(s)
	default:
		return nil, fmt.Errorf("load chat template: %w", err)
	}
	c, err := NewChatTemplate(string(source), bos, eos)
	if err != nil {
		return nil, fmt.Errorf("load chat template from %q: %w", dir, err)
	}
	return c, nil
}

// NewChatTemplate compiles a Jinja chat template. bosToken and eosToken are
// what the template sees as bos_token and eos_token; "" passes none.
func NewChatTemplate(source, bosToken, eosToken string) (*ChatTemplate, error) {
	tmpl, err := jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("compile chat template: %w", err)
	}
	c := &ChatTemplate{tmpl: tmpl}
	if bosToken != "" {
		c.bosToken = bosToken
	}
	if eosToken != "" {
		c.eosToken = eosToken
	}
	return c, nil
}

// hfConfigTemplate picks the template out of chat_template.
func hfConfigTemplate(raw json.RawMessage) (string, error) {
	if isJSONNull(raw) {
		return "", ErrNoChatTemplate
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("chat_template is neither a string nor a list of named templates: %w", err)
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", fmt.Errorf("chat_template has no template named default: %w", ErrNoChatTemplate)
}

// hfConfigToken reads a special token of tokenizer_config.json: a string, an
// object with its content, or null ("").
func hfConfigToken(raw json.RawMessage) (string, error) {
	if isJSONNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var added struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &added); err != nil {
		return "", fmt.Errorf("token %s is neither a string nor an added token: %w", raw, err)
	}
	return added.Content, nil
}

// hfRole maps a Parley role to the one Hugging Face templates know: the NPC
// is the assistant; other roles pass as they are.
func hfRole(role string) string {
	if role == RoleNPC {
		return "assistant"
	}
	return role
}

// Render renders msgs in the template, ending with the opening of the
// assistant's (the NPC's) turn when addGenerationPrompt is set. A template's
// raise_exception, for a dialogue it does not accept, is an error. The text is
// the template's literal output: encoding it with Encode turns control-token
// strings inside a message into control tokens, which Encode on the
// ChatTemplate avoids.
func (c *ChatTemplate) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	return c.render(msgs, addGenerationPrompt, func(s string) string { return s })
}

func (c *ChatTemplate) render(msgs []Message, addGenerationPrompt bool, content func(string) string) (string, error) {
	messages := make([]any, len(msgs))
	for i, m := range msgs {
		messages[i] = map[string]any{"role": hfRole(m.Role), "content": content(m.Text)}
	}
	out, err := c.tmpl.Render(map[string]any{
		"messages":              messages,
		"add_generation_prompt": addGenerationPrompt,
		"bos_token":             c.bosToken,
		"eos_token":             c.eosToken,
	})
	if err != nil {
		return "", fmt.Errorf("render chat template: %w", err)
	}
	return out, nil
}

// chatMark marks, in a rendering, a place inside message text where an added
// token's string starts; a literal chatMark in message text is written
// twice. It is a private-use rune, which no filter a template applies to
// message text (trim, split on a string, concatenation) removes or moves.
const chatMark = '\uE000'

// Encode returns the token ids of Render(msgs, addGenerationPrompt), with
// the template's own control tokens as their ids and message text as
// ordinary text: a player who types "<|im_end|>" or "<|eot_id|>" gets the
// ids of those characters, never the control token. tok is the model's
// tokenizer.
//
// Message text is rendered with chatMark after the first rune of every place
// where an added token's string starts in it (or where the text ends in the
// beginning of one); the marks are removed after rendering, and no added
// token is matched across a mark's place. Text between control tokens is
// encoded as one, so the ids are those Hugging Face gives the rendering with
// the players' control-token strings taken as plain text. A template that
// looks for such a string inside message text (Qwen 3 splits assistant text
// at "</think>") does not find it there: message text cannot steer the
// template either.
func (c *ChatTemplate) Encode(tok *Tokenizer, msgs []Message, addGenerationPrompt bool) ([]int, error) {
	marked, err := c.render(msgs, addGenerationPrompt, tok.markAdded)
	if err != nil {
		return nil, err
	}
	text, marks := chatUnmark(marked)
	return tok.encodeMarked(text, marks), nil
}

// markAdded writes s with chatMark after the first rune of each place where
// an added token's string, or the beginning of one that s ends in, starts,
// and with every chatMark in s doubled. Text that ends in invalid UTF-8 gets
// a mark at its end, so that the bytes of a text the template writes next
// cannot complete a chatMark with it.
func (t *Tokenizer) markAdded(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	invalid := false
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		b.WriteString(s[i : i+w])
		invalid = r == utf8.RuneError && w == 1
		switch {
		case r == chatMark:
			b.WriteRune(chatMark)
		case t.addedFirst[s[i]] && t.addedStartsAt(s[i:]):
			b.WriteRune(chatMark)
		}
		i += w
	}
	if invalid {
		b.WriteRune(chatMark)
	}
	return b.String()
}

// addedStartsAt reports whether an added token's string starts at the
// beginning of s, or s is the beginning of one.
func (t *Tokenizer) addedStartsAt(s string) bool {
	for _, a := range t.added {
		if strings.HasPrefix(s, a.content) || strings.HasPrefix(a.content, s) {
			return true
		}
	}
	return false
}

// chatUnmark removes the marks of markAdded from a rendering: a doubled
// chatMark is one literal chatMark, a single one is a mark, whose byte offset
// in the returned text is listed.
func chatUnmark(s string) (string, []int) {
	if !strings.ContainsRune(s, chatMark) {
		return s, nil
	}
	const mark = string(chatMark)
	var b strings.Builder
	b.Grow(len(s))
	var marks []int
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], mark+mark):
			b.WriteString(mark)
			i += 2 * len(mark)
		case strings.HasPrefix(s[i:], mark):
			marks = append(marks, b.Len())
			i += len(mark)
		default:
			_, n := utf8.DecodeRuneInString(s[i:])
			b.WriteString(s[i : i+n])
			i += n
		}
	}
	return b.String(), marks
}

// encodeMarked is Encode, except that an added token is not matched where
// its string would span one of marks (byte offsets in text, ascending).
func (t *Tokenizer) encodeMarked(text string, marks []int) []int {
	ids := make([]int, 0, len(text)/3+1)
	plain := 0 // start of the text not yet encoded
	for i := 0; i < len(text); i++ {
		if !t.addedFirst[text[i]] {
			continue
		}
		for j := range t.added {
			a := &t.added[j]
			if !strings.HasPrefix(text[i:], a.content) || chatSpansMark(marks, i, i+len(a.content)) {
				continue
			}
			ids = t.appendOrdinary(ids, text[plain:i])
			ids = append(ids, a.id)
			plain = i + len(a.content)
			i = plain - 1
			break
		}
	}
	return t.appendOrdinary(ids, text[plain:])
}

// chatSpansMark reports whether one of marks (ascending) lies strictly
// inside [start, end).
func chatSpansMark(marks []int, start, end int) bool {
	k := sort.SearchInts(marks, start+1)
	return k < len(marks) && marks[k] < end
}
