package inference

import (
	"errors"
	"fmt"
	"slices"
)

// ErrTemplateNotPrefix reports a chat template whose rendering of a
// dialogue does not start with its rendering of the dialogue's earlier
// turns (a template that rewrites past turns): the tokens of an NPC turn
// cannot then be told apart.
var ErrTemplateNotPrefix = errors.New("inference: chat template rewrites earlier turns")

// HistoryBlock is how many exchanges an NPC prompt leaves out at a time
// once a conversation no longer fits the context, keeping the rest from an
// exchange whose turn starts a block (turns 1, 3, 5, … for 2): the
// gateway's prompts, and RL's, which train on what the players' NPC saw.
// Leaving out one exchange a turn would change the prompt right after the
// card on every turn of a long conversation, so that the engine prefills
// it all again; in blocks, the prompt's beginning, and the engine's kept
// keys and values, last for the turns in between.
const HistoryBlock = 2

// TurnEnd returns the token that closes an NPC turn, the first of Stop
// (<|end|> in Parley's layout, the template's end-of-turn token such as
// ChatML's <|im_end|> for an imported model), or -1 when there is none (a
// tokenizer without Parley's <|end|>).
func (f *ChatFormat) TurnEnd() int {
	if len(f.stop) == 0 {
		return -1
	}
	return f.stop[0]
}

// EncodeDialogue returns the token ids of msgs as Encode renders them
// (message text always ordinary text, never control tokens), with a loss
// weight per id: 1 on the ids of each NPC turn, its text and the stop token
// that ends it, and 0 on everything else (system and user turns, the
// markers that open a turn, what the template writes after the stop
// token). This is the training view of a dialogue for Parley's layout and
// for an imported model's chat template alike.
//
// An NPC turn's ids are found by prefix: they start where the encoding of
// the dialogue before the turn, with the generation prompt, stops agreeing
// with the encoding up to and including the turn, and end at the first stop
// token after that. It fails with ErrTemplateNotPrefix for a template whose
// rendering of a dialogue does not extend that of its beginning. Parley's
// layout, whose turns encode on their own, takes a shortcut to the same
// result.
func (f *ChatFormat) EncodeDialogue(msgs []Message) ([]int, []float32, error) {
	if f.template == nil {
		return f.encodeParleyDialogue(msgs)
	}
	return f.encodeDialogueByPrefix(msgs)
}

// encodeParleyDialogue is EncodeDialogue in Parley's layout, turn by turn:
// each turn is its marker, its text and <|end|>, and an NPC turn's loss
// covers all but the marker.
func (f *ChatFormat) encodeParleyDialogue(msgs []Message) ([]int, []float32, error) {
	var ids []int
	var weights []float32
	for _, m := range msgs {
		turn, err := f.tok.EncodeChat([]Message{m}, false)
		if err != nil {
			return nil, nil, fmt.Errorf("encode dialogue: %w", err)
		}
		for k := range turn {
			w := float32(0)
			if m.Role == RoleNPC && k > 0 {
				w = 1
			}
			weights = append(weights, w)
		}
		ids = append(ids, turn...)
	}
	return ids, weights, nil
}

// encodeDialogueByPrefix is EncodeDialogue by comparing the encodings of
// the dialogue's beginnings.
func (f *ChatFormat) encodeDialogueByPrefix(msgs []Message) ([]int, []float32, error) {
	ids, err := f.Encode(msgs, false)
	if err != nil {
		return nil, nil, fmt.Errorf("encode dialogue: %w", err)
	}
	weights := make([]float32, len(ids))
	for i, m := range msgs {
		if m.Role != RoleNPC {
			continue
		}
		prompt, err := f.Encode(msgs[:i], true)
		if err != nil {
			return nil, nil, fmt.Errorf("encode dialogue: %w", err)
		}
		upTo, err := f.Encode(msgs[:i+1], false)
		if err != nil {
			return nil, nil, fmt.Errorf("encode dialogue: %w", err)
		}
		if len(upTo) > len(ids) || !slices.Equal(upTo, ids[:len(upTo)]) {
			return nil, nil, fmt.Errorf("encode dialogue: turn %d: %w", i+1, ErrTemplateNotPrefix)
		}
		start := commonPrefix(prompt, upTo)
		end := len(upTo)
		for k := start; k < len(upTo); k++ {
			if slices.Contains(f.stop, upTo[k]) {
				end = k + 1
				break
			}
		}
		for k := start; k < end; k++ {
			weights[k] = 1
		}
	}
	return ids, weights, nil
}

// commonPrefix returns the length of the longest common prefix of a and b.
func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
