package rl

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// UserAgentEnv makes the learned user agent an Environment: each level of a
// tree is one UserAgent.Step (one scoring call and one batch of replies).
type UserAgentEnv struct {
	ua *simulator.UserAgent

	mu  sync.Mutex
	rng *rand.Rand
}

var _ Environment = (*UserAgentEnv)(nil)

// NewUserAgentEnv answers with ua; seed makes its terminations reproducible.
func NewUserAgentEnv(ua *simulator.UserAgent, seed uint64) *UserAgentEnv {
	return &UserAgentEnv{ua: ua, rng: rand.New(rand.NewPCG(seed, 0x0a9e))}
}

// Query is the user agent's view of a turn: the prompt's demos and the
// dialogue so far, whose last exchange holds the NPC turn to judge. Past NPC
// turns carry the termination probability the user acted on.
func Query(t Turn) simulator.UserAgentQuery {
	h := t.State.History
	ex := make([]schema.Exchange, 0, len(h)+1)
	risks := make([]float64, 0, len(h))
	user := t.State.Prompt.Opening
	for k, x := range h {
		ex = append(ex, schema.Exchange{Turn: k + 1, User: user, NPC: x.NPC})
		risks = append(risks, x.Risk)
		user = x.User
	}
	ex = append(ex, schema.Exchange{Turn: len(h) + 1, User: user, NPC: t.NPC})
	return simulator.UserAgentQuery{
		Demos:   t.State.Prompt.Demos,
		Current: simulator.PromptDialogue{Exchanges: ex, Risks: risks},
	}
}

// Respond asks the user agent about every turn at once.
func (e *UserAgentEnv) Respond(ctx context.Context, step int, turns []Turn) ([]Reply, error) {
	qs := make([]simulator.UserAgentQuery, len(turns))
	for i, t := range turns {
		qs[i] = Query(t)
	}
	e.mu.Lock()
	seed := e.rng.Uint64()
	e.mu.Unlock()
	as, err := e.ua.Step(ctx, step, qs, seed)
	if err != nil {
		return nil, fmt.Errorf("user agent env: %w", err)
	}
	if len(as) != len(turns) {
		return nil, fmt.Errorf("user agent env: %d answers for %d turns: %w", len(as), len(turns), ErrShortBatch)
	}
	out := make([]Reply, len(as))
	for i, a := range as {
		out[i] = Reply{Text: a.Reply, Terminated: a.Terminated, P: a.P, Reward: a.Reward}
	}
	return out, nil
}
