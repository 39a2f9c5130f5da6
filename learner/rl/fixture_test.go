package rl

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// fixture is a small dialogue agent trained on scripted-NPC dialogues of
// mixed quality, served by a running engine, and the population it talks to.
type fixture struct {
	pop    *simulator.Population
	tok    *inference.Tokenizer
	model  *inference.Model
	engine *inference.Engine
}

// newFixture trains the fixture's tokenizer and model (sftSteps AdamW steps
// on NPC turns) and starts its engine until the test ends.
func newFixture(t testing.TB, sftSteps int) *fixture {
	t.Helper()
	pcfg := simulator.DefaultPopulationConfig()
	pcfg.Size = 20
	pop, err := simulator.NewPopulation(pcfg, 11)
	if err != nil {
		t.Fatal(err)
	}
	var dialogues []schema.Dialogue
	qualities := []simulator.NPCQuality{simulator.NPCGood, simulator.NPCGeneric, simulator.NPCOffTopic, simulator.NPCRetention}
	for i, p := range pop.Players() {
		if p.HeldOut {
			continue
		}
		for k := range 2 {
			q := qualities[(i+k)%len(qualities)]
			npc, err := simulator.NewScriptedNPC(pop, q, simulator.DefaultScriptConfig(), uint64(i*10+k))
			if err != nil {
				t.Fatal(err)
			}
			dialogues = append(dialogues, simulator.Play(p.Start(uint64(1000+k)), npc, 4))
		}
	}
	var texts []string
	for _, d := range dialogues {
		for _, x := range d.Exchanges {
			texts = append(texts, x.User, x.NPC)
		}
	}
	tok, err := inference.TrainTokenizer(texts, 512)
	if err != nil {
		t.Fatal(err)
	}
	mc := inference.DefaultModelConfig()
	mc.VocabSize, mc.Dim, mc.Layers, mc.Heads, mc.FFNDim, mc.MaxSeq = tok.VocabSize(), 32, 1, 2, 64, 160
	m, err := inference.NewModel(mc, inference.DefaultBackendConfig(), 1)
	if err != nil {
		t.Fatal(err)
	}
	tc := inference.DefaultTrainConfig()
	tc.LearningRate, tc.WarmupSteps = 3e-3, 10
	tr, err := inference.NewTrainer(m, tc)
	if err != nil {
		t.Fatal(err)
	}
	seqs, weights := npcTurnsBatch(tok, dialogues, mc.MaxSeq)
	rng := rand.New(rand.NewPCG(1, 2))
	for range sftSteps {
		var b inference.Batch
		for range 8 {
			i := rng.IntN(len(seqs))
			b.Tokens = append(b.Tokens, seqs[i])
			b.Weights = append(b.Weights, weights[i])
		}
		if _, err := tr.Step(b); err != nil {
			t.Fatal(err)
		}
	}
	ecfg := inference.DefaultEngineConfig()
	ecfg.MaxBatch, ecfg.QueueSize = 64, 512
	eng, err := inference.NewEngine(m, tok, ecfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return &fixture{pop: pop, tok: tok, model: m, engine: eng}
}

// npcTurnsBatch renders each dialogue as the NPC's chat, weighing only the
// NPC's turns (text and closing end token), cut to maxSeq tokens.
func npcTurnsBatch(tok *inference.Tokenizer, ds []schema.Dialogue, maxSeq int) ([][]int, [][]float32) {
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
		if len(ids) > maxSeq {
			ids, w = ids[:maxSeq], w[:maxSeq]
		}
		seqs = append(seqs, ids)
		ws = append(ws, w)
	}
	return seqs, ws
}

// prompts returns one prompt per persona (held out or not), seeds from base.
func (f *fixture) prompts(heldOut bool, n int, base uint64) []Prompt {
	var out []Prompt
	for _, p := range f.pop.Players() {
		if p.HeldOut != heldOut || p.Kind.Adversarial() {
			continue
		}
		out = append(out, PlayerPrompt(p, base+uint64(len(out)), "", ""))
		if len(out) == n {
			break
		}
	}
	return out
}
