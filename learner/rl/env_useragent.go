package rl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// UserAgentEnv makes the learned user agent an Environment. Turns in the
// same context (the same prompt and history: siblings in a tree) share one
// termination draw, as PlayerEnv's players do: each turn is one
// UserAgent.Step whose seed is a hash of the environment's seed and the
// context, so the draw u is a pure function of the context and a sibling
// with a lower p never ends while one with a higher p goes on, wherever in
// a tree and in whichever call it was sampled.
type UserAgentEnv struct {
	ua   *simulator.UserAgent
	seed uint64
}

var (
	_ Environment = (*UserAgentEnv)(nil)
	_ EndScorer   = (*UserAgentEnv)(nil)
)

// respondInFlight bounds the user agent steps of one Respond call in flight
// at once (each queues at most one reply on the engine).
const respondInFlight = 64

// NewUserAgentEnv answers with ua; seed makes its terminations reproducible.
func NewUserAgentEnv(ua *simulator.UserAgent, seed uint64) *UserAgentEnv {
	return &UserAgentEnv{ua: ua, seed: seed}
}

// contextSeed hashes the environment's seed and a state's prompt and
// history: the seed of the termination draw shared by the state's turns.
func (e *UserAgentEnv) contextSeed(st State) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], e.seed)
	h.Write(b[:])
	binary.LittleEndian.PutUint64(b[:], st.Prompt.Seed)
	h.Write(b[:])
	for _, s := range []string{st.Prompt.ID, st.Prompt.PlayerID, st.Prompt.Opening} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	for _, x := range st.History {
		h.Write([]byte(x.NPC))
		h.Write([]byte{0})
		h.Write([]byte(x.User))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// step asks the user agent about one turn, again while the engine's queue
// is full (other steps share it); the same seed gives the same answer.
func (e *UserAgentEnv) step(ctx context.Context, step int, t Turn) ([]simulator.UserAgentAnswer, error) {
	q := []simulator.UserAgentQuery{Query(t)}
	seed := e.contextSeed(t.State)
	for {
		as, err := e.ua.Step(ctx, step, q, seed)
		if !errors.Is(err, inference.ErrQueueFull) {
			return as, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
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

// Respond asks the user agent about every turn, the steps in flight
// together so that the engine batches their replies.
func (e *UserAgentEnv) Respond(ctx context.Context, step int, turns []Turn) ([]Reply, error) {
	out := make([]Reply, len(turns))
	errs := make([]error, len(turns))
	sem := make(chan struct{}, respondInFlight)
	var wg sync.WaitGroup
	for i, t := range turns {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return nil, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			as, err := e.step(ctx, step, t)
			switch {
			case err != nil:
				errs[i] = err
			case len(as) != 1:
				errs[i] = fmt.Errorf("%d answers for one turn: %w", len(as), ErrShortBatch)
			default:
				a := as[0]
				out[i] = Reply{Text: a.Reply, Terminated: a.Terminated, P: a.P, Reward: a.Reward}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("user agent env: %w", err)
	}
	return out, nil
}

// EndProbabilities returns the user agent's p for every turn without
// drawing terminations or generating replies (simulator.UserAgent's
// Terminations): the p that Respond acts on. Turns of the same context go
// to the user agent together, so their shared prompt is scored once.
func (e *UserAgentEnv) EndProbabilities(ctx context.Context, step int, turns []Turn) ([]float64, error) {
	byContext := map[uint64][]int{}
	var order []uint64
	for i, t := range turns {
		k := e.contextSeed(t.State)
		if _, ok := byContext[k]; !ok {
			order = append(order, k)
		}
		byContext[k] = append(byContext[k], i)
	}
	out := make([]float64, len(turns))
	err := forEachParallel(ctx, len(order), respondInFlight, func(g int) error {
		idx := byContext[order[g]]
		qs := make([]simulator.UserAgentQuery, len(idx))
		for j, i := range idx {
			qs[j] = Query(turns[i])
		}
		scores, err := e.ua.Terminations(ctx, step, qs)
		if err != nil {
			return err
		}
		if len(scores) != len(idx) {
			return ErrShortBatch
		}
		for j, i := range idx {
			out[i] = scores[j].P
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("user agent env: end probabilities: %w", err)
	}
	return out, nil
}
