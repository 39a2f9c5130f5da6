//go:build long

package rl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"gonum.org/v1/gonum/stat"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/learner"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/simulator"
)

// siblingFeature is how one of the players' rules (a boolean of
// simulator.Assessment) splits the siblings of the referee's groups.
type siblingFeature struct {
	// Share is the share of sibling turns with the feature on (0 for
	// Words, the turn's word count).
	Share float64 `json:"share"`
	// Groups is how many groups have it on for some siblings and off for
	// others; Tau is the mean τ-b of the feature against the hazard there.
	Groups int     `json:"groups"`
	Tau    float64 `json:"tau"`
}

// TestRefereeSiblings tells what the siblings of an NPC's referee groups
// differ by for the players (docs/experiments/README.md, "What the
// first-start referee cannot see"): it samples the referee's groups as
// SampleReferee does, prints the share of the hidden hazard's variance
// within them, and replays every sibling through the players' rules. The
// Sees* features are what a user agent that knew every topic's words
// could read from the context alone: whether the sibling names a topic
// the player has named in the dialogue (SeesNamedTopic), one of their
// last message (SeesLastTopic), or only topics they have not named
// (SeesOnlyUnnamed).
// PARLEY_SIBLINGS_NPC is the NPC checkpoint; PARLEY_SIBLINGS_PLAYERS and
// _SEED the population (500 and 1, the loop's); _HELD_OUT=1 keeps the
// held-out personas alone; _CARD=experiment prompts with the experiment's
// card and no greeting instead of the product's card and greeting.
func TestRefereeSiblings(t *testing.T) {
	dir := os.Getenv("PARLEY_SIBLINGS_NPC")
	if dir == "" {
		t.Skip("PARLEY_SIBLINGS_NPC names no NPC checkpoint")
	}
	size, seed := envInt(t, "PARLEY_SIBLINGS_PLAYERS", 500), uint64(envInt(t, "PARLEY_SIBLINGS_SEED", 1))
	system, greeting := learner.DefaultNPCCard, inference.CompanionGreeting
	if os.Getenv("PARLEY_SIBLINGS_CARD") == "experiment" {
		system, greeting = card, ""
	}
	ctx := context.Background()
	m, tok, _, err := inference.LoadCheckpoint(dir, inference.DefaultBackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	pol, err := rl.NewModelPolicy(serve(t, m, tok), tok, m.Config().MaxSeq, rl.DefaultPolicyConfig())
	if err != nil {
		t.Fatal(err)
	}
	popCfg := simulator.DefaultPopulationConfig()
	popCfg.Size = size
	pop, err := simulator.NewPopulation(popCfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	var personas []*simulator.Persona
	for _, p := range pop.Players() {
		if os.Getenv("PARLEY_SIBLINGS_HELD_OUT") != "1" || p.HeldOut {
			personas = append(personas, p)
		}
	}
	rc := rl.DefaultRefereeConfig()
	prompts := make([]rl.Prompt, max(rc.Groups, rc.Dialogues))
	for i := range prompts {
		prompts[i] = rl.PlayerPrompt(personas[i%len(personas)], 9_000_000+uint64(i), system, greeting)
	}
	sample, err := rl.SampleReferee(ctx, rc, pol, rl.NewPlayerEnv(pop), prompts)
	if err != nil {
		t.Fatal(err)
	}

	topicOf := map[string]int{}
	for i, tp := range popCfg.Topics {
		for _, w := range tp.Words {
			topicOf[w] = i
		}
	}
	topics := func(text string) map[int]bool {
		out := map[int]bool{}
		for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) }) {
			if t, ok := topicOf[w]; ok {
				out[t] = true
			}
		}
		return out
	}
	turns, on := 0, map[string]int{}
	features := map[string]*siblingFeature{}
	for _, g := range sample.Groups {
		p, _ := pop.Player(g.State.Prompt.PlayerID)
		// What the context shows: the topics the player has named, and
		// those of their last message.
		last := topics(g.State.Prompt.Opening)
		named := maps.Clone(last)
		for _, x := range g.State.History {
			if l := topics(x.User); len(l) > 0 {
				last = l
				maps.Copy(named, l)
			}
		}
		// Assess leaves the conversation as it is: one replay serves every sibling.
		conv := p.Start(g.State.Prompt.Seed)
		for _, x := range g.State.History {
			conv.Respond(x.NPC)
		}
		values := map[string][]float64{}
		for _, text := range g.Turns {
			hits := topics(text)
			var seen, lastHit bool
			for t := range hits {
				seen, lastHit = seen || named[t], lastHit || last[t]
			}
			visible := map[string]bool{"SeesNamedTopic": seen, "SeesLastTopic": lastHit, "SeesOnlyUnnamed": len(hits) > 0 && !seen}
			for name, v := range visible {
				values[name] = append(values[name], float64(boolInt(v)))
				on[name] += boolInt(v)
			}
			a := reflect.ValueOf(conv.Assess(text))
			for i := range a.NumField() {
				if f := a.Field(i); f.Kind() == reflect.Bool {
					name := a.Type().Field(i).Name
					values[name] = append(values[name], float64(boolInt(f.Bool())))
					on[name] += boolInt(f.Bool())
				}
			}
			values["Words"] = append(values["Words"], float64(len(strings.Fields(text))))
			turns++
		}
		for name, xs := range values {
			tau, ok := rl.KendallTauB(xs, g.Hazards)
			if !ok {
				continue
			}
			f := features[name]
			if f == nil {
				f = &siblingFeature{}
				features[name] = f
			}
			f.Groups++
			f.Tau += tau
		}
	}
	for name, f := range features {
		f.Share, f.Tau = float64(on[name])/float64(turns), f.Tau/float64(f.Groups)
		t.Logf("%-16s on %5.1f %% of turns, varies in %3d groups, mean τ-b with the hazard %+.3f", name, 100*f.Share, f.Groups, f.Tau)
	}
	var hazards []float64
	for _, g := range sample.Groups {
		hazards = append(hazards, g.Hazards...)
	}
	out := map[string]any{"npc": dir, "players": size, "population_seed": seed, "groups": len(sample.Groups), "turns": turns,
		"mean_hazard": stat.Mean(hazards, nil), "hazard_within_share": sample.HazardWithinShare(), "real_avg_l": sample.RealAvgL, "features": features}
	js, _ := json.Marshal(out)
	fmt.Printf("REFEREE_SIBLINGS %s\n", js)
}

func envInt(t *testing.T, name string, fallback int) int {
	v := os.Getenv(name)
	if v == "" {
		return fallback
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
