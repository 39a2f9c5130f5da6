package rl

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/parleyhq/parley/schema"
)

// PlaySessions plays each prompt once with policy against env for up to
// maxTurns exchanges, every session of a depth in one batch, and returns
// the sessions as a deployment logs them: who said what, and whether the
// player ended the session (player_ended) or the cap did (max_turns). The
// session id is the prompt's id; sessions start a minute apart from the
// Unix epoch in prompt order. Such logs are what a user agent may be
// trained and calibrated on.
func PlaySessions(ctx context.Context, policy Policy, env Environment, prompts []Prompt, maxTurns int) ([]schema.Dialogue, error) {
	out := make([]schema.Dialogue, len(prompts))
	states := make([]State, len(prompts))
	live := make([]int, len(prompts))
	for i, p := range prompts {
		states[i], live[i] = State{Prompt: &prompts[i]}, i
		out[i] = schema.Dialogue{SessionID: p.ID, PlayerID: p.PlayerID, NPCID: "npc", Deployment: "simulated",
			PolicyVersion: "policy", Started: time.Unix(0, 0).UTC().Add(time.Duration(i) * time.Minute)}
	}
	for turn := 1; len(live) > 0; turn++ {
		batch := make([]State, len(live))
		for j, i := range live {
			batch[j] = states[i]
		}
		gens, err := policy.GenerateBatch(ctx, batch)
		if err != nil {
			return nil, fmt.Errorf("play sessions: turn %d: %w", turn, err)
		}
		turns := make([]Turn, len(live))
		for j := range live {
			turns[j] = Turn{State: batch[j], NPC: gens[j].Text}
		}
		replies, err := env.Respond(ctx, 0, turns)
		if err != nil {
			return nil, fmt.Errorf("play sessions: turn %d: %w", turn, err)
		}
		if len(gens) != len(live) || len(replies) != len(live) {
			return nil, fmt.Errorf("play sessions: turn %d: %w", turn, ErrShortBatch)
		}
		var next []int
		for j, i := range live {
			user := prompts[i].Opening
			if h := states[i].History; len(h) > 0 {
				user = h[len(h)-1].User
			}
			out[i].Exchanges = append(out[i].Exchanges, schema.Exchange{Turn: turn, User: user, NPC: gens[j].Text})
			switch {
			case replies[j].Terminated:
				out[i].Reason = schema.EndPlayerEnded
			case turn >= maxTurns:
				out[i].Reason = schema.EndMaxTurns
			default:
				h := append(slices.Clip(states[i].History), Exchange{NPC: gens[j].Text, User: replies[j].Text, Risk: replies[j].P})
				states[i] = State{Prompt: states[i].Prompt, History: h}
				next = append(next, i)
			}
		}
		live = next
	}
	return out, nil
}
