package rl

import (
	"context"

	"github.com/parleyhq/parley/simulator"
)

// Exchange is one completed exchange: the NPC's turn and the user's answer.
// User is empty when the user terminated after the NPC's turn. Risk is the
// termination probability the user acted on after the NPC's turn (the user
// agent's prompt shows it as "[End Risk: p]").
type Exchange struct {
	NPC  string  `json:"npc"`
	User string  `json:"user"`
	Risk float64 `json:"risk"`
}

// Prompt is the training context of one tree: what the NPC is told, the
// player's opening message, and the player's earlier dialogues that the
// user agent imitates (its style demonstrations).
type Prompt struct {
	// ID names the prompt in logs and reports.
	ID string `json:"id"`
	// PlayerID is the (simulated) player whose style the user agent copies.
	PlayerID string `json:"player_id"`
	// System is the NPC's system prompt and Greeting its first line, before
	// the opening, as the gateway serves them; empty for none.
	System   string `json:"system,omitempty"`
	Greeting string `json:"greeting,omitempty"`
	// Opening is the player's first message.
	Opening string `json:"opening"`
	// Demos are earlier dialogues of the same player (two in the paper)
	// as the user agent's prompt shows them; nil when style demonstrations
	// are switched off.
	Demos []simulator.PromptDialogue `json:"demos,omitempty"`
	// Seed makes an environment's answers to this prompt reproducible.
	Seed uint64 `json:"seed"`
}

// State is a point in a dialogue: the prompt and the exchanges so far.
// The NPC speaks next.
type State struct {
	Prompt  *Prompt
	History []Exchange
}

// Generation is one sampled NPC turn.
type Generation struct {
	// Text is the turn as the user reads it.
	Text string
	// Prompt and Tokens are the token ids the policy conditioned on and
	// sampled (Tokens includes the closing end-of-turn token when the
	// policy emitted it), kept so the update scores exactly what was
	// sampled. Both are nil for policies that are not models.
	Prompt []int
	Tokens []int
}

// Policy samples NPC turns, one per state, in a single batch.
type Policy interface {
	GenerateBatch(ctx context.Context, states []State) ([]Generation, error)
}

// Turn is a state and the NPC's next turn, awaiting the user's answer.
type Turn struct {
	State State
	NPC   string
}

// Reply is the user's reaction to one NPC turn.
type Reply struct {
	// Text is the user's answer; empty when Terminated.
	Text string
	// Terminated reports that the user ended the dialogue.
	Terminated bool
	// P is the termination probability the user acted on.
	P float64
	// Reward is the immediate reward: 1 − P, or 0 when Terminated.
	Reward float64
}

// Environment answers NPC turns as the user, one reply per turn, in a
// single batch. step is the RL step whose dynamic threshold applies: a user
// agent terminates with probability min(α·2·P_T, 1), α = 1 + λ·floor(step/10);
// step 0 gives α = 1. Environments that are not user agents may ignore it.
type Environment interface {
	Respond(ctx context.Context, step int, turns []Turn) ([]Reply, error)
}
