package learner

import (
	"fmt"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
)

// format returns the chat format the NPC's prompts are rendered in: the
// model's own when set, else Parley's layout on tok.
func (p npcPrompt) format(tok *inference.Tokenizer) *inference.ChatFormat {
	if p.chat != nil {
		return p.chat
	}
	return inference.ParleyChatFormat(tok)
}

// messages renders exchanges [first, k) of d after the NPC's card and
// greeting.
func (p npcPrompt) messages(d schema.Dialogue, first, k int) []inference.Message {
	msgs := []inference.Message{{Role: inference.RoleSystem, Text: p.card(d.NPCID)}}
	if p.greeting != "" {
		msgs = append(msgs, inference.Message{Role: inference.RoleNPC, Text: p.greeting})
	}
	for _, x := range d.Exchanges[first:k] {
		msgs = append(msgs, inference.Message{Role: inference.RoleUser, Text: x.User}, inference.Message{Role: inference.RoleNPC, Text: x.NPC})
	}
	return msgs
}

// instance is the whole dialogue in the chat format with loss on the NPC
// turns (their text and end-of-turn token; ChatFormat.EncodeDialogue), cut
// to maxSeq tokens.
func (p npcPrompt) instance(tok *inference.Tokenizer, d schema.Dialogue, maxSeq int) (instance, error) {
	ids, ws, err := p.format(tok).EncodeDialogue(p.messages(d, 0, len(d.Exchanges)))
	if err != nil {
		return instance{}, err
	}
	return instance{tokens: ids, weights: ws}.truncate(maxSeq), nil
}

// generationPrompt is the prompt for the NPC's reply in exchange k
// (0-based): card, greeting, exchanges before k, the user turn of k, then the
// opening of the NPC's turn. Oldest exchanges are dropped to fit within
// budget tokens.
func (p npcPrompt) generationPrompt(tok *inference.Tokenizer, d schema.Dialogue, k, budget int) ([]int, error) {
	f := p.format(tok)
	for first := 0; first <= k; first++ {
		msgs := append(p.messages(d, first, k), inference.Message{Role: inference.RoleUser, Text: d.Exchanges[k].User})
		ids, err := f.Encode(msgs, true)
		if err != nil {
			return nil, err
		}
		if len(ids) <= budget {
			return ids, nil
		}
	}
	return nil, fmt.Errorf("prompt of exchange %d of %s: %w", k+1, d.SessionID, inference.ErrTooLong)
}
