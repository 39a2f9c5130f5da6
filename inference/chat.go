package inference

import (
	"errors"
	"fmt"
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
