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
// (0, 1): replies come from the real engine.
type hashScoreEngine struct{ *inference.Engine }

func (e hashScoreEngine) Score(_ context.Context, prompt []int, conts [][]int) ([][]float32, error) {
	h := fnv.New64a()
	for _, c := range append([][]int{prompt}, conts[0][:len(conts[0])-1]) {
		for _, id := range c {
			fmt.Fprint(h, id, ",")
		}
	}
	pt := 0.5 * (float64(h.Sum64()%9973) + 0.5) / 9973
	return [][]float32{{float32(math.Log(pt))}, {float32(math.Log(1 - pt))}}, nil
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
