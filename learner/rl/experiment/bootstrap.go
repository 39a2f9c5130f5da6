package experiment

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/simulator"
)

// corpus is the bootstrap data: every persona's dialogues with scripted
// NPCs of mixed quality, split by the population's held-out flag.
type corpus struct {
	pop      *simulator.Population
	byPlayer map[string][]simulator.Dialogue
	train    []simulator.Dialogue
	heldOut  []simulator.Dialogue
	risks    []float64
}

// npcMix is the share of bootstrap dialogues per scripted NPC quality
// (the corpus generator's default mix).
var npcMix = []simulator.QualityWeight{
	{Quality: simulator.NPCGood, Weight: 0.4}, {Quality: simulator.NPCGeneric, Weight: 0.2},
	{Quality: simulator.NPCOffTopic, Weight: 0.15}, {Quality: simulator.NPCRetention, Weight: 0.15},
	{Quality: simulator.NPCInconsistent, Weight: 0.1},
}

func pickQuality(rng *rand.Rand) simulator.NPCQuality {
	x := rng.Float64()
	for _, q := range npcMix {
		if x < q.Weight {
			return q.Quality
		}
		x -= q.Weight
	}
	return npcMix[0].Quality
}

// newCorpus plays every persona of a fresh population.
func newCorpus(p Profile) (*corpus, error) {
	pcfg := simulator.DefaultPopulationConfig()
	pcfg.Size = p.Players
	pop, err := simulator.NewPopulation(pcfg, p.PopulationSeed)
	if err != nil {
		return nil, fmt.Errorf("bootstrap corpus: %w", err)
	}
	c := &corpus{pop: pop, byPlayer: map[string][]simulator.Dialogue{}}
	rng := rand.New(rand.NewPCG(p.PopulationSeed, 0xc0))
	for i, pl := range pop.Players() {
		for k := range p.DialoguesPerPlayer {
			npc, err := simulator.NewScriptedNPC(pop, pickQuality(rng), simulator.DefaultScriptConfig(), rng.Uint64())
			if err != nil {
				return nil, fmt.Errorf("bootstrap corpus: %w", err)
			}
			d := simulator.Play(pl.Start(uint64(1_000_000+i*100+k)), npc, p.MaxTurns)
			d.SessionID, d.PlayerID = fmt.Sprintf("boot-%d-%d", i, k), pl.ID
			c.byPlayer[pl.ID] = append(c.byPlayer[pl.ID], d)
			if pl.HeldOut {
				c.heldOut = append(c.heldOut, d)
			} else {
				c.train = append(c.train, d)
			}
		}
	}
	if len(c.train) == 0 || len(c.heldOut) == 0 {
		return nil, fmt.Errorf("bootstrap corpus: %d training and %d held-out dialogues; raise players", len(c.train), len(c.heldOut))
	}
	c.risks = simulator.EmpiricalRisks(c.train, p.MaxTurns)
	return c, nil
}

func (c *corpus) texts() []string {
	var out []string
	for _, ds := range c.byPlayer {
		for _, d := range ds {
			for _, x := range d.Exchanges {
				out = append(out, x.User, x.NPC)
			}
		}
	}
	return out
}

// demos returns two of the player's bootstrap dialogues other than skip,
// as the user agent shows them.
func (c *corpus) demos(playerID string, skip int) []simulator.PromptDialogue {
	var out []simulator.PromptDialogue
	for k, d := range c.byPlayer[playerID] {
		if k == skip {
			continue
		}
		out = append(out, simulator.PromptDialogueOf(d, c.risks))
		if len(out) == 2 {
			break
		}
	}
	return out
}

// prompts opens n fresh conversations, cycling over the personas with the
// held-out flag heldOut, each with two style demos of the player.
func (c *corpus) prompts(heldOut bool, n int, seedBase uint64) []rl.Prompt {
	var players []*simulator.Persona
	for _, p := range c.pop.Players() {
		if p.HeldOut == heldOut {
			players = append(players, p)
		}
	}
	out := make([]rl.Prompt, 0, n)
	for i := range n {
		p := players[i%len(players)]
		pr := rl.PlayerPrompt(p, seedBase+uint64(i), "")
		pr.Demos = c.demos(p.ID, -1)
		out = append(out, pr)
	}
	return out
}

// npcInstances renders dialogues as the NPC's chat with loss weights on
// the NPC's turns only (text and closing end token), cut to maxSeq+1.
func npcInstances(tok *inference.Tokenizer, ds []simulator.Dialogue, maxSeq int) ([][]int, [][]float32) {
	var seqs [][]int
	var ws [][]float32
	for _, d := range ds {
		var ids []int
		var w []float32
		add := func(text string, weight float32) {
			for _, id := range tok.Encode(text) {
				ids = append(ids, id)
				w = append(w, weight)
			}
		}
		for _, x := range d.Exchanges {
			add(inference.TokUser+x.User+inference.TokEnd+inference.TokNPC, 0)
			add(x.NPC+inference.TokEnd, 1)
		}
		if len(ids) > maxSeq+1 {
			ids, w = ids[:maxSeq+1], w[:maxSeq+1]
		}
		seqs = append(seqs, ids)
		ws = append(ws, w)
	}
	return seqs, ws
}

// userAgentInstances builds the user agent's SFT instances: two demos of
// the same player, then the target dialogue, loss on the target's user
// turns; instances too long keep their end.
func userAgentInstances(tok *inference.Tokenizer, uac simulator.UserAgentConfig, c *corpus, maxSeq int) ([][]int, [][]float32, error) {
	var seqs [][]int
	var ws [][]float32
	for _, pl := range c.pop.Players() {
		if pl.HeldOut {
			continue
		}
		for k, d := range c.byPlayer[pl.ID] {
			ids, w, err := uac.EncodeUserAgentTraining(tok, c.demos(pl.ID, k), simulator.PromptDialogueOf(d, c.risks))
			if err != nil {
				return nil, nil, err
			}
			if over := len(ids) - (maxSeq + 1); over > 0 {
				ids, w = ids[over:], w[over:]
			}
			seqs = append(seqs, ids)
			ws = append(ws, w)
		}
	}
	return seqs, ws, nil
}

// sft trains a fresh model on weighted sequences.
func sft(ctx context.Context, name string, mc inference.ModelConfig, p Profile, seqs [][]int, ws [][]float32, seed int64, logger *slog.Logger) (*inference.Model, error) {
	m, err := inference.NewModel(mc, inference.DefaultBackendConfig(), seed)
	if err != nil {
		return nil, fmt.Errorf("sft %s: %w", name, err)
	}
	tc := inference.DefaultTrainConfig()
	tc.LearningRate = p.SFTLR
	tc.WarmupSteps = p.SFTSteps / 10 // the paper's 10 % warm-up
	tr, err := inference.NewTrainer(m, tc)
	if err != nil {
		return nil, fmt.Errorf("sft %s: %w", name, err)
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5f7))
	start := time.Now()
	for step := range p.SFTSteps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var b inference.Batch
		for range p.SFTBatch {
			i := rng.IntN(len(seqs))
			b.Tokens = append(b.Tokens, seqs[i])
			b.Weights = append(b.Weights, ws[i])
		}
		loss, err := tr.Step(b)
		if err != nil {
			return nil, fmt.Errorf("sft %s step %d: %w", name, step, err)
		}
		if step%50 == 0 || step == p.SFTSteps-1 {
			logger.Info("sft", "model", name, "step", step, "loss", loss, "elapsed", time.Since(start).Round(time.Second))
		}
	}
	return m, nil
}
