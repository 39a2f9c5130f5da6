package rl

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/parleyhq/parley/inference"
)

// Generator samples one continuation; *inference.Engine is one.
type Generator interface {
	Generate(ctx context.Context, req inference.Request) (*inference.Stream, error)
}

var _ Generator = (*inference.Engine)(nil)

// PolicyConfig configures a ModelPolicy.
type PolicyConfig struct {
	// Sampling holds the sampling settings of every request (its Prompt and
	// Seed are set per request). The paper's: top-k 50, temperature 0.7.
	Sampling inference.Request `json:"sampling"`
	// MaxInFlight bounds the requests queued on the generator at once;
	// keep it at or below the engine's queue size.
	MaxInFlight int `json:"max_in_flight"`
	// Seed seeds the per-request sampling seeds.
	Seed uint64 `json:"seed"`
}

// DefaultPolicyConfig samples with the paper's settings, up to 48 tokens.
func DefaultPolicyConfig() PolicyConfig {
	s := inference.DefaultSampling()
	s.MaxTokens = 48
	return PolicyConfig{Sampling: s, MaxInFlight: 128, Seed: 1}
}

// Validate reports the first bad field.
func (c PolicyConfig) Validate() error {
	if c.Sampling.MaxTokens < 1 || c.MaxInFlight < 1 {
		return fmt.Errorf("policy config: max tokens %d and max in flight %d must be positive", c.Sampling.MaxTokens, c.MaxInFlight)
	}
	return nil
}

// Messages renders a state as the NPC's chat, in the gateway's order: the
// system prompt and the greeting (each if any), the player's opening, then
// each exchange's NPC and user turns.
func Messages(st State) []inference.Message {
	var msgs []inference.Message
	if st.Prompt.System != "" {
		msgs = append(msgs, inference.Message{Role: inference.RoleSystem, Text: st.Prompt.System})
	}
	if st.Prompt.Greeting != "" {
		msgs = append(msgs, inference.Message{Role: inference.RoleNPC, Text: st.Prompt.Greeting})
	}
	msgs = append(msgs, inference.Message{Role: inference.RoleUser, Text: st.Prompt.Opening})
	for _, x := range st.History {
		msgs = append(msgs, inference.Message{Role: inference.RoleNPC, Text: x.NPC})
		if x.User != "" {
			msgs = append(msgs, inference.Message{Role: inference.RoleUser, Text: x.User})
		}
	}
	return msgs
}

// ModelPolicy is the dialogue agent as a Policy: it renders each state in
// the model's chat format and samples the NPC's turn from a Generator (the
// inference Engine), all requests of a batch in flight together so the
// engine batches them.
type ModelPolicy struct {
	gen    Generator
	chat   *inference.ChatFormat
	cfg    PolicyConfig
	maxSeq int
	end    int

	mu  sync.Mutex
	rng *rand.Rand
}

// NewModelPolicy returns a policy sampling from gen in Parley's chat
// layout on tok (NewChatPolicy with inference.ParleyChatFormat).
func NewModelPolicy(gen Generator, tok *inference.Tokenizer, maxSeq int, cfg PolicyConfig) (*ModelPolicy, error) {
	return NewChatPolicy(gen, inference.ParleyChatFormat(tok), maxSeq, cfg)
}

// NewChatPolicy returns a policy sampling from gen, its prompts in chat
// (an imported model's template, or Parley's layout). A turn ends at the
// format's TurnEnd alone, so that the token that closes a sampled turn is
// known and its log-prob is the one the policy sampled. maxSeq is the
// model's context: prompts lose their oldest exchanges until a turn of
// cfg.Sampling.MaxTokens fits.
func NewChatPolicy(gen Generator, chat *inference.ChatFormat, maxSeq int, cfg PolicyConfig) (*ModelPolicy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	end := chat.TurnEnd()
	if end < 0 {
		return nil, fmt.Errorf("new model policy: tokenizer has no %s token", inference.TokEnd)
	}
	if maxSeq <= cfg.Sampling.MaxTokens+8 {
		return nil, fmt.Errorf("new model policy: context %d too small for %d new tokens", maxSeq, cfg.Sampling.MaxTokens)
	}
	return &ModelPolicy{gen: gen, chat: chat, cfg: cfg, maxSeq: maxSeq, end: end, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed))}, nil
}

// Encode renders st in the chat format (player text stays ordinary text)
// into prompt token ids that leave room for a turn, as the gateway renders
// the same conversation: when it does not fit, the oldest exchanges (a
// player's message and the NPC's answer) are left out as the gateway
// leaves them out, inference.HistoryBlock at a time from the first turn of
// a block, so that RL trains on the prompts the players' NPC saw. A newest
// message too long even alone keeps its end.
func (p *ModelPolicy) Encode(st State) ([]int, error) {
	budget := p.maxSeq - p.cfg.Sampling.MaxTokens - 1
	n := len(st.History) // exchanges before the newest player message
	for from := 0; ; {
		ids, err := p.chat.Encode(Messages(dropExchanges(st, from)), true)
		if err != nil {
			return nil, fmt.Errorf("encode state of %q: %w", st.Prompt.ID, err)
		}
		if len(ids) <= budget {
			return ids, nil
		}
		if from == n {
			return ids[len(ids)-budget:], nil
		}
		from++
		for from < n-1 && from%inference.HistoryBlock != 0 {
			from++
		}
	}
}

// dropExchanges is st without its first k exchanges, each a player's
// message (the opening first) and the NPC's answer.
func dropExchanges(st State, k int) State {
	if k == 0 {
		return st
	}
	p := *st.Prompt
	p.Opening = st.History[k-1].User
	return State{Prompt: &p, History: st.History[k:]}
}

// submit queues req, retrying while the generator's queue is full (other
// batches share it).
func (p *ModelPolicy) submit(ctx context.Context, req inference.Request) (*inference.Stream, error) {
	for {
		s, err := p.gen.Generate(ctx, req)
		if !errors.Is(err, inference.ErrQueueFull) {
			return s, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// GenerateBatch samples one NPC turn per state.
func (p *ModelPolicy) GenerateBatch(ctx context.Context, states []State) ([]Generation, error) {
	out := make([]Generation, len(states))
	errs := make([]error, len(states))
	sem := make(chan struct{}, p.cfg.MaxInFlight)
	var wg sync.WaitGroup
	for i, st := range states {
		req := p.cfg.Sampling
		prompt, err := p.Encode(st)
		if err != nil {
			wg.Wait()
			return nil, err
		}
		req.Prompt = prompt
		req.Stop = []int{p.end}
		p.mu.Lock()
		req.Seed = p.rng.Uint64() | 1
		p.mu.Unlock()
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return nil, ctx.Err()
		}
		s, err := p.submit(ctx, req)
		if err != nil {
			<-sem
			wg.Wait()
			return nil, fmt.Errorf("generate turn %d: %w", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			res, err := s.Wait()
			if err != nil {
				errs[i] = err
				return
			}
			toks := append([]int(nil), res.Tokens...)
			if res.FinishReason == inference.FinishStop {
				toks = append(toks, p.end)
			}
			out[i] = Generation{Text: res.Text, Prompt: req.Prompt, Tokens: toks}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("generate %d turns: %w", len(states), err)
	}
	return out, nil
}
