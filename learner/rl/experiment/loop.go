package experiment

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/learner"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// Round is one round of issue 15's loop for one seed: the user agent the
// loop's method trained against, that agent's referee gate, and the
// round's policy against SFT only on the evaluation's held-out openings,
// with the players and with the round's user agent.
type Round struct {
	Round   int    `json:"round"`
	Seed    int    `json:"seed"`
	Variant string `json:"variant"`
	// UserAgent is the user agent's version in the run's registry
	// (models/user-agent/…): "bootstrap" in round 1.
	UserAgent string `json:"user_agent"`
	// Refresh made UserAgent; nil in round 1.
	Refresh *Refresh `json:"refresh,omitempty"`
	// Referee is UserAgent's referee gate, the siblings written by the
	// policy RL starts from (in round 1 Results.Referee, the SFT policy's);
	// RefereeBefore is the previous round's user agent on the same sample,
	// which Referee.Pass requires UserAgent not to fall below.
	Referee       *RefereeGate      `json:"referee"`
	RefereeBefore *rl.RefereeReport `json:"referee_before,omitempty"`
	// PolicyStart and PolicyEnd digest the policy's weights when the
	// round's RL starts and ends: a round starts where the previous ended.
	PolicyStart string `json:"policy_start"`
	PolicyEnd   string `json:"policy_end"`
	// The round's policy on the held-out players: Avg.L, Exp.L, PPL of the
	// reference NPC turns and its ratio to SFT's, and Players, the paired
	// difference from SFT only (policy − SFT).
	AvgL     float64       `json:"avg_l"`
	ExpL     float64       `json:"exp_l"`
	PPL      float64       `json:"ppl"`
	PPLRatio float64       `json:"ppl_ratio"`
	Players  rl.Comparison `json:"players"`
	// The same with the round's user agent (α = 1): the policy's and SFT
	// only's Avg.L and Exp.L and their paired difference.
	UAAvgL         float64       `json:"ua_avg_l"`
	UAExpL         float64       `json:"ua_exp_l"`
	SFTUAAvgL      float64       `json:"sft_ua_avg_l"`
	SFTUAExpL      float64       `json:"sft_ua_exp_l"`
	UserAgentDelta rl.Comparison `json:"user_agent_delta"`
	// Row is the round's RL row (curve, cost, dialogues); in round 1 it is
	// the variant's row of Results.Rows and left out here.
	Row *Row `json:"row,omitempty"`
	// Seconds is the round's time: in round 1 its RL steps', later the
	// play, refresh, referee gate, RL and evaluations.
	Seconds float64 `json:"seconds"`
}

// Refresh is how a round's user agent was made: the previous one (Parent)
// fine-tuned with learner.TrainSFT on the dialogues it was trained on
// (OldDialogues) plus those the previous round's policy played with the
// training players (NewDialogues, NewAvgL exchanges on average).
type Refresh struct {
	Parent       string  `json:"parent"`
	Policy       string  `json:"policy"`
	OldDialogues int     `json:"old_dialogues"`
	NewDialogues int     `json:"new_dialogues"`
	NewAvgL      float64 `json:"new_avg_l"`
	// Dialogues is the JSON-lines file of the new dialogues, relative to
	// the output directory.
	Dialogues string `json:"dialogues"`
	// TrainDialogues and HeldOutDialogues are TrainSFT's split of old and
	// new; Before and After its held-out metrics of the parent and the
	// refreshed agent; Loss the last training loss.
	TrainDialogues   int             `json:"train_dialogues"`
	HeldOutDialogues int             `json:"held_out_dialogues"`
	Steps            int             `json:"steps"`
	Before           learner.Metrics `json:"before"`
	After            learner.Metrics `json:"after"`
	Loss             float64         `json:"loss"`
	Seconds          float64         `json:"seconds"`
}

// bootstrapUserAgent is the bootstrap user agent's version in the run's
// registry.
const bootstrapUserAgent = "bootstrap"

// loopVariant is the method the loop carries from round to round, "" for a
// run without a loop: AT-GRPO (the paper's method and the periodic cycle's)
// when the run trains it, else the last other method of the main table.
// Every round is compared with SFT only, so the run must train it too.
func loopVariant(p Profile, vs []Variant) (string, error) {
	if p.rounds() < 2 {
		return "", nil
	}
	if !slices.ContainsFunc(vs, func(v Variant) bool { return v.Name == VariantSFT }) {
		return "", fmt.Errorf("experiment: a loop compares every round with %q: run it too", VariantSFT)
	}
	name := ""
	for _, v := range vs {
		if v.Config != nil && v.Table == "main" && v.TrainOn != TrainOnPlayers {
			if name = v.Name; name == VariantATGRPO {
				break
			}
		}
	}
	if name == "" {
		return "", errors.New("experiment: a loop needs an RL method of the main table trained against the user agent")
	}
	return name, nil
}

// loop runs rounds 2… of the loop for one seed after its rows: the
// previous round's policy plays the training players (play), the user
// agent is refreshed on the old and the new dialogues (refresh) and
// calibrated on that policy's sessions (calibrate), its referee gate is
// measured, and the loop's method trains again from the
// previous round's policy against the refreshed agent. done receives round
// 1 (from the rows) and each later round as it ends.
func (e *env) loop(ctx context.Context, res *Results, name string, seed int, done func(Round) error) error {
	i := slices.IndexFunc(res.Variants, func(v Variant) bool { return v.Name == name })
	sft, first := rowOf(res, VariantSFT, seed), rowOf(res, name, seed)
	if i < 0 || sft == nil || first == nil {
		return fmt.Errorf("loop: no %s and %s rows of seed %d", VariantSFT, name, seed)
	}
	v := res.Variants[i]
	round := Round{Round: 1, Seed: seed, Variant: name, UserAgent: bootstrapUserAgent, Referee: res.Referee}
	if err := e.summarize(&round, first, sft, sft.UAHeldOut); err != nil {
		return err
	}
	if err := done(round); err != nil {
		return err
	}
	if err := e.saveUserAgent(); err != nil {
		return err
	}
	ua, uaVersion, policy := e.ua, bootstrapUserAgent, e.policyDir(1, seed)
	data := slices.Clip(e.corpus.train)
	for r := 2; r <= e.prof.rounds(); r++ {
		began := time.Now()
		next, nextVersion, prev := ua, uaVersion, (*simulator.UserAgent)(nil)
		var ref *Refresh
		if !e.prof.Loop.KeepUserAgent {
			played, err := e.play(ctx, policy, r, seed)
			if err != nil {
				return err
			}
			refreshed, f, stop, err := e.refresh(ctx, r, seed, uaVersion, data, played)
			if err != nil {
				return err
			}
			defer stop()
			// Calibrated as the bootstrap agent was, on sessions of the
			// policy that serves when it is refreshed.
			if refreshed, err = e.calibrate(ctx, policy, refreshed); err != nil {
				return fmt.Errorf("loop round %d: %w", r, err)
			}
			data = append(data, played...)
			f.Policy = filepath.Base(policy)
			next, nextVersion, prev, ref = refreshed, loopVersion(r, seed), ua, f
		}
		gate, before, err := e.refereeGate(ctx, policy, prev, next)
		if err != nil {
			return err
		}
		a := arm{from: policy, ua: next, save: e.policyDir(r, seed), keepUA: true}
		row, err := e.run(ctx, v, seed, &a)
		if err != nil {
			return fmt.Errorf("loop round %d: %w", r, err)
		}
		sftUA, err := e.evalCheckpoint(ctx, e.npcDir, seed, next)
		if err != nil {
			return fmt.Errorf("loop round %d: %w", r, err)
		}
		ua, uaVersion, policy = next, nextVersion, a.save
		round := Round{Round: r, Seed: seed, Variant: name, UserAgent: uaVersion, Refresh: ref, Referee: gate, RefereeBefore: before, Row: &row}
		if err := e.summarize(&round, &row, sft, sftUA.Outcomes); err != nil {
			return err
		}
		round.Seconds = time.Since(began).Seconds()
		e.logger.Info("loop round", "round", r, "seed", seed, "avg_l", round.AvgL, "delta_avg_l", round.Players.DeltaAvgL,
			"ua_avg_l", round.UAAvgL, "sft_ua_avg_l", round.SFTUAAvgL, "kendall_tau", gate.KendallTau, "seconds", round.Seconds)
		if err := done(round); err != nil {
			return err
		}
	}
	return nil
}

// summarize fills r's evaluation from the round's row and SFT only's row,
// sftUA being SFT only's dialogues with the round's user agent.
func (e *env) summarize(r *Round, row, sft *Row, sftUA []rl.Outcome) error {
	r.AvgL, r.ExpL, r.PPL, r.UAAvgL, r.UAExpL = row.AvgL, row.ExpL, row.PPL, row.UAAvgL, row.UAExpL
	r.PolicyStart, r.PolicyEnd = row.PolicyStart, row.PolicyEnd
	r.SFTUAAvgL, r.SFTUAExpL = meanLength(sftUA), rl.ExpectedLength(sftUA, e.prof.EvalDepth)
	if r.Seconds == 0 {
		r.Seconds = row.SecPerStep * float64(e.prof.RL.Steps)
	}
	if sft.PPL > 0 {
		r.PPLRatio = row.PPL / sft.PPL
	}
	bs := rl.DefaultBootstrapConfig()
	var err error
	if r.Players, err = rl.Compare([][]rl.Outcome{row.HeldOut}, [][]rl.Outcome{sft.HeldOut}, e.prof.EvalDepth, bs); err != nil {
		return fmt.Errorf("loop round %d: players: %w", r.Round, err)
	}
	if r.UserAgentDelta, err = rl.Compare([][]rl.Outcome{row.UAHeldOut}, [][]rl.Outcome{sftUA}, e.prof.EvalDepth, bs); err != nil {
		return fmt.Errorf("loop round %d: user agent: %w", r.Round, err)
	}
	return nil
}

func meanLength(ds []rl.Outcome) float64 {
	ls := make([]float64, len(ds))
	for i, d := range ds {
		ls[i] = float64(d.Length)
	}
	m, _ := rl.MeanStd(ls)
	return m
}

// rowOf is the row of variant name and seed, nil when res has none.
func rowOf(res *Results, name string, seed int) *Row {
	for i := range res.Rows {
		if res.Rows[i].Variant == name && res.Rows[i].Seed == seed {
			return &res.Rows[i]
		}
	}
	return nil
}

// registry is the run's model registry: the loop's policies (npc/…) and
// user agents (user-agent/…).
func (e *env) registry() string { return filepath.Join(e.out, "models") }

// loopVersion names round r's policy and user agent of seed.
func loopVersion(r, seed int) string { return fmt.Sprintf("round%d-seed%d", r, seed) }

// policyDir is round r's policy checkpoint of seed.
func (e *env) policyDir(r, seed int) string {
	return filepath.Join(e.registry(), "npc", loopVersion(r, seed))
}

func checkpointExists(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, inference.ManifestFile))
	return err == nil
}

// savePolicy checkpoints the policy m trained by v into dir and returns
// its weights' digest.
func (e *env) savePolicy(dir string, m *inference.Model, v Variant) (string, error) {
	digest, err := weightsDigest(m)
	if err != nil {
		return "", err
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("save policy: %w", err)
	}
	man := schema.Manifest{Model: "npc", Version: filepath.Base(dir), Algorithm: string(v.Config.Algorithm), CreatedAt: time.Now().UTC()}
	if err := inference.SaveCheckpoint(dir, m, e.tok, man); err != nil {
		return "", fmt.Errorf("save policy: %w", err)
	}
	return digest, nil
}

// saveUserAgent puts the bootstrap user agent into the run's registry,
// the first refresh's parent.
func (e *env) saveUserAgent() error {
	model := e.refreshConfig(0, 0).Model
	dir := filepath.Join(e.registry(), model, bootstrapUserAgent)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("save user agent: %w", err)
	}
	man := schema.Manifest{Model: model, Version: bootstrapUserAgent, Algorithm: "sft", CreatedAt: time.Now().UTC()}
	if err := inference.SaveCheckpoint(dir, e.uaModel, e.uaTok, man); err != nil {
		return fmt.Errorf("save user agent: %w", err)
	}
	return nil
}

// weightsDigest is a SHA-256 of the model's weights (names, shapes and
// values), short hex: equal digests, equal parameters.
func weightsDigest(m *inference.Model) (string, error) {
	ws, shapes, err := m.Weights()
	if err != nil {
		return "", fmt.Errorf("weights digest: %w", err)
	}
	names := make([]string, 0, len(ws))
	for n := range ws {
		names = append(names, n)
	}
	slices.Sort(names)
	h := sha256.New()
	var buf [4]byte
	for _, n := range names {
		h.Write([]byte(n))
		for _, d := range shapes[n] {
			binary.LittleEndian.PutUint32(buf[:], uint32(d))
			h.Write(buf[:])
		}
		for _, x := range ws[n] {
			binary.LittleEndian.PutUint32(buf[:], math.Float32bits(x))
			h.Write(buf[:])
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:12]), nil
}

// policyNPC lets a policy answer a player in simulator.Play: it keeps the
// dialogue so far as the policy's state. The first error stops its
// sampling (it then answers with nothing) and is kept in err.
type policyNPC struct {
	ctx     context.Context
	policy  rl.Policy
	prompt  rl.Prompt
	history []rl.Exchange
	last    string
	err     error
}

var _ simulator.NPC = (*policyNPC)(nil)

// Reply samples the policy's next turn after the player's message.
func (n *policyNPC) Reply(player string) (string, schema.Safety) {
	if n.err != nil {
		return "", schema.SafetyNone
	}
	if n.prompt.Opening == "" {
		n.prompt.Opening = player
	} else {
		n.history = append(n.history, rl.Exchange{NPC: n.last, User: player})
	}
	gens, err := n.policy.GenerateBatch(n.ctx, []rl.State{{Prompt: &n.prompt, History: n.history}})
	if err != nil {
		n.err = err
		return "", schema.SafetyNone
	}
	n.last = gens[0].Text
	return n.last, schema.SafetyNone
}

// play lets the policy checkpointed in dir talk with every training player
// of the population Loop.DialoguesPerPlayer times, as the bootstrap's
// scripted NPCs did (simulator.Play, up to MaxTurns exchanges), so that
// the refreshed user agent sees the policy's own turns. Each dialogue
// samples with a seed of its own, so the dialogues do not depend on how
// the engine batches them. They are also written, as JSON lines, to
// loop/<version>-dialogues.jsonl in the output directory.
func (e *env) play(ctx context.Context, dir string, round, seed int) ([]schema.Dialogue, error) {
	model, _, _, err := inference.LoadCheckpoint(dir, inference.DefaultBackendConfig())
	if err != nil {
		return nil, fmt.Errorf("loop play: %w", err)
	}
	eng, stop, err := startEngine(model, e.tok, e.logger)
	if err != nil {
		return nil, fmt.Errorf("loop play: %w", err)
	}
	defer stop()
	var players []*simulator.Persona
	for _, p := range e.corpus.pop.Players() {
		if !p.HeldOut {
			players = append(players, p)
		}
	}
	per := e.prof.Loop.DialoguesPerPlayer
	out := make([]schema.Dialogue, len(players)*per)
	errs := make([]error, len(out))
	sem := make(chan struct{}, engineConfig().MaxBatch)
	var wg sync.WaitGroup
	began := time.Now()
	for i := range out {
		p, k := players[i/per], i%per
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			pc := e.prof.Policy
			pc.Seed = uint64(round)<<40 | uint64(seed)<<32 | uint64(i)
			pol, err := rl.NewModelPolicy(eng, e.tok, model.Config().MaxSeq, pc)
			if err != nil {
				errs[i] = err
				return
			}
			npc := &policyNPC{ctx: ctx, policy: pol, prompt: rl.Prompt{ID: fmt.Sprintf("%s/loop-%d", p.ID, i), PlayerID: p.ID, System: Card}}
			d := simulator.Play(p.Start(uint64(round)<<40|uint64(seed)<<32|uint64(i)), npc, e.prof.MaxTurns)
			d.SessionID, d.PlayerID, d.NPCID = fmt.Sprintf("loop-%d-%d-%d-%d", round, seed, i/per, k), p.ID, "loop-npc"
			d.Deployment, d.PolicyVersion = "experiment", filepath.Base(dir)
			out[i], errs[i] = d, npc.err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("loop play: %w", err)
	}
	e.logger.Info("loop: the policy played the training players", "policy", filepath.Base(dir), "dialogues", len(out),
		"avg_l", avgLength(out), "seconds", time.Since(began).Seconds())
	return out, writeDialogues(e.dialoguesFile(round, seed), out)
}

func avgLength(ds []schema.Dialogue) float64 {
	n := 0
	for _, d := range ds {
		n += len(d.Exchanges)
	}
	return float64(n) / float64(max(len(ds), 1))
}

// dialoguesFile is where play keeps the dialogues of round r's refresh.
func (e *env) dialoguesFile(r, seed int) string {
	return filepath.Join(e.out, "loop", loopVersion(r, seed)+"-dialogues.jsonl")
}

func writeDialogues(path string, ds []schema.Dialogue) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write dialogues: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write dialogues: %w", err)
	}
	enc := json.NewEncoder(f)
	for _, d := range ds {
		if err := enc.Encode(d); err != nil {
			f.Close()
			return fmt.Errorf("write dialogues: %w", err)
		}
	}
	return f.Close()
}

// refreshConfig is learner.TrainSFT's configuration of round r's refresh
// of seed: the bootstrap's user-agent settings, fine-tuning the previous
// version of the run's registry for Loop.RefreshSteps at Loop.RefreshLR
// and publishing the result there.
func (e *env) refreshConfig(r, seed int) learner.SFTConfig {
	cfg := sftConfig(e.prof, learner.RoleUser, filepath.Join(e.out, "sft"), e.prof.UserAgentMaxSeq)
	cfg.Registry, cfg.Version = e.registry(), loopVersion(r, seed)
	cfg.RunID = "refresh-" + cfg.Version
	if l := e.prof.Loop; l != nil {
		cfg.Steps, cfg.Train.LearningRate, cfg.CheckpointEvery = l.RefreshSteps, l.RefreshLR, l.RefreshSteps
	}
	cfg.SkipEvalBefore = false
	cfg.Progress = e.progress
	return cfg
}

// refresh fine-tunes user agent version parent on the old and the new
// dialogues with learner.TrainSFT, as the product's refresh does
// (learner/refresh.go), and serves the result until stop is called.
func (e *env) refresh(ctx context.Context, r, seed int, parent string, old, played []schema.Dialogue) (*simulator.UserAgent, *Refresh, func(), error) {
	began := time.Now()
	cfg := e.refreshConfig(r, seed)
	cfg.Parent = parent
	// A rerun played other dialogues: the refresh starts afresh.
	for _, dir := range []string{filepath.Join(cfg.DataDir, cfg.RunID), filepath.Join(cfg.Registry, cfg.Model, cfg.Version)} {
		if err := os.RemoveAll(dir); err != nil {
			return nil, nil, nil, fmt.Errorf("loop refresh: %w", err)
		}
	}
	data := append(slices.Clip(old), played...)
	res, err := learner.TrainSFT(ctx, cfg, data, e.logger)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("loop refresh: %w", err)
	}
	eng, stop, err := startEngine(res.TrainedModel, res.Tokenizer, e.logger)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("loop refresh: %w", err)
	}
	ua, err := simulator.NewUserAgent(eng, cfg.UserAgent)
	if err != nil {
		stop()
		return nil, nil, nil, fmt.Errorf("loop refresh: %w", err)
	}
	rel, _ := filepath.Rel(e.out, e.dialoguesFile(r, seed))
	ref := &Refresh{Parent: parent, OldDialogues: len(old), NewDialogues: len(played), NewAvgL: avgLength(played), Dialogues: rel,
		TrainDialogues: res.TrainDialogues, HeldOutDialogues: res.HeldOutDialogues, Steps: cfg.Steps,
		Before: res.Before, After: res.After, Loss: lastLoss(res.Losses), Seconds: time.Since(began).Seconds()}
	e.logger.Info("loop: user agent refreshed", "version", cfg.Version, "parent", parent, "old", len(old), "new", len(played),
		"rho_before", res.Before.Rho, "rho_after", res.After.Rho, "sim_avg_l", res.After.AvgL, "real_avg_l", res.After.RealAvgL)
	return ua, ref, stop, nil
}

// evalCheckpoint evaluates the policy checkpointed in dir with user agent
// ua on the evaluation's openings.
func (e *env) evalCheckpoint(ctx context.Context, dir string, seed int, ua *simulator.UserAgent) (rl.EvalResult, error) {
	model, _, _, err := inference.LoadCheckpoint(dir, inference.DefaultBackendConfig())
	if err != nil {
		return rl.EvalResult{}, err
	}
	eng, stop, err := startEngine(model, e.tok, e.logger)
	if err != nil {
		return rl.EvalResult{}, err
	}
	defer stop()
	return e.evaluate(ctx, eng, model.Config().MaxSeq, seed, evalUserAgent(ua, seed), e.eval)
}
