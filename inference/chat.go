package inference

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Roles of a chat message.
const (
	RoleSystem = "system"
	RoleUser   = "user"
	RoleNPC    = "npc"
)

// ErrUnknownRole reports a Message whose Role is none of RoleSystem,
// RoleUser and RoleNPC.
var ErrUnknownRole = errors.New("inference: unknown chat role")

// Message is one turn of a dialogue: who speaks and what they say.
type Message struct {
	Role string // RoleSystem, RoleUser or RoleNPC
	Text string
}

// Validate reports ErrUnknownRole for a role outside the chat template.
func (m Message) Validate() error {
	if chatMarker(m.Role) == "" {
		return fmt.Errorf("validate message role %q: %w", m.Role, ErrUnknownRole)
	}
	return nil
}

// chatMarker returns the special token that opens a turn of role, or "" for
// an unknown role.
func chatMarker(role string) string {
	switch role {
	case RoleSystem:
		return TokSys
	case RoleUser:
		return TokUser
	case RoleNPC:
		return TokNPC
	default:
		return ""
	}
}

// RenderChat renders msgs in Parley's chat template:
//
//	<|sys|>{system}<|end|><|user|>{user}<|end|><|npc|>{npc}<|end|>...
//
// with a trailing "<|npc|>" when addGenerationPrompt is set, so that the
// model goes on as the NPC. A message of unknown role is rendered as a user
// turn; check messages with Message.Validate first where that matters. The
// text is put in as it is: encoding the result with Encode turns special-token
// strings inside a message into control tokens, which EncodeChat avoids.
func RenderChat(msgs []Message, addGenerationPrompt bool) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(chatMarkerOrUser(m.Role))
		b.WriteString(m.Text)
		b.WriteString(TokEnd)
	}
	if addGenerationPrompt {
		b.WriteString(TokNPC)
	}
	return b.String()
}

func chatMarkerOrUser(role string) string {
	if m := chatMarker(role); m != "" {
		return m
	}
	return TokUser
}

// EncodeChat returns the token ids of RenderChat(msgs, addGenerationPrompt),
// except that message text is encoded with EncodeOrdinary: a player who types
// "<|end|>" or "[Terminate]" gets ordinary tokens, not control tokens. Use it
// for prompts that hold player text. Where message text carries control
// tokens on purpose, as the user agent's "[Continue] ..." turns do, use
// Encode(RenderChat(...)) instead. It fails if the tokenizer lacks one of the
// template's special tokens.
func (t *Tokenizer) EncodeChat(msgs []Message, addGenerationPrompt bool) ([]int, error) {
	special := func(s string) (int, error) {
		id, ok := t.TokenID(s)
		if !ok {
			return 0, fmt.Errorf("encode chat: tokenizer has no %q token", s)
		}
		return id, nil
	}
	end, err := special(TokEnd)
	if err != nil {
		return nil, err
	}
	var ids []int
	for _, m := range msgs {
		open, err := special(chatMarkerOrUser(m.Role))
		if err != nil {
			return nil, err
		}
		ids = append(ids, open)
		ids = t.appendOrdinary(ids, m.Text)
		ids = append(ids, end)
	}
	if addGenerationPrompt {
		npc, err := special(TokNPC)
		if err != nil {
			return nil, err
		}
		ids = append(ids, npc)
	}
	return ids, nil
}

// CompanionCard is the default NPC persona card, the system turn of the
// prompt: the paper's game-companion prompt, condensed. The gateway serves
// NPCs without a card of their own with it and the learner trains the
// dialogue agent with it, so both see the same system turn.
const CompanionCard = `You are Mira, a companion character in a fantasy adventure game, talking with the player between quests. ` +
	`Stay in character: warm, curious and playful, with your own opinions and memories of your travels together. ` +
	`Keep replies short (one to three sentences) and natural, like spoken dialogue. ` +
	`Engage with what the player says, build on the topics they care about and ask them relevant questions. ` +
	`Do not repeat yourself, do not stall with filler, and never pretend to be a human outside the game.`

// CompanionGreeting is the default NPC's first line: the gateway sends it
// when a session opens and puts it before the player's first message in
// the NPC's prompt, and the learner's RL prompts carry it too, so the
// policy is trained and judged on the prompt it is served with.
const CompanionGreeting = "Hey, you're back! Where are we heading today?"

// ChatFormat is how a model version turns a dialogue into prompt ids and
// where its replies end: Parley's own layout (EncodeChat; a reply ends at
// <|end|>), or the Hugging Face chat template an imported model came with
// (ChatTemplate.Encode; a reply ends at the template's end-of-turn token or
// an end-of-sequence token of generation_config.json and
// tokenizer_config.json). A ChatFormat is safe for concurrent use.
type ChatFormat struct {
	tok      *Tokenizer
	template *ChatTemplate // nil for Parley's layout
	stop     []int
	// hidden marks the control tokens (added tokens Hugging Face calls
	// special) whose text a templated model's reply never carries; nil for
	// Parley's layout, whose replies decode as they always have.
	hidden map[int]bool
}

// ParleyChatFormat is Parley's layout on tok: prompts are EncodeChat's and
// a reply ends at <|end|> (no stop token when tok has none).
func ParleyChatFormat(tok *Tokenizer) *ChatFormat {
	f := &ChatFormat{tok: tok}
	if id, ok := tok.TokenID(TokEnd); ok {
		f.stop = []int{id}
	}
	return f
}

// NewChatFormat is the format of a model with a chat template: prompts are
// template.Encode's, and a reply ends at the token the template writes
// after an assistant message (Llama 3's <|eot_id|>, ChatML's <|im_end|>), at
// the template's eos_token, or at any of eos (generation_config.json's
// eos_token_id). Decoded replies leave out every special added token. It
// fails when none of these names a token of tok.
func NewChatFormat(tok *Tokenizer, template *ChatTemplate, eos []int) (*ChatFormat, error) {
	f := &ChatFormat{tok: tok, template: template, hidden: map[int]bool{}}
	for _, a := range tok.added {
		if a.special {
			f.hidden[a.id] = true
		}
	}
	addStop := func(id int) {
		if !slices.Contains(f.stop, id) {
			f.stop = append(f.stop, id)
		}
	}
	turnEnd, err := template.turnEnd(tok)
	if err != nil {
		return nil, fmt.Errorf("new chat format: %w", err)
	}
	if turnEnd >= 0 {
		addStop(turnEnd)
	}
	if s, ok := template.eosToken.(string); ok {
		if id, ok := tok.TokenID(s); ok {
			addStop(id)
		}
	}
	for _, id := range eos {
		if id < 0 || id >= tok.VocabSize() {
			return nil, fmt.Errorf("new chat format: eos token id %d is outside the tokenizer's %d tokens", id, tok.VocabSize())
		}
		addStop(id)
	}
	if len(f.stop) == 0 {
		return nil, errors.New("new chat format: the chat template ends an assistant turn with no added token, and no eos token is known: replies would never stop")
	}
	return f, nil
}

// chatTurnProbe is the assistant text turnEnd renders to find what the
// template writes after it.
const chatTurnProbe = "Parley turn probe"

// turnEnd returns the id of the added token the template writes right after
// an assistant message's text (spaces and newlines between them allowed),
// or -1 when it writes none.
func (c *ChatTemplate) turnEnd(tok *Tokenizer) (int, error) {
	out, err := c.Render([]Message{{Role: RoleUser, Text: "Hello"}, {Role: RoleNPC, Text: chatTurnProbe}}, false)
	if err != nil {
		return 0, fmt.Errorf("find the end-of-turn token: %w", err)
	}
	i := strings.LastIndex(out, chatTurnProbe)
	if i < 0 {
		return -1, nil
	}
	after := strings.TrimLeft(out[i+len(chatTurnProbe):], " \n")
	best := -1
	for _, a := range tok.added { // longest first
		if strings.HasPrefix(after, a.content) {
			best = a.id
			break
		}
	}
	return best, nil
}

// generationConfig is the part of generation_config.json a ChatFormat
// reads: eos_token_id, an id or a list of ids.
type generationConfig struct {
	EOSTokenID json.RawMessage `json:"eos_token_id"`
}

// LoadChatFormat returns the chat format of the model in dir, whose
// tokenizer is tok: NewChatFormat with the chat template of its
// tokenizer_config.json (or chat_template.jinja) and the eos_token_id of its
// generation_config.json when it has one; Parley's layout for a directory
// without a chat template (Parley's own checkpoints), which needs Parley's
// chat tokens in tok.
func LoadChatFormat(dir string, tok *Tokenizer) (*ChatFormat, error) {
	tmpl, err := LoadChatTemplate(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrNoChatTemplate):
		for _, s := range []string{TokSys, TokUser, TokNPC, TokEnd} {
			if _, ok := tok.TokenID(s); !ok {
				return nil, fmt.Errorf("load chat format of %q: no chat template, and the tokenizer lacks Parley's %s token for Parley's layout: %w", dir, s, err)
			}
		}
		return ParleyChatFormat(tok), nil
	case err != nil:
		return nil, fmt.Errorf("load chat format: %w", err)
	}
	eos, err := readGenerationEOS(filepath.Join(dir, "generation_config.json"))
	if err != nil {
		return nil, fmt.Errorf("load chat format of %q: %w", dir, err)
	}
	f, err := NewChatFormat(tok, tmpl, eos)
	if err != nil {
		return nil, fmt.Errorf("load chat format of %q: %w", dir, err)
	}
	return f, nil
}

// readGenerationEOS reads eos_token_id from a generation_config.json; a
// missing file or field is none.
func readGenerationEOS(path string) ([]int, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cfg generationConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Base(path), err)
	}
	if isJSONNull(cfg.EOSTokenID) {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(cfg.EOSTokenID, &one); err == nil {
		return []int{one}, nil
	}
	var ids []int
	if err := json.Unmarshal(cfg.EOSTokenID, &ids); err != nil {
		return nil, fmt.Errorf("%s: eos_token_id %s is neither an id nor a list of ids", filepath.Base(path), cfg.EOSTokenID)
	}
	return ids, nil
}

// Tokenizer returns the tokenizer the format encodes with.
func (f *ChatFormat) Tokenizer() *Tokenizer { return f.tok }

// Template returns the model's chat template, nil for Parley's layout.
func (f *ChatFormat) Template() *ChatTemplate { return f.template }

// Encode returns the prompt ids of msgs, message text always as ordinary
// text (a player's "<|im_end|>" or "<|end|>" is never a control token).
func (f *ChatFormat) Encode(msgs []Message, addGenerationPrompt bool) ([]int, error) {
	if f.template == nil {
		return f.tok.EncodeChat(msgs, addGenerationPrompt)
	}
	return f.template.Encode(f.tok, msgs, addGenerationPrompt)
}

// Stop returns the token ids that end a reply; callers must not modify it.
func (f *ChatFormat) Stop() []int { return f.stop }

// TokenText returns the bytes token id adds to a reply's text: none for a
// templated model's control tokens, else Tokenizer.TokenBytes. The slice is
// shared: do not modify it.
func (f *ChatFormat) TokenText(id int) []byte {
	if f.hidden[id] {
		return nil
	}
	return f.tok.TokenBytes(id)
}

// Decode returns the reply text of ids: Tokenizer.Decode without a
// templated model's control tokens.
func (f *ChatFormat) Decode(ids []int) string {
	if len(f.hidden) == 0 {
		return f.tok.Decode(ids)
	}
	var b strings.Builder
	for _, id := range ids {
		b.Write(f.TokenText(id))
	}
	return b.String()
}
