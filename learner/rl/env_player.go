package rl

import (
	"context"
	"errors"
	"fmt"

	"github.com/parleyhq/parley/simulator"
)

// ErrUnknownPlayer is returned for a prompt whose player is not in the
// population.
var ErrUnknownPlayer = errors.New("rl: unknown player")

// PlayerEnv makes the ground-truth player population an Environment: the
// referee of experiments. A turn is answered by replaying the prompt's
// conversation (persona PlayerID started with Prompt.Seed) through the
// history, then letting the player react to the new NPC turn, so answers
// are a pure function of (prompt, history, turn) and siblings in a tree see
// the same player. The termination probability is the player's hidden
// hazard; the step is ignored (players have no dynamic threshold).
type PlayerEnv struct {
	pop *simulator.Population
}

var _ Environment = (*PlayerEnv)(nil)

// NewPlayerEnv returns the environment of pop's players.
func NewPlayerEnv(pop *simulator.Population) *PlayerEnv { return &PlayerEnv{pop: pop} }

// PlayerPrompt is the prompt of persona p's conversation started with seed
// with an NPC of system prompt system and greeting greeting: its opening
// message, no style demonstrations.
func PlayerPrompt(p *simulator.Persona, seed uint64, system, greeting string) Prompt {
	return Prompt{
		ID:       fmt.Sprintf("%s/%d", p.ID, seed),
		PlayerID: p.ID,
		System:   system,
		Greeting: greeting,
		Opening:  p.Start(seed).Opening(),
		Seed:     seed,
	}
}

// Respond answers each turn as its prompt's player.
func (e *PlayerEnv) Respond(ctx context.Context, _ int, turns []Turn) ([]Reply, error) {
	out := make([]Reply, len(turns))
	for i, t := range turns {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p, ok := e.pop.Player(t.State.Prompt.PlayerID)
		if !ok {
			return nil, fmt.Errorf("answer as player %q: %w", t.State.Prompt.PlayerID, ErrUnknownPlayer)
		}
		conv := p.Start(t.State.Prompt.Seed)
		for _, x := range t.State.History {
			conv.Respond(x.NPC)
		}
		text, end, hazard := conv.Respond(t.NPC)
		r := Reply{Text: text, Terminated: end, P: hazard, Reward: 1 - hazard}
		if end {
			r.Reward = 0
		}
		out[i] = r
	}
	return out, nil
}
