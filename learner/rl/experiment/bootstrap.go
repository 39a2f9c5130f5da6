package experiment

import (
	"fmt"
	"math/rand/v2"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/learner"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// corpus is the bootstrap data: every persona's dialogues with scripted
// NPCs of mixed quality, split by the population's held-out flag.
type corpus struct {
	pop      *simulator.Population
	byPlayer map[string][]schema.Dialogue
	train    []schema.Dialogue
	heldOut  []schema.Dialogue
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
	c := &corpus{pop: pop, byPlayer: map[string][]schema.Dialogue{}}
	rng := rand.New(rand.NewPCG(p.PopulationSeed, 0xc0))
	for i, pl := range pop.Players() {
		for k := range p.DialoguesPerPlayer {
			npc, err := simulator.NewScriptedNPC(pop, pickQuality(rng), simulator.DefaultScriptConfig(), rng.Uint64())
			if err != nil {
				return nil, fmt.Errorf("bootstrap corpus: %w", err)
			}
			d := simulator.Play(pl.Start(uint64(1_000_000+i*100+k)), npc, p.MaxTurns)
			d.SessionID, d.PlayerID, d.NPCID = fmt.Sprintf("boot-%d-%d", i, k), pl.ID, "bootstrap-npc"
			d.Deployment, d.PolicyVersion = "experiment", "scripted"
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
	c.risks = simulator.TrainingRisks(c.train, p.MaxTurns) // as the user agent saw demos in training
	return c, nil
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
func (c *corpus) prompts(heldOut bool, n int, seedBase uint64, system string) []rl.Prompt {
	var players []*simulator.Persona
	for _, p := range c.pop.Players() {
		if p.HeldOut == heldOut {
			players = append(players, p)
		}
	}
	out := make([]rl.Prompt, 0, n)
	for i := range n {
		p := players[i%len(players)]
		pr := rl.PlayerPrompt(p, seedBase+uint64(i), system, "") // trained in its own layout, never served: no greeting
		pr.Demos = c.demos(p.ID, -1)
		out = append(out, pr)
	}
	return out
}

// npcInstances renders dialogues the way learner.TrainSFT trains the NPC:
// its card as the system turn, then the user and NPC turns, with loss
// weights on each NPC turn's text and closing end token; cut to maxSeq+1.
func npcInstances(tok *inference.Tokenizer, card string, ds []schema.Dialogue, maxSeq int) ([][]int, [][]float32, error) {
	var seqs [][]int
	var ws [][]float32
	for _, d := range ds {
		var ids []int
		var w []float32
		add := func(role, text string, loss bool) error {
			piece, err := tok.EncodeChat([]inference.Message{{Role: role, Text: text}}, false)
			if err != nil {
				return err
			}
			for k, id := range piece {
				ids = append(ids, id)
				w = append(w, map[bool]float32{true: 1, false: 0}[loss && k > 0])
			}
			return nil
		}
		if err := add(inference.RoleSystem, card, false); err != nil {
			return nil, nil, err
		}
		for _, x := range d.Exchanges {
			if err := add(inference.RoleUser, x.User, false); err != nil {
				return nil, nil, err
			}
			if err := add(inference.RoleNPC, x.NPC, true); err != nil {
				return nil, nil, err
			}
		}
		if len(ids) > maxSeq+1 {
			ids, w = ids[:maxSeq+1], w[:maxSeq+1]
		}
		seqs = append(seqs, ids)
		ws = append(ws, w)
	}
	return seqs, ws, nil
}

// Card is the NPC's system turn in experiments: short, because the
// experiment models have short contexts (the gateway's companion card alone
// would fill the tiny profile's).
const Card = "You are a character in a fantasy game, talking with the player. Stay in character, " +
	"follow what the player cares about and ask about it."

// sftConfig is learner.TrainSFT's configuration for one agent of p.
func sftConfig(p Profile, role learner.Role, dataDir string, maxSeq int) learner.SFTConfig {
	c := learner.DefaultSFTConfig(role)
	c.DataDir = dataDir
	c.DefaultCard = Card
	c.Arch = p.Model
	c.Arch.MaxSeq = maxSeq
	c.VocabSize = p.VocabSize
	c.Train.LearningRate = p.SFTLR
	c.Steps, c.BatchSize = p.SFTSteps, p.SFTBatch
	if role == learner.RoleUser {
		c.Steps = p.UserAgentSFTSteps
	}
	c.CheckpointEvery = max(c.Steps, 1)
	c.MaxTurns = p.MaxTurns
	c.DecisionWeight = p.DecisionWeight
	c.UserAgent.Lambda = p.RL.Lambda
	c.UserAgent.Sampling.MaxTokens = p.UserAgentTokens
	c.SkipEvalBefore = true
	c.Eval = learner.EvalConfig{MaxDialogues: p.EvalPrompts, MaxReplies: 32, ReplyTokens: p.Policy.Sampling.MaxTokens,
		MaxTurns: p.MaxTurns, ScoreBatch: 8, Seed: 1}
	return c
}
