package rl

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/simulator"
)

// hashScoreEngine is the fixture's engine with a [Terminate] share that is
// a hash of the prompt, spread over (0, 0.5) so that p = 2·P_T covers
// (0, 1): replies come from the real engine. Continuations come in pairs
// ([Terminate], [Continue]) after the same prompt, as the user agent asks.
type hashScoreEngine struct{ *inference.Engine }

func (e hashScoreEngine) Score(_ context.Context, prompt []int, conts [][]int) ([][]float32, error) {
	out := make([][]float32, len(conts))
	for i := 0; i+1 < len(conts); i += 2 {
		h := fnv.New64a()
		for _, c := range [][]int{prompt, conts[i][:len(conts[i])-1]} {
			for _, id := range c {
				fmt.Fprint(h, id, ",")
			}
		}
		pt := 0.5 * (float64(h.Sum64()%9973) + 0.5) / 9973
		out[i] = make([]float32, len(conts[i]))
		out[i+1] = make([]float32, len(conts[i+1]))
		out[i][len(conts[i])-1], out[i+1][len(conts[i+1])-1] = float32(math.Log(pt)), float32(math.Log(1-pt))
	}
	return out, nil
}

// testEndProbabilitiesWithoutReplies checks that the scoring-only path
// gives every turn the p that Respond acts on, siblings and strangers
// mixed in one call.
func testEndProbabilitiesWithoutReplies(t *testing.T, f *fixture) {
	cfg := simulator.DefaultUserAgentConfig()
	cfg.Sampling.MaxTokens = 4
	ua, err := simulator.NewUserAgent(hashScoreEngine{f.engine}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	env := NewUserAgentEnv(ua, 7)
	prompts := f.prompts(false, 4, 1)
	var turns []Turn
	for k := range 3 {
		for c := range prompts {
			st := State{Prompt: &prompts[c]}
			if c%2 == 1 {
				st.History = []Exchange{{NPC: "Hello there.", User: "hi", Risk: 0.2}}
			}
			turns = append(turns, Turn{State: st, NPC: fmt.Sprintf("turn %d of context %d", k, c)})
		}
	}
	ctx := context.Background()
	ps, err := env.EndProbabilities(ctx, 12, turns)
	if err != nil {
		t.Fatal(err)
	}
	replies, err := env.Respond(ctx, 12, turns)
	if err != nil {
		t.Fatal(err)
	}
	distinct := map[float64]bool{}
	for i, r := range replies {
		if math.Abs(ps[i]-r.P) > 1e-9 {
			t.Errorf("turn %d: scoring-only p %.6f; Respond acted on %.6f", i, ps[i], r.P)
		}
		distinct[ps[i]] = true
	}
	if len(distinct) < len(turns)/2 {
		t.Errorf("%d distinct p over %d turns; want the turns told apart", len(distinct), len(turns))
	}
}

// testUserAgentSharedDraw checks that the user agent's siblings share one
// termination draw: in every context a sibling ends exactly when its p is
// above the context's draw, and a turn gets the same decision whichever
// call asks and in whatever company.
func testUserAgentSharedDraw(t *testing.T, f *fixture) {
	cfg := simulator.DefaultUserAgentConfig()
	cfg.Sampling.MaxTokens = 4
	ua, err := simulator.NewUserAgent(hashScoreEngine{f.engine}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	env := NewUserAgentEnv(ua, 42)
	prompts := f.prompts(false, 6, 1)
	var turns []Turn
	for c := range prompts {
		for k := range 6 {
			turns = append(turns, Turn{State: State{Prompt: &prompts[c]}, NPC: fmt.Sprintf("turn %d of context %d", k, c)})
		}
	}
	ctx := context.Background()
	all, err := env.Respond(ctx, 0, turns)
	if err != nil {
		t.Fatal(err)
	}
	mixed := 0
	for c := range prompts {
		contMax, termMin := 0.0, 1.0
		ended := 0
		for k := range 6 {
			r := all[c*6+k]
			if r.Terminated {
				termMin = math.Min(termMin, r.P)
				ended++
			} else {
				contMax = math.Max(contMax, r.P)
			}
		}
		if contMax > termMin {
			t.Errorf("context %d: a sibling with p %.3f went on while one with p %.3f ended; want one shared draw", c, contMax, termMin)
		}
		if ended > 0 && ended < 6 {
			mixed++
		}
	}
	if mixed == 0 {
		t.Errorf("no context had both outcomes; the test saw no draw")
	}
	// The same turns asked again one context at a time, shuffled, in a
	// fresh environment of the same seed: the same decisions.
	again := NewUserAgentEnv(ua, 42)
	perm := rand.New(rand.NewPCG(5, 5)).Perm(len(turns))
	for _, i := range perm {
		r, err := again.Respond(ctx, 0, []Turn{turns[i]})
		if err != nil {
			t.Fatal(err)
		}
		if r[0].Terminated != all[i].Terminated || r[0].P != all[i].P {
			t.Errorf("turn %d asked alone: terminated %v, p %.3f; want %v, %.3f as in the batch", i, r[0].Terminated, r[0].P, all[i].Terminated, all[i].P)
		}
	}
}
