package gateway

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
)

// buildPrompt renders the NPC prompt in the chat template: the persona card
// as the system turn, the persona's greeting, then as many of the latest
// exchanges as fit in the model context together with the new user message
// and room for maxTokens of reply. Older exchanges are dropped first, in
// blocks (blockStart); a user message that does not fit even alone is
// ErrTooLarge.
func buildPrompt(tok *inference.Tokenizer, p Persona, history []schema.Exchange, user string, contextTokens, maxTokens int) ([]int, error) {
	head := [2]inference.Message{{Role: inference.RoleSystem, Text: p.Card}}
	if p.Greeting != "" {
		head[1] = inference.Message{Role: inference.RoleNPC, Text: p.Greeting}
	}
	headIDs, err := encoded.get(tok, head)
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
	// Take exchanges newest first while they fit, then start at a block.
	var parts [][]int
	size := len(headIDs) + len(tail)
	for i := len(history) - 1; i >= 0; i-- {
		x := history[i]
		ids, err := encoded.get(tok, [2]inference.Message{
			{Role: inference.RoleUser, Text: x.User}, {Role: inference.RoleNPC, Text: x.NPC}})
		if err != nil {
			return nil, fmt.Errorf("build prompt: %w", err)
		}
		if len(ids) > budget {
			break
		}
		budget -= len(ids)
		size += len(ids)
		parts = append(parts, ids)
	}
	parts = parts[:len(history)-blockStart(history, len(history)-len(parts))]
	// One allocation: headIDs and parts are the cache's, shared.
	prompt := append(make([]int, 0, size), headIDs...)
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

// npcPrompt is the prompt of an NPC reply in the model's chat format:
// buildPrompt's in Parley's layout; with a chat template the same dialogue
// (the persona card as the system message, its greeting as the first
// assistant message, the history, the new user message) rendered whole by
// the template, the oldest exchanges dropped until it fits.
func npcPrompt(chat *inference.ChatFormat, p Persona, history []schema.Exchange, user string, contextTokens, maxTokens int) ([]int, error) {
	if chat.Template() == nil {
		return buildPrompt(chat.Tokenizer(), p, history, user, contextTokens, maxTokens)
	}
	head := []inference.Message{{Role: inference.RoleSystem, Text: p.Card}}
	if p.Greeting != "" {
		head = append(head, inference.Message{Role: inference.RoleNPC, Text: p.Greeting})
	}
	turns := make([]inference.Message, 0, 2*len(history)+1)
	for _, x := range history {
		turns = append(turns, inference.Message{Role: inference.RoleUser, Text: x.User}, inference.Message{Role: inference.RoleNPC, Text: x.NPC})
	}
	turns = append(turns, inference.Message{Role: inference.RoleUser, Text: user})
	ids, from, err := fitTemplate(chat, head, turns, 2, contextTokens-maxTokens)
	if err == nil {
		if start := blockStart(history, from); start != from {
			ids, err = chat.Encode(slices.Concat(head, turns[2*start:]), true)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("build prompt: %w", err)
	}
	return ids, nil
}

// blockStart is the first exchange of history an NPC prompt keeps when the
// exchanges from from on are the most that fit: from itself when nothing
// is dropped, else the first exchange from there whose turn starts a
// block of inference.HistoryBlock turns, or from where that leaves none.
func blockStart(history []schema.Exchange, from int) int {
	if from == 0 {
		return 0
	}
	for i := from; i < len(history); i++ {
		if (history[i].Turn-1)%inference.HistoryBlock == 0 {
			return i
		}
	}
	return from
}

// openAIPrompt is the prompt of an OpenAI-style conversation in the model's
// chat format: chatPrompt's in Parley's layout. With a chat template the
// client's system messages, joined by blank lines, are the one system
// message (the default persona's card when there is none), as templates
// honour only a leading one; assistant messages are the model's, every
// other role the user's. The oldest non-system messages are dropped until
// the prompt fits.
func openAIPrompt(chat *inference.ChatFormat, defaultCard string, msgs []schema.ChatMessage, contextTokens, maxTokens int) ([]int, error) {
	if chat.Template() == nil {
		return chatPrompt(chat.Tokenizer(), defaultCard, msgs, contextTokens, maxTokens)
	}
	var sys []string
	var rest []inference.Message
	for _, m := range msgs {
		switch m.Role {
		case "system":
			sys = append(sys, m.Content)
		case "assistant":
			rest = append(rest, inference.Message{Role: inference.RoleNPC, Text: m.Content})
		default:
			rest = append(rest, inference.Message{Role: inference.RoleUser, Text: m.Content})
		}
	}
	if len(rest) == 0 {
		return nil, fmt.Errorf("%w: the last message does not fit in the model context", ErrTooLarge)
	}
	card := defaultCard
	if len(sys) > 0 {
		card = strings.Join(sys, "\n\n")
	}
	ids, _, err := fitTemplate(chat, []inference.Message{{Role: inference.RoleSystem, Text: card}}, rest, 1, contextTokens-maxTokens)
	if err != nil {
		return nil, fmt.Errorf("build chat prompt: %w", err)
	}
	return ids, nil
}

// fitTemplate encodes head and the newest turns, dropping the oldest turns
// step at a time (whole exchanges), with the generation prompt, in at most
// budget tokens, and returns how many steps it dropped; the last turn is
// always kept, and is ErrTooLarge when even it does not fit. The drop is
// found by bisection: a fitting dialogue encodes once, a long one a few
// times.
func fitTemplate(chat *inference.ChatFormat, head, turns []inference.Message, step, budget int) ([]int, int, error) {
	encode := func(from int) ([]int, error) {
		return chat.Encode(slices.Concat(head, turns[from:]), true)
	}
	ids, err := encode(0)
	if err != nil || len(ids) <= budget {
		return ids, 0, err
	}
	tooLarge := fmt.Errorf("%w: the message does not fit in the model context", ErrTooLarge)
	// Dropping lo·step turns is too long, dropping hi·step fits.
	lo, hi := 0, (len(turns)-1)/step
	if hi == lo {
		return nil, 0, tooLarge
	}
	fit, err := encode(hi * step)
	if err != nil {
		return nil, 0, err
	}
	if len(fit) > budget {
		return nil, 0, tooLarge
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if ids, err = encode(mid * step); err != nil {
			return nil, 0, err
		}
		if len(ids) <= budget {
			hi, fit = mid, ids
		} else {
			lo = mid
		}
	}
	return fit, hi, nil
}

// encoded caches the encoded turns that every message of a session encodes
// again: the persona's system turn and greeting, and each exchange of the
// history, which the next MaxHistory messages all put in their prompts.
var encoded turnCache

// turnCacheSize bounds the cache; it is emptied when full. An entry holds
// its texts (an exchange is at most MaxMessageBytes and a reply) and their
// token ids, so the cache stays under a few MB.
const turnCacheSize = 4096

// turnKey is a pair of turns under a tokenizer (each model version brings
// its own); a single turn has a zero second one.
type turnKey struct {
	tok   *inference.Tokenizer
	turns [2]inference.Message
}

type turnCache struct {
	mu  sync.Mutex
	ids map[turnKey][]int
}

// get returns the encoding of turns (the second skipped when zero) under
// tok; callers must not modify it.
func (c *turnCache) get(tok *inference.Tokenizer, turns [2]inference.Message) ([]int, error) {
	k := turnKey{tok, turns}
	c.mu.Lock()
	ids, ok := c.ids[k]
	c.mu.Unlock()
	if ok {
		return ids, nil
	}
	msgs := turns[:]
	if turns[1] == (inference.Message{}) {
		msgs = turns[:1]
	}
	ids, err := tok.EncodeChat(msgs, false)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.ids == nil || len(c.ids) >= turnCacheSize {
		c.ids = make(map[turnKey][]int)
	}
	c.ids[k] = ids
	c.mu.Unlock()
	return ids, nil
}
