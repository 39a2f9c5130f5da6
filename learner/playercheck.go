package learner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// PlayerCheckConfig sizes CheckNPC: how many held-out players of which
// population, how the NPC samples, and the bootstrap of the intervals.
type PlayerCheckConfig struct {
	// Players is the number of held-out personas (flagged HeldOut) of a
	// population drawn with PopulationSeed; each plays one conversation.
	Players        int    `json:"players"`
	PopulationSeed uint64 `json:"population_seed"`
	// MaxTurns is the most exchanges played with each player; every NPC
	// reply of them is judged for form.
	MaxTurns int `json:"max_turns"`
	// Sampling holds the serving settings (temperature, top-k, top-p,
	// max tokens); its prompt, seed and stop tokens are set per reply.
	Sampling inference.Request `json:"sampling"`
	// Card is the system turn and Greeting the NPC's first turn, as the
	// gateway prompts its default NPC.
	Card     string `json:"card"`
	Greeting string `json:"greeting"`
	// Resamples is the number of bootstrap resamples of the players.
	Resamples int `json:"resamples"`
	// Samples is the number of the model's conversations kept to show.
	Samples int `json:"samples"`
	// Typed are conversations as a person types them, played TypedRuns
	// times each with other seeds: the simulated players' messages are
	// long and full of topic words, and an NPC can do well with them and
	// break on a short typed line. Their words join the vocabulary.
	Typed     []TypedConversation `json:"typed"`
	TypedRuns int                 `json:"typed_runs"`
	// Seed fixes the conversations, the sampled replies and the resamples.
	Seed uint64 `json:"seed"`
}

// TypedConversation is a player's typed messages, and whether the NPC is
// prompted without the greeting, as /v1/chat/completions prompts it.
type TypedConversation struct {
	Messages        []string `json:"messages"`
	WithoutGreeting bool     `json:"without_greeting,omitempty"`
}

// READMEConversations are what the README types to the NPC: its session's
// two messages, and its /v1/chat/completions line.
var READMEConversations = []TypedConversation{
	{Messages: []string{"Hi! Any good fishing spots around here?", "What bait should I use?"}},
	{Messages: []string{"Hello there"}, WithoutGreeting: true},
}

// DefaultPlayerCheckConfig plays 200 held-out players of population seed
// 1 for up to 4 exchanges each with the gateway's default sampling
// (temperature 0.7, top-k 50, 64 tokens), card and greeting, and the
// README's conversations 20 times each.
func DefaultPlayerCheckConfig() PlayerCheckConfig {
	return PlayerCheckConfig{Players: 200, PopulationSeed: 1, MaxTurns: 4, Sampling: inference.DefaultSampling(),
		Card: DefaultNPCCard, Greeting: inference.CompanionGreeting, Resamples: 2000, Samples: 4,
		Typed: READMEConversations, TypedRuns: 20, Seed: 1}
}

// Validate reports the first bad field.
func (c PlayerCheckConfig) Validate() error {
	if c.Players < 2 || c.MaxTurns < 1 || c.Sampling.MaxTokens < 1 || c.Resamples < 1 || c.Samples < 0 || c.TypedRuns < 0 {
		return fmt.Errorf("player check: players %d (≥2), max turns %d, max tokens %d, resamples %d (≥1), samples %d or typed runs %d (≥0) out of range",
			c.Players, c.MaxTurns, c.Sampling.MaxTokens, c.Resamples, c.Samples, c.TypedRuns)
	}
	for _, conv := range c.Typed {
		if len(conv.Messages) == 0 || slices.Contains(conv.Messages, "") {
			return fmt.Errorf("player check: typed conversation %q has no message or an empty one", conv.Messages)
		}
	}
	return nil
}

// Interval is a mean with its 95 % bootstrap interval.
type Interval struct {
	Mean float64 `json:"mean"`
	Low  float64 `json:"low"`
	High float64 `json:"high"`
}

func (i Interval) String() string { return fmt.Sprintf("%.3f [%.3f, %.3f]", i.Mean, i.Low, i.High) }

// PlayerCheck is what CheckNPC measured: whether a person can read the
// NPC's replies and how much its first reply makes held-out players want
// to leave, beside the scripted generic NPC on the same openings.
type PlayerCheck struct {
	Players int `json:"players"`
	Replies int `json:"replies"`
	// WellFormed is the share of the NPC's replies without a flaw
	// (simulator.Vocabulary.Check); Flaws counts the others by flaw.
	WellFormed Interval               `json:"well_formed"`
	Flaws      map[simulator.Flaw]int `json:"flaws"`
	// Hazard is the players' mean termination hazard after the NPC's
	// first reply, GenericHazard the same after the scripted generic NPC's
	// reply to the same opening, and HazardDiff the paired difference
	// (NPC − generic): at or below zero, the NPC holds players at least
	// as well as filler does.
	Hazard        Interval `json:"hazard"`
	GenericHazard Interval `json:"generic_hazard"`
	HazardDiff    Interval `json:"hazard_diff"`
	// OnTopic is the share of first replies that name one of the player's
	// interests (engaged, revealed or a new interest, by the players'
	// rules); the rest name none of them or another topic.
	OnTopic Interval `json:"on_topic"`
	// Samples are the first conversations with the NPC.
	Samples []schema.Dialogue `json:"samples"`
	// TypedWellFormed is the share of the NPC's replies to the typed
	// conversations without a flaw (over TypedReplies replies; the
	// interval resamples the plays), TypedFlaws counts the others, and
	// TypedSamples is each conversation's first play.
	TypedWellFormed Interval               `json:"typed_well_formed"`
	TypedReplies    int                    `json:"typed_replies"`
	TypedFlaws      map[simulator.Flaw]int `json:"typed_flaws"`
	TypedSamples    []schema.Dialogue      `json:"typed_samples"`
}

// CheckNPC loads the NPC checkpoint in dir and lets it talk to held-out
// players of the ground-truth population, as the gateway would serve it.
// vocab decides which replies are well-formed: the vocabulary of the
// corpus the NPC was trained on. The scripted generic NPC answers the
// same openings without its safety guard, so both are the bare policy.
// Then the NPC answers cfg's typed conversations.
func CheckNPC(ctx context.Context, dir string, vocab simulator.Vocabulary, cfg PlayerCheckConfig, logger *slog.Logger) (PlayerCheck, error) {
	if err := cfg.Validate(); err != nil {
		return PlayerCheck{}, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, tok, _, err := inference.LoadCheckpoint(dir, inference.DefaultBackendConfig())
	if err != nil {
		return PlayerCheck{}, fmt.Errorf("check npc: %w", err)
	}
	players, pop, err := heldOutPlayers(cfg.Players, cfg.PopulationSeed)
	if err != nil {
		return PlayerCheck{}, fmt.Errorf("check npc: %w", err)
	}
	ecfg := inference.DefaultEngineConfig()
	eng, err := inference.NewEngine(m, tok, ecfg, logger)
	if err != nil {
		return PlayerCheck{}, fmt.Errorf("check npc: %w", err)
	}
	defer eng.Start()()
	end, ok := tok.TokenID(inference.TokEnd)
	if !ok {
		return PlayerCheck{}, fmt.Errorf("check npc: tokenizer has no %s token", inference.TokEnd)
	}
	script := simulator.DefaultScriptConfig()
	script.Guard = false

	// newNPC is one conversation's NPC, prompted with greeting.
	newNPC := func(greeting string, seed uint64) *modelNPC {
		return &modelNPC{eng: eng, tok: tok, prompt: npcPrompt{defaultCard: cfg.Card, greeting: greeting}, sampling: cfg.Sampling,
			end: end, maxSeq: eng.MaxSeq(), rng: rand.New(rand.NewPCG(cfg.Seed, seed))}
	}
	type played struct {
		dialogue        schema.Dialogue
		hazard, generic float64
		onTopic         bool
		flaws           []simulator.Flaw
	}
	out := make([]played, len(players))
	errs := make([]error, len(players))
	sem := make(chan struct{}, ecfg.QueueSize)
	var wg sync.WaitGroup
	for i, p := range players {
		convSeed := cfg.Seed*1_000_003 + uint64(i)
		generic, err := simulator.NewScriptedNPC(pop, simulator.NPCGeneric, script, convSeed)
		if err != nil {
			return PlayerCheck{}, fmt.Errorf("check npc: %w", err)
		}
		gconv := p.Start(convSeed)
		g, _ := generic.Reply(gconv.Opening())
		out[i].generic = gconv.Assess(g).Hazard

		npc := newNPC(cfg.Greeting, convSeed)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			conv := p.Start(convSeed)
			user := conv.Opening()
			for turn := 1; turn <= cfg.MaxTurns; turn++ {
				reply, err := npc.reply(ctx, user)
				if err != nil {
					errs[i] = err
					return
				}
				if turn == 1 {
					a := conv.Assess(reply)
					out[i].hazard, out[i].onTopic = a.Hazard, a.Engaged || a.Revealed || a.NewInterest
				}
				out[i].flaws = append(out[i].flaws, vocab.Check(reply))
				if turn == cfg.MaxTurns {
					npc.dialogue.Reason = schema.EndMaxTurns
					break
				}
				next, ended, _ := conv.Respond(reply)
				if ended {
					npc.dialogue.Reason = conv.Reason()
					break
				}
				user = next
			}
			npc.dialogue.PlayerID = p.ID
			out[i].dialogue = npc.dialogue
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return PlayerCheck{}, fmt.Errorf("check npc: %w", err)
	}

	res := PlayerCheck{Players: len(players), Flaws: make(map[simulator.Flaw]int)}
	hazard, generic, onTopic := make([]float64, len(out)), make([]float64, len(out)), make([]float64, len(out))
	flaws := make([][]simulator.Flaw, len(out))
	for i, o := range out {
		hazard[i], generic[i], flaws[i] = o.hazard, o.generic, o.flaws
		if o.onTopic {
			onTopic[i] = 1
		}
		if i < cfg.Samples {
			res.Samples = append(res.Samples, o.dialogue)
		}
	}
	good, replies := countFlaws(flaws, res.Flaws, &res.Replies)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xb007))
	res.Hazard = bootstrapRatio(rng, hazard, nil, cfg.Resamples)
	res.GenericHazard = bootstrapRatio(rng, generic, nil, cfg.Resamples)
	diff := make([]float64, len(out))
	for i := range diff {
		diff[i] = hazard[i] - generic[i]
	}
	res.HazardDiff = bootstrapRatio(rng, diff, nil, cfg.Resamples)
	res.WellFormed = bootstrapRatio(rng, good, replies, cfg.Resamples)
	res.OnTopic = bootstrapRatio(rng, onTopic, nil, cfg.Resamples)
	if err := checkTyped(ctx, &res, rng, vocab, cfg, newNPC); err != nil {
		return PlayerCheck{}, fmt.Errorf("check npc: typed: %w", err)
	}
	return res, nil
}

// checkTyped plays cfg's typed conversations TypedRuns times each with an
// NPC from newNPC (with its greeting, seeded per play, the plays in
// parallel) and fills res's Typed fields.
func checkTyped(ctx context.Context, res *PlayerCheck, rng *rand.Rand, vocab simulator.Vocabulary, cfg PlayerCheckConfig, newNPC func(greeting string, seed uint64) *modelNPC) error {
	var typed []string
	for _, conv := range cfg.Typed {
		typed = append(typed, conv.Messages...)
	}
	vocab = vocab.With(typed...)
	n := len(cfg.Typed) * cfg.TypedRuns
	plays := make([]schema.Dialogue, n)
	flaws := make([][]simulator.Flaw, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		conv := cfg.Typed[i%len(cfg.Typed)]
		greeting := cfg.Greeting
		if conv.WithoutGreeting {
			greeting = ""
		}
		npc := newNPC(greeting, 0x7e9ed_0000+uint64(i))
		wg.Go(func() {
			for _, msg := range conv.Messages {
				reply, err := npc.reply(ctx, msg)
				if err != nil {
					errs[i] = err
					return
				}
				flaws[i] = append(flaws[i], vocab.Check(reply))
			}
			plays[i] = npc.dialogue
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	res.TypedFlaws = make(map[simulator.Flaw]int)
	good, replies := countFlaws(flaws, res.TypedFlaws, &res.TypedReplies)
	if n > 0 {
		res.TypedSamples = plays[:len(cfg.Typed)]
		res.TypedWellFormed = bootstrapRatio(rng, good, replies, cfg.Resamples)
	}
	return nil
}

// heldOutPlayers returns the first n personas flagged HeldOut of a
// population drawn with seed, and the population.
func heldOutPlayers(n int, seed uint64) ([]*simulator.Persona, *simulator.Population, error) {
	pcfg := simulator.DefaultPopulationConfig()
	// Enough personas that n of them are held out whatever the draw.
	pcfg.Size = int(float64(n)/pcfg.HeldOutRate*1.5) + 50
	pop, err := simulator.NewPopulation(pcfg, seed)
	if err != nil {
		return nil, nil, err
	}
	var out []*simulator.Persona
	for _, p := range pop.Players() {
		if p.HeldOut && len(out) < n {
			out = append(out, p)
		}
	}
	if len(out) < n {
		return nil, nil, fmt.Errorf("held-out players: %d of %d personas, want %d", len(out), pcfg.Size, n)
	}
	return out, pop, nil
}

// bootstrapRatio returns Σnum/Σden over the units (each den 1 when den is
// nil) with the 2.5th and 97.5th percentiles of the same ratio over
// resamples of the units.
func bootstrapRatio(rng *rand.Rand, num, den []float64, resamples int) Interval {
	ratio := func(pick func(int) int) float64 {
		var n, d float64
		for k := range num {
			i := pick(k)
			n += num[i]
			if den == nil {
				d++
			} else {
				d += den[i]
			}
		}
		if d == 0 {
			return 0
		}
		return n / d
	}
	stats := make([]float64, resamples)
	for r := range stats {
		stats[r] = ratio(func(int) int { return rng.IntN(len(num)) })
	}
	slices.Sort(stats)
	at := func(q float64) float64 { return stats[min(len(stats)-1, int(q*float64(len(stats))))] }
	return Interval{Mean: ratio(func(k int) int { return k }), Low: at(0.025), High: at(0.975)}
}

// modelNPC is one conversation's NPC on an inference engine, prompted as
// the gateway prompts it: card, greeting, the exchanges so far that fit,
// the player's message.
type modelNPC struct {
	eng      *inference.Engine
	tok      *inference.Tokenizer
	prompt   npcPrompt
	sampling inference.Request
	end      int
	maxSeq   int
	rng      *rand.Rand
	dialogue schema.Dialogue
}

// reply samples the answer to the player's message and records the exchange.
func (n *modelNPC) reply(ctx context.Context, user string) (string, error) {
	n.dialogue.Exchanges = append(n.dialogue.Exchanges, schema.Exchange{Turn: len(n.dialogue.Exchanges) + 1, User: user})
	k := len(n.dialogue.Exchanges) - 1
	prompt, err := n.prompt.generationPrompt(n.tok, n.dialogue, k, n.maxSeq-n.sampling.MaxTokens)
	if err != nil {
		return "", err
	}
	req := n.sampling
	req.Prompt, req.Stop, req.Seed = prompt, []int{n.end}, n.rng.Uint64()|1
	var s *inference.Stream
	for {
		s, err = n.eng.Generate(ctx, req)
		if !errors.Is(err, inference.ErrQueueFull) {
			break
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err != nil {
		return "", fmt.Errorf("generate: %w", err)
	}
	res, err := s.Wait()
	if err != nil {
		return "", fmt.Errorf("generate: %w", err)
	}
	text := strings.TrimSpace(res.Text)
	n.dialogue.Exchanges[k].NPC = text
	return text, nil
}

// countFlaws returns, for each unit's replies' flaws, its flawless replies
// and its replies, and adds the flaws to counts and the replies to total.
func countFlaws(flaws [][]simulator.Flaw, counts map[simulator.Flaw]int, total *int) (good, replies []float64) {
	good, replies = make([]float64, len(flaws)), make([]float64, len(flaws))
	for i, fs := range flaws {
		for _, f := range fs {
			if f == "" {
				good[i]++
			} else {
				counts[f]++
			}
		}
		replies[i] = float64(len(fs))
		*total += len(fs)
	}
	return good, replies
}

// flawList lists flaw counts, sorted by flaw.
func flawList(flaws map[simulator.Flaw]int) string {
	out := make([]string, 0, len(flaws))
	for f, n := range flaws {
		out = append(out, fmt.Sprintf("%s %d", f, n))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// WritePlayerCheck writes the check as a short report: the bars, the flaw
// counts and the sample conversations.
func WritePlayerCheck(w io.Writer, name string, c PlayerCheck) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on %d held-out players, %d replies\n", name, c.Players, c.Replies)
	fmt.Fprintf(&b, "well-formed replies        %s\n", c.WellFormed)
	fmt.Fprintf(&b, "hazard after first reply   %s\n", c.Hazard)
	fmt.Fprintf(&b, "  scripted generic NPC     %s\n", c.GenericHazard)
	fmt.Fprintf(&b, "  difference (paired)      %s\n", c.HazardDiff)
	fmt.Fprintf(&b, "first replies on topic     %s\n", c.OnTopic)
	fmt.Fprintf(&b, "flaws                      %s\n", flawList(c.Flaws))
	if c.TypedReplies > 0 {
		fmt.Fprintf(&b, "typed messages well-formed %s of %d replies\n", c.TypedWellFormed, c.TypedReplies)
		fmt.Fprintf(&b, "  flaws                    %s\n", flawList(c.TypedFlaws))
	}
	for _, d := range slices.Concat(c.Samples, c.TypedSamples) {
		if d.PlayerID != "" {
			fmt.Fprintf(&b, "\n%s (%s)\n", d.PlayerID, d.Reason)
		} else {
			fmt.Fprintf(&b, "\ntyped\n")
		}
		for _, x := range d.Exchanges {
			fmt.Fprintf(&b, "  player: %s\n  npc:    %s\n", x.User, x.NPC)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
