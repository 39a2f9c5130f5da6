//go:build long

package rl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/learner"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// refereeBench is one measurement of the referee gate
// (docs/experiments/referee-issue15.md): a population, a user agent trained
// on its sessions, the small profile's SFT NPC, and the gate.
type refereeBench struct {
	Name string `json:"name"`
	// The population plays ScriptedPerPlayer dialogues per persona with
	// scripted NPCs of mixed quality and OnPolicyPerPlayer with the SFT
	// NPC; the user agent trains on the non-held-out personas' sessions.
	PopulationSeed uint64 `json:"population_seed"`
	Players        int    `json:"players"`
	// ExtraPlayers more personas of the same population add sessions to
	// the user agent's training only: the NPC and the referee's held-out
	// personas stay the first Players'.
	ExtraPlayers      int `json:"extra_players"`
	ScriptedPerPlayer int `json:"scripted_per_player"`
	OnPolicyPerPlayer int `json:"on_policy_per_player"`
	MaxTurns          int `json:"max_turns"`
	// The user agent's model and SFT.
	Model          inference.ModelConfig `json:"model"`
	VocabSize      int                   `json:"vocab_size"`
	Steps          int                   `json:"steps"`
	Batch          int                   `json:"batch"`
	LR             float64               `json:"lr"`
	DecisionWeight float64               `json:"decision_weight"`
	// SFTSeed seeds the user agent's initialisation and instance order.
	SFTSeed     uint64 `json:"sft_seed"`
	ReplyTokens int    `json:"reply_tokens"`
	// DemoRisks tags the referee prompts' demos: "raw" (the experiment's
	// empirical hazard by exchange), "training" (min(2h, 1), as training
	// shows past turns) or "none".
	DemoRisks string `json:"demo_risks"`
	// Calibrate fits the user agent's calibration on CalibrationSessions
	// on-policy sessions of non-held-out personas that it did not train on.
	Calibrate           bool `json:"calibrate"`
	CalibrationSessions int  `json:"calibration_sessions"`
	// CompareRespond also judges through Respond (generating the replies
	// the judge never reads), as before the scoring-only path, for its time.
	CompareRespond bool `json:"compare_respond"`
	// SoftLabels trains the user agent on the players' hidden hazard as
	// soft labels instead of the logged decisions
	// (learner.SFTConfig.SoftLabelDiagnostic): the diagnostic that tells
	// the referee's capacity from label noise, never a referee that ships.
	SoftLabels bool             `json:"soft_labels"`
	Referee    rl.RefereeConfig `json:"referee"`
}

// smallBench is the experiment's small profile (experiment.SmallProfile,
// written out so that the bench does not move with it): 240 personas of
// population seed 7, 4 scripted dialogues each of up to 8 exchanges, a
// d64×2 user agent of 600 steps of batch 16 at lr 3e-3 with its decision
// weighted 20, demos with raw risks, rl.DefaultRefereeConfig at depth 6.
func smallBench() refereeBench {
	ref := rl.DefaultRefereeConfig()
	ref.Depth = 6
	return refereeBench{
		Name: "small", PopulationSeed: 7, Players: 240, ScriptedPerPlayer: 4, MaxTurns: 8,
		Model: smallModel(), VocabSize: 512, Steps: 600, Batch: 16, LR: 3e-3,
		DecisionWeight: 20, SFTSeed: 1, ReplyTokens: 16, DemoRisks: "raw", CalibrationSessions: 400, Referee: ref,
	}
}

// smallModel is the small profile's model: d64, 2 layers, 4 heads, FFN
// 128, 192 tokens of context.
func smallModel() inference.ModelConfig {
	m := inference.DefaultModelConfig()
	m.Dim, m.Layers, m.Heads, m.FFNDim, m.MaxSeq = 64, 2, 4, 128, 192
	return m
}

// card is the experiment's NPC system turn (card).
const card = "You are a character in a fantasy game, talking with the player. Stay in character, " +
	"follow what the player cares about and ask about it."

// TestRefereeBench runs when PARLEY_REFEREE_BENCH holds a JSON edit of
// smallBench; it caches the NPC under PARLEY_REFEREE_BENCH_DIR and prints
// the gate's report as JSON.
func TestRefereeBench(t *testing.T) {
	edit := os.Getenv("PARLEY_REFEREE_BENCH")
	if edit == "" {
		t.Skip("PARLEY_REFEREE_BENCH is not set")
	}
	b := smallBench()
	if err := json.Unmarshal([]byte(edit), &b); err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("PARLEY_REFEREE_BENCH_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx := context.Background()
	start := time.Now()

	pcfg := simulator.DefaultPopulationConfig()
	pcfg.Size = b.Players + b.ExtraPlayers
	pop, err := simulator.NewPopulation(pcfg, b.PopulationSeed)
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]bool{}
	for _, p := range pop.Players()[:b.Players] {
		base[p.ID] = true
	}
	starts := map[string]sessionStart{} // every training session's player and seed
	scripted := scriptedSessions(t, pop, b, starts)
	var train, npcTrain []schema.Dialogue
	for _, d := range scripted {
		if p, _ := pop.Player(d.PlayerID); !p.HeldOut {
			train = append(train, d)
			if base[d.PlayerID] {
				npcTrain = append(npcTrain, d)
			}
		}
	}

	// The NPC: the small profile's SFT on the scripted sessions (cached).
	npcCfg := sftConfig(smallModel(), 512, learner.RoleNPC, filepath.Join(dir, fmt.Sprintf("npc-%d-%d", b.PopulationSeed, b.Players)))
	npcCfg.Steps, npcCfg.BatchSize, npcCfg.Train.LearningRate = 300, 16, 3e-3
	npcCfg.MaxTurns = b.MaxTurns
	npc, err := learner.TrainSFT(ctx, npcCfg, npcTrain, logger)
	if err != nil {
		t.Fatal(err)
	}
	npcEng := serve(t, npc.TrainedModel, npc.Tokenizer)
	policy := func(seed uint64) *rl.ModelPolicy {
		pc := rl.DefaultPolicyConfig() // T 0.7, top-k 50, 48 tokens
		pc.Seed = seed
		pol, err := rl.NewModelPolicy(npcEng, npc.Tokenizer, npc.TrainedModel.Config().MaxSeq, pc)
		if err != nil {
			t.Fatal(err)
		}
		return pol
	}
	players := rl.NewPlayerEnv(pop)
	byPlayer := map[string][]schema.Dialogue{}
	for _, d := range scripted {
		byPlayer[d.PlayerID] = append(byPlayer[d.PlayerID], d)
	}
	var trainPlayers, heldPlayers []*simulator.Persona
	for _, p := range pop.Players() {
		switch {
		case p.HeldOut && base[p.ID]:
			heldPlayers = append(heldPlayers, p)
		case !p.HeldOut:
			trainPlayers = append(trainPlayers, p)
		}
	}

	// On-policy sessions of the training personas: for the user agent's
	// training and, apart, the logged sessions its calibration is fitted on.
	var onPolicy []schema.Dialogue
	if b.OnPolicyPerPlayer > 0 {
		var prompts []rl.Prompt
		for k := range b.OnPolicyPerPlayer {
			for i, p := range trainPlayers {
				pr := rl.PlayerPrompt(p, uint64(5_000_000+1000*k+i), card, "")
				starts[pr.ID] = sessionStart{persona: p, seed: pr.Seed}
				prompts = append(prompts, pr)
			}
		}
		if onPolicy, err = rl.PlaySessions(ctx, policy(101), players, prompts, b.MaxTurns); err != nil {
			t.Fatal(err)
		}
	}

	uaCfg := sftConfig(b.Model, b.VocabSize, learner.RoleUser, t.TempDir())
	uaCfg.Arch.MaxSeq = 320
	uaCfg.Steps, uaCfg.BatchSize, uaCfg.Train.LearningRate, uaCfg.DecisionWeight = b.Steps, b.Batch, b.LR, b.DecisionWeight
	uaCfg.MaxTurns, uaCfg.Seed = b.MaxTurns, b.SFTSeed
	uaCfg.UserAgent.Sampling.MaxTokens = b.ReplyTokens
	if b.SoftLabels {
		uaCfg.SoftLabelDiagnostic = hiddenHazards(starts)
	}
	trainStart := time.Now()
	uaData := append(append([]schema.Dialogue(nil), train...), onPolicy...)
	ua, err := learner.TrainSFT(ctx, uaCfg, uaData, logger)
	if err != nil {
		t.Fatal(err)
	}
	trainSeconds := time.Since(trainStart).Seconds()
	uaEng := serve(t, ua.TrainedModel, ua.Tokenizer)
	agent, err := simulator.NewUserAgent(uaEng, uaCfg.UserAgent)
	if err != nil {
		t.Fatal(err)
	}

	risks := map[string][]float64{
		"raw":      simulator.EmpiricalRisks(uaData, b.MaxTurns),
		"training": simulator.TrainingRisks(uaData, b.MaxTurns),
		"none":     nil,
	}[b.DemoRisks]
	demos := func(playerID string) []simulator.PromptDialogue {
		var out []simulator.PromptDialogue
		for _, d := range byPlayer[playerID][:min(2, len(byPlayer[playerID]))] {
			out = append(out, simulator.PromptDialogueOf(d, risks))
		}
		return out
	}

	var prompts []rl.Prompt
	for i := range max(b.Referee.Groups, b.Referee.Dialogues) {
		p := heldPlayers[i%len(heldPlayers)]
		pr := rl.PlayerPrompt(p, 9_000_000+uint64(i), card, "")
		pr.Demos = demos(p.ID)
		prompts = append(prompts, pr)
	}
	pol := policy(b.Referee.Seed*31337 + 11)
	sample, err := rl.SampleReferee(ctx, b.Referee, pol, players, prompts)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}

	var calib simulator.Calibration
	if b.Calibrate {
		uncalibrated, err := sample.Judge(ctx, pol, rl.NewUserAgentEnv(agent, b.Referee.Seed*7727+3))
		if err != nil {
			t.Fatal(err)
		}
		out["report_uncalibrated"] = uncalibrated
		var prompts []rl.Prompt
		for i := range b.CalibrationSessions {
			p := trainPlayers[i%len(trainPlayers)]
			prompts = append(prompts, rl.PlayerPrompt(p, uint64(7_000_000+i), card, ""))
		}
		logged, err := rl.PlaySessions(ctx, policy(202), players, prompts, b.MaxTurns)
		if err != nil {
			t.Fatal(err)
		}
		var decisions int
		calib, decisions, err = agent.FitCalibrationOn(ctx, logged, func(d schema.Dialogue) []simulator.PromptDialogue { return demos(d.PlayerID) },
			simulator.TrainingRisks(uaData, b.MaxTurns))
		if err != nil {
			t.Fatal(err)
		}
		if agent, err = agent.WithCalibration(calib); err != nil {
			t.Fatal(err)
		}
		t.Logf("calibration %+v from %d decisions of %d logged sessions", calib, decisions, len(logged))
	}

	env := rl.NewUserAgentEnv(agent, b.Referee.Seed*7727+3)
	judgeStart := time.Now()
	rep, err := sample.Judge(ctx, pol, env)
	if err != nil {
		t.Fatal(err)
	}
	judgeSeconds := time.Since(judgeStart).Seconds()
	if b.CompareRespond {
		respondStart := time.Now()
		viaRespond, err := sample.Judge(ctx, pol, respondOnly{env})
		if err != nil {
			t.Fatal(err)
		}
		out["report_via_respond"], out["judge_seconds_via_respond"] = viaRespond, time.Since(respondStart).Seconds()
	}
	for k, v := range map[string]any{
		"bench": b, "report": rep, "calibration": calib, "user_agent_params": ua.TrainedModel.Config().Params(),
		"train_dialogues": len(train) + len(onPolicy), "on_policy_dialogues": len(onPolicy), "instances": ua.Instances,
		"user_agent_train_seconds": trainSeconds, "judge_seconds": judgeSeconds,
		"total_seconds": time.Since(start).Seconds(), "held_out_metrics": ua.After,
		"hazard_between_share": 1 - rep.HazardWithinShare,
	} {
		out[k] = v
	}
	js, _ := json.Marshal(out)
	fmt.Printf("REFEREE_BENCH %s\n", js)
	_, why := rep.Pass(nil, rl.DefaultRefereeThresholds())
	t.Log(why)
}

// respondOnly hides an environment's EndScorer, so the judge asks Respond.
type respondOnly struct{ rl.Environment }

// scriptedSessions plays every persona's dialogues with scripted NPCs of
// the experiment's mix, and records each session's player and seed in
// starts.
func scriptedSessions(t *testing.T, pop *simulator.Population, b refereeBench, starts map[string]sessionStart) []schema.Dialogue {
	mix := simulator.DefaultCorpusConfig().Qualities
	rng := rand.New(rand.NewPCG(b.PopulationSeed, 0xc0))
	var out []schema.Dialogue
	for i, pl := range pop.Players() {
		for k := range b.ScriptedPerPlayer {
			q := mix[0].Quality
			for x, j := rng.Float64(), 0; j < len(mix); j++ {
				if x < mix[j].Weight {
					q = mix[j].Quality
					break
				}
				x -= mix[j].Weight
			}
			npc, err := simulator.NewScriptedNPC(pop, q, simulator.DefaultScriptConfig(), rng.Uint64())
			if err != nil {
				t.Fatal(err)
			}
			seed := uint64(1_000_000 + i*100 + k)
			d := simulator.Play(pl.Start(seed), npc, b.MaxTurns)
			d.SessionID, d.PlayerID, d.NPCID = fmt.Sprintf("boot-%d-%d", i, k), pl.ID, "bootstrap-npc"
			starts[d.SessionID] = sessionStart{persona: pl, seed: seed}
			d.Deployment, d.PolicyVersion = "experiment", "scripted"
			out = append(out, d)
		}
	}
	return out
}

// sessionStart is the player and seed a simulated session was played with.
type sessionStart struct {
	persona *simulator.Persona
	seed    uint64
}

// hiddenHazards reads the players' hidden hazard after every NPC turn of a
// training session by replaying the session with its player (the same
// seed and NPC turns give the same conversation), and checks that the
// replay says what the log does. For the soft-label diagnostic only.
func hiddenHazards(starts map[string]sessionStart) learner.HiddenHazards {
	return func(d schema.Dialogue) ([]float64, error) {
		s, ok := starts[d.SessionID]
		if !ok {
			return nil, fmt.Errorf("session %s: player and seed unknown", d.SessionID)
		}
		conv := s.persona.Start(s.seed)
		user := conv.Opening()
		out := make([]float64, len(d.Exchanges))
		for k, x := range d.Exchanges {
			if x.User != user {
				return nil, fmt.Errorf("session %s exchange %d: the replay says %q, the log %q", d.SessionID, k+1, user, x.User)
			}
			user, _, out[k] = conv.Respond(x.NPC)
		}
		return out, nil
	}
}

// sftConfig is the experiment's SFT configuration of one agent.
func sftConfig(model inference.ModelConfig, vocab int, role learner.Role, dataDir string) learner.SFTConfig {
	c := learner.DefaultSFTConfig(role)
	c.DataDir, c.DefaultCard, c.Arch, c.VocabSize = dataDir, card, model, vocab
	c.CheckpointEvery = 1000
	c.SkipEvalBefore = true
	c.Eval = learner.EvalConfig{MaxDialogues: 48, MaxReplies: 8, ReplyTokens: 16, MaxTurns: 8, ScoreBatch: 8, Seed: 1}
	return c
}

// serve starts an engine on m for the test's life.
func serve(t *testing.T, m *inference.Model, tok *inference.Tokenizer) *inference.Engine {
	c := inference.DefaultEngineConfig()
	c.MaxBatch, c.QueueSize = 64, 4096
	eng, err := inference.NewEngine(m, tok, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := eng.Start()
	t.Cleanup(stop)
	return eng
}
