package gateway

import (
	"fmt"
	"slices"
	"sync"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
)

// buildPrompt renders the NPC prompt in the chat template: the persona card
// as the system turn, the persona's greeting, then as many of the latest
// exchanges as fit in the model context together with the new user message
// and room for maxTokens of reply. Older exchanges are dropped first; a user
// message that does not fit even alone is ErrTooLarge.
func buildPrompt(tok *inference.Tokenizer, p Persona, history []schema.Exchange, user string, contextTokens, maxTokens int) ([]int, error) {
	encode := func(msgs ...inference.Message) ([]int, error) {
		ids, err := tok.EncodeChat(msgs, false)
		if err != nil {
			return nil, fmt.Errorf("build prompt: %w", err)
		}
		return ids, nil
	}
	headIDs, err := heads.get(tok, p)
	if err != nil {
		return nil, fmt.Errorf("build prompt: %w", err)
	}
	tail, err := tok.EncodeChat([]inference.Message{{Role: inference.RoleUser, Text: user}}, true)
	if err != nil {
		return nil, fmt.Errorf("build prompt: %w", err)
	}
	budget := contextTokens - maxTokens - len(headIDs) - len(tail)
	if budget < 0 {
		return nil, fmt.Errorf("%w: the message does not fit in the model context", ErrTooLarge)
	}
	// Take exchanges newest first while they fit.
	var parts [][]int
	for i := len(history) - 1; i >= 0; i-- {
		x := history[i]
		ids, err := encode(
			inference.Message{Role: inference.RoleUser, Text: x.User},
			inference.Message{Role: inference.RoleNPC, Text: x.NPC})
		if err != nil {
			return nil, err
		}
		if len(ids) > budget {
			break
		}
		budget -= len(ids)
		parts = append(parts, ids)
	}
	prompt := slices.Clip(headIDs) // shared: appending must copy
	for i := len(parts) - 1; i >= 0; i-- {
		prompt = append(prompt, parts[i]...)
	}
	return append(prompt, tail...), nil
}

// chatPrompt renders an OpenAI-style conversation: system messages become
// the system turn (the default persona's card when there is none),
// assistant messages NPC turns. The oldest non-system messages are dropped
// until the prompt fits.
func chatPrompt(tok *inference.Tokenizer, defaultCard string, msgs []schema.ChatMessage, contextTokens, maxTokens int) ([]int, error) {
	var sys []inference.Message
	var rest [][]int
	for _, m := range msgs {
		role := inference.RoleUser
		switch m.Role {
		case "system":
			sys = append(sys, inference.Message{Role: inference.RoleSystem, Text: m.Content})
			continue
		case "assistant":
			role = inference.RoleNPC
		}
		ids, err := tok.EncodeChat([]inference.Message{{Role: role, Text: m.Content}}, false)
		if err != nil {
			return nil, fmt.Errorf("build chat prompt: %w", err)
		}
		rest = append(rest, ids)
	}
	if len(sys) == 0 {
		sys = []inference.Message{{Role: inference.RoleSystem, Text: defaultCard}}
	}
	head, err := tok.EncodeChat(sys, false)
	if err != nil {
		return nil, fmt.Errorf("build chat prompt: %w", err)
	}
	npc, _ := tok.TokenID(inference.TokNPC)
	budget := contextTokens - maxTokens - len(head) - 1
	keep := len(rest)
	for i := len(rest) - 1; i >= 0; i-- {
		if len(rest[i]) > budget {
			break
		}
		budget -= len(rest[i])
		keep = i
	}
	if keep == len(rest) {
		return nil, fmt.Errorf("%w: the last message does not fit in the model context", ErrTooLarge)
	}
	prompt := head
	for _, ids := range rest[keep:] {
		prompt = append(prompt, ids...)
	}
	return append(prompt, npc), nil
}

// heads caches the encoded system turn and greeting of each persona per
// tokenizer: the same for every message of a persona, and the longest part
// of its prompt to encode.
var heads headCache

// headCacheSize bounds the cache; it is emptied when full. Each model
// version brings its tokenizer, so a long-running gateway that swapped
// versions many times would otherwise keep their personas' heads.
const headCacheSize = 256

type headKey struct {
	tok            *inference.Tokenizer
	card, greeting string
}

type headCache struct {
	mu  sync.Mutex
	ids map[headKey][]int
}

// get returns p's encoded head under tok; callers must not modify it.
func (c *headCache) get(tok *inference.Tokenizer, p Persona) ([]int, error) {
	k := headKey{tok, p.Card, p.Greeting}
	c.mu.Lock()
	ids, ok := c.ids[k]
	c.mu.Unlock()
	if ok {
		return ids, nil
	}
	head := []inference.Message{{Role: inference.RoleSystem, Text: p.Card}}
	if p.Greeting != "" {
		head = append(head, inference.Message{Role: inference.RoleNPC, Text: p.Greeting})
	}
	ids, err := tok.EncodeChat(head, false)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.ids == nil || len(c.ids) >= headCacheSize {
		c.ids = make(map[headKey][]int)
	}
	c.ids[k] = ids
	c.mu.Unlock()
	return ids, nil
}
