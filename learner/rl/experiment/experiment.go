// Package experiment reproduces the paper's experiments at the scale of
// this machine: it bootstraps a dialogue agent and a user agent by SFT on
// dialogues of the ground-truth population, trains SFT-only, GRPO, GSPO,
// TreeRPO and AT-GRPO (and AT-GRPO's ablations) from the same start
// against the same user agent, evaluates each on held-out players and on
// the user agent, and writes results.md, results.csv, PNG charts and
// results.json with issue 15's acceptance (Accept): the referee gate
// measured before any RL and every method against SFT only, paired on the
// held-out players.
package experiment

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/internal/progress"
	"github.com/parleyhq/parley/learner"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// Config selects what Run does.
type Config struct {
	// Profile is "paper", "small" or "tiny"; Override, when set, replaces
	// the named profile (tests shrink it further).
	Profile  string   `json:"profile"`
	Override *Profile `json:"-"`
	// Seeds is the number of RL seeds per variant (1, 2, …).
	Seeds int `json:"seeds"`
	// OutDir receives results.md, results.csv, the charts and models/.
	OutDir string `json:"out_dir"`
	// Only, when set, restricts the run to the variants of these names.
	Only []string `json:"only,omitempty"`
	// TrainOn is the RL environment: TrainOnUserAgent (the paper's
	// method, the default) or TrainOnPlayers, the ground-truth players as
	// an oracle user agent (a diagnostic: what RL reaches when the
	// environment is faithful).
	TrainOn string `json:"train_on,omitempty"`
	// Rounds, when positive, is the number of RL rounds of issue 15's loop
	// (Profile.Loop, DefaultLoop when the profile has none); 1 is no loop.
	// Zero keeps the profile's.
	Rounds int `json:"rounds,omitempty"`
	// KeepUserAgent runs the loop's control (Loop.KeepUserAgent): later
	// rounds against the bootstrap user agent, without refreshes.
	KeepUserAgent bool `json:"keep_user_agent,omitempty"`
	// Progress, when set, receives the progress of the SFT runs (loss,
	// tokens/s, ETA) and of the rows (count, rate, ETA): bars on a
	// terminal, a line every few seconds otherwise.
	Progress io.Writer `json:"-"`
}

// RL environments of Config.TrainOn.
const (
	TrainOnUserAgent = "user-agent"
	TrainOnPlayers   = "players"
)

// DefaultConfig runs the small profile with three seeds into ./experiment.
func DefaultConfig() Config { return Config{Profile: "small", Seeds: 3, OutDir: "experiment"} }

// Validate reports the first bad field.
func (c Config) Validate() error {
	if c.Seeds < 1 {
		return fmt.Errorf("experiment: seeds %d must be at least 1", c.Seeds)
	}
	if c.OutDir == "" {
		return errors.New("experiment: an output directory is required")
	}
	if c.TrainOn != "" && c.TrainOn != TrainOnUserAgent && c.TrainOn != TrainOnPlayers {
		return fmt.Errorf("experiment: train on %q: want %q or %q", c.TrainOn, TrainOnUserAgent, TrainOnPlayers)
	}
	prof, err := c.profile()
	if err != nil {
		return err
	}
	if prof.rounds() > 1 && c.TrainOn == TrainOnPlayers {
		return errors.New("experiment: the loop refreshes the user agent RL trains against: it needs RL against the user agent")
	}
	return prof.Validate()
}

// profile is the run's profile: Override or the named one, with Rounds
// applied (one round is no loop).
func (c Config) profile() (Profile, error) {
	if c.Rounds < 0 {
		return Profile{}, fmt.Errorf("experiment: rounds %d must not be negative", c.Rounds)
	}
	var prof Profile
	if c.Override != nil {
		prof = *c.Override
	} else {
		var err error
		if prof, err = ProfileByName(c.Profile); err != nil {
			return Profile{}, err
		}
	}
	switch {
	case c.Rounds == 1:
		prof.Loop = nil
	case c.Rounds > 1 && prof.Loop == nil:
		l := DefaultLoop(prof, c.Rounds)
		prof.Loop = &l
	case c.Rounds > 1:
		l := *prof.Loop
		l.Rounds = c.Rounds
		prof.Loop = &l
	}
	if c.KeepUserAgent && prof.Loop != nil {
		l := *prof.Loop
		l.KeepUserAgent = true
		prof.Loop = &l
	}
	return prof, nil
}

// CurvePoint is one point of Figure 5: the policy with the user agent
// (α = 1) after Step RL steps.
type CurvePoint struct {
	Step int     `json:"step"`
	AvgR float64 `json:"avg_r"`
	AvgL float64 `json:"avg_l"`
}

// Row is the outcome of one variant and seed.
type Row struct {
	Variant string `json:"variant"`
	Table   string `json:"table"`
	Seed    int    `json:"seed"`
	// Held-out ground-truth players: PPL of the reference NPC turns,
	// Dist-1/2 of the policy's turns, Avg.L and Avg.r.
	PPL   float64 `json:"ppl"`
	Dist1 float64 `json:"dist1"`
	Dist2 float64 `json:"dist2"`
	AvgL  float64 `json:"avg_l"`
	AvgR  float64 `json:"avg_r"`
	// ExpL is the expected length on the held-out players from the
	// hazards (rl.ExpectedLength), beside the sampled AvgL.
	ExpL float64 `json:"exp_l"`
	// The same held-out openings with the user agent (α = 1).
	UAAvgL float64 `json:"ua_avg_l"`
	UAAvgR float64 `json:"ua_avg_r"`
	UAExpL float64 `json:"ua_exp_l"`
	// TrainOn is the RL environment of the row (empty for SFT only).
	TrainOn string `json:"train_on,omitempty"`
	// HeldOut are the dialogues with the held-out players, in the order of
	// the evaluation's openings (the same for every row): the acceptance
	// pairs rows on them.
	HeldOut []rl.Outcome `json:"held_out,omitempty"`
	// UAHeldOut are the same openings' dialogues with the user agent, kept
	// by a run with a loop (Round pairs them).
	UAHeldOut []rl.Outcome `json:"ua_held_out,omitempty"`
	// PolicyStart and PolicyEnd digest the policy's weights before and
	// after RL (weightsDigest) when the row's policy is kept for the loop.
	PolicyStart string `json:"policy_start,omitempty"`
	PolicyEnd   string `json:"policy_end,omitempty"`
	// Cost (Table 6): seconds per RL step, peak Go heap in use during the
	// run, nodes per tree measured; S and S+W·L of the paper's formula and
	// the exact count without terminations.
	SecPerStep   float64      `json:"sec_per_step"`
	PeakHeapMB   float64      `json:"peak_heap_mb"`
	NodesPerTree float64      `json:"nodes_per_tree"`
	BudgetS      int          `json:"budget_s"`
	GroupNodes   int          `json:"group_nodes"`
	ExactNodes   int          `json:"exact_nodes"`
	Curve        []CurvePoint `json:"curve"`
}

// Bootstrap is what the SFT start looks like on held-out players
// (learner.TrainSFT's evaluation of each agent after training).
type Bootstrap struct {
	NPC           learner.Metrics `json:"npc"`
	UserAgent     learner.Metrics `json:"user_agent"`
	NPCLoss       float64         `json:"npc_loss"`
	UserAgentLoss float64         `json:"user_agent_loss"`
}

// Probe is how strongly the user agent and the ground-truth players react
// to the NPC's quality: the mean termination probability p after a first
// NPC turn written by a scripted NPC of one quality, over held-out
// openings. A user agent whose p does not move with quality gives RL
// nothing to learn from.
type Probe struct {
	Quality   string  `json:"quality"`
	UserAgent float64 `json:"user_agent_p"`
	Players   float64 `json:"players_p"`
}

// Results is everything Run measured.
type Results struct {
	Profile   Profile   `json:"profile"`
	Seeds     int       `json:"seeds"`
	TrainOn   string    `json:"train_on"`
	Variants  []Variant `json:"variants"`
	Rows      []Row     `json:"rows"`
	Bootstrap Bootstrap `json:"bootstrap"`
	Probes    []Probe   `json:"probes"`
	// SFTSeconds is the bootstrap's time (corpus, tokenizer, both SFTs).
	SFTSeconds float64 `json:"sft_seconds"`
	Seconds    float64 `json:"seconds"`
	// Referee is the referee gate measured before any RL.
	Referee *RefereeGate `json:"referee,omitempty"`
	// Acceptance is issue 15's verdict, recomputed from the rows after
	// every row (Accept).
	Acceptance *Acceptance `json:"acceptance,omitempty"`
	// Rounds are the loop's rounds (Profile.Loop), seed by seed; empty
	// without a loop.
	Rounds []Round `json:"rounds,omitempty"`
}

// env holds what every variant shares: the corpus, the tokenizer, the SFT
// checkpoint, the user agent and the prompts.
type env struct {
	prof      Profile
	corpus    *corpus
	tok       *inference.Tokenizer
	npcDir    string
	ua        *simulator.UserAgent
	pool      []rl.Prompt
	eval      []rl.Prompt
	curve     []rl.Prompt
	refs      []rl.Sample
	players   *rl.PlayerEnv
	onPlayers bool
	logger    *slog.Logger
	// topics are the word topics of the training players' messages that
	// the user agent's calibration reads (calibrate).
	topics *simulator.WordTopics
	// out is the output directory; uaModel and uaTok are the bootstrap
	// user agent, which the loop's first refresh fine-tunes.
	out     string
	uaModel *inference.Model
	uaTok   *inference.Tokenizer
	// progress receives the loop's refreshes' SFT progress.
	progress io.Writer
}

// Run bootstraps the agents, trains and evaluates every variant for every
// seed, and writes the report into cfg.OutDir.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) (*Results, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	prof, err := cfg.profile()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("experiment: %w", err)
	}
	e, boot, stopUA, err := bootstrap(ctx, prof, cfg.OutDir, cfg.Progress, logger)
	if err != nil {
		return nil, err
	}
	defer stopUA()
	e.onPlayers = cfg.TrainOn == TrainOnPlayers
	variants := Variants(prof)
	if e.onPlayers { // every variant trains on the players: no oracle to add
		variants = slices.DeleteFunc(variants, func(v Variant) bool { return v.TrainOn == TrainOnPlayers })
	}
	if len(cfg.Only) > 0 {
		variants = slices.DeleteFunc(variants, func(v Variant) bool { return !slices.Contains(cfg.Only, v.Name) })
	}
	loop, err := loopVariant(prof, variants)
	if err != nil {
		return nil, err
	}
	if e.ua, err = e.calibrate(ctx, e.npcDir, e.ua); err != nil {
		return nil, err
	}
	probes, err := e.probe(ctx)
	if err != nil {
		return nil, err
	}
	gate, _, err := e.refereeGate(ctx, e.npcDir, nil, e.ua)
	if err != nil {
		return nil, err
	}
	res := &Results{Profile: prof, Seeds: cfg.Seeds, TrainOn: cmp.Or(cfg.TrainOn, TrainOnUserAgent), Variants: variants, Bootstrap: *boot, Probes: probes,
		Referee: gate, SFTSeconds: time.Since(start).Seconds()}
	res.Acceptance = Accept(res)
	done := previousRows(cfg.OutDir, prof, res.TrainOn)
	rows := progress.New(cfg.Progress, "experiment", "row", cfg.Seeds*len(res.Variants))
	// Seed by seed, so that an interrupted run already holds every variant.
	for seed := 1; seed <= cfg.Seeds; seed++ {
		for _, v := range res.Variants {
			a := arm{from: e.npcDir, ua: e.ua, keepUA: prof.rounds() > 1}
			if v.Name == loop {
				a.save = e.policyDir(1, seed)
			}
			if row, ok := done[rowKey{v.Name, seed}]; ok && (a.save == "" || checkpointExists(a.save)) {
				logger.Info("experiment row kept from the previous run", "variant", v.Name, "seed", seed)
				res.Rows = append(res.Rows, row)
				rows.Resume(1)
				continue
			}
			row, err := e.run(ctx, v, seed, &a)
			if err != nil {
				return nil, fmt.Errorf("experiment %s seed %d: %w", v.Name, seed, err)
			}
			res.Rows = append(res.Rows, row)
			res.Seconds = time.Since(start).Seconds()
			res.Acceptance = Accept(res)
			if err := WriteReport(cfg.OutDir, res); err != nil {
				return nil, err
			}
			logger.Info("experiment row", "variant", v.Name, "seed", seed, "avg_l", row.AvgL, "avg_r", row.AvgR,
				"ua_avg_l", row.UAAvgL, "ua_avg_r", row.UAAvgR, "ppl", row.PPL, "sec_per_step", row.SecPerStep)
			rows.Add(1)
		}
		if loop == "" {
			continue
		}
		err := e.loop(ctx, res, loop, seed, func(r Round) error {
			res.Rounds = append(res.Rounds, r)
			res.Seconds = time.Since(start).Seconds()
			return WriteReport(cfg.OutDir, res)
		})
		if err != nil {
			return nil, fmt.Errorf("experiment loop, seed %d: %w", seed, err)
		}
	}
	rows.Finish()
	res.Seconds = time.Since(start).Seconds()
	res.Acceptance = Accept(res)
	if err := WriteReport(cfg.OutDir, res); err != nil {
		return nil, err
	}
	return res, nil
}

// probe measures Probe for every scripted NPC quality on the evaluation
// openings.
func (e *env) probe(ctx context.Context) ([]Probe, error) {
	var out []Probe
	for i, q := range simulator.Qualities() {
		npc, err := simulator.NewScriptedNPC(e.corpus.pop, q, simulator.DefaultScriptConfig(), uint64(i)+1)
		if err != nil {
			return nil, fmt.Errorf("probe: %w", err)
		}
		turns := make([]rl.Turn, len(e.eval))
		for j := range e.eval {
			reply, _ := npc.Reply(e.eval[j].Opening)
			turns[j] = rl.Turn{State: rl.State{Prompt: &e.eval[j]}, NPC: reply}
		}
		pr := Probe{Quality: string(q)}
		for _, x := range []struct {
			env rl.Environment
			p   *float64
		}{{rl.NewUserAgentEnv(e.ua, 1), &pr.UserAgent}, {e.players, &pr.Players}} {
			ps, err := rl.EndProbabilities(ctx, x.env, turns)
			if err != nil {
				return nil, fmt.Errorf("probe %s: %w", q, err)
			}
			for _, p := range ps {
				*x.p += p / float64(len(ps))
			}
		}
		e.logger.Info("probe", "quality", q, "user_agent_p", pr.UserAgent, "players_p", pr.Players)
		out = append(out, pr)
	}
	return out, nil
}

// refereeGate measures user agent ua against the held-out players, the
// policy checkpointed in npcDir writing the siblings (rl.SampleReferee,
// then Judge): the SFT policy before any RL, the loop's policy before each
// later round. prev, when set, is the user agent ua replaces: it is judged
// on the same sample (before) and ua must not fall below it.
func (e *env) refereeGate(ctx context.Context, npcDir string, prev, ua *simulator.UserAgent) (gate *RefereeGate, before *rl.RefereeReport, err error) {
	model, _, _, err := inference.LoadCheckpoint(npcDir, inference.DefaultBackendConfig())
	if err != nil {
		return nil, nil, fmt.Errorf("referee gate: %w", err)
	}
	eng, stop, err := startEngine(model, e.tok, e.logger)
	if err != nil {
		return nil, nil, fmt.Errorf("referee gate: %w", err)
	}
	defer stop()
	pc := e.prof.Policy
	pc.Seed = e.prof.Referee.Seed*31337 + 11
	pol, err := rl.NewModelPolicy(eng, e.tok, model.Config().MaxSeq, pc)
	if err != nil {
		return nil, nil, fmt.Errorf("referee gate: %w", err)
	}
	sample, err := rl.SampleReferee(ctx, e.prof.Referee, pol, e.players, e.eval)
	if err != nil {
		return nil, nil, fmt.Errorf("referee gate: %w", err)
	}
	judge := func(ua *simulator.UserAgent) (rl.RefereeReport, error) {
		jp := pol
		if prev != nil {
			// Each agent judged with a policy of the same seed, so that
			// both agents' dialogues open with the same NPC turns.
			c := pc
			c.Seed++
			if jp, err = rl.NewModelPolicy(eng, e.tok, model.Config().MaxSeq, c); err != nil {
				return rl.RefereeReport{}, fmt.Errorf("referee gate: %w", err)
			}
		}
		rep, err := sample.Judge(ctx, jp, rl.NewUserAgentEnv(ua, e.prof.Referee.Seed*7727+3))
		if err != nil {
			return rep, fmt.Errorf("referee gate: %w", err)
		}
		return rep, nil
	}
	if prev != nil {
		rep, err := judge(prev)
		if err != nil {
			return nil, nil, err
		}
		before = &rep
	}
	rep, err := judge(ua)
	if err != nil {
		return nil, nil, err
	}
	ok, why := rep.Pass(before, rl.DefaultRefereeThresholds())
	e.logger.Info("referee gate", "npc", npcDir, "kendall_tau", rep.KendallTau, "kendall_tau_ci_low", rep.KendallTauCILow,
		"pearson", rep.Pearson, "sim_real_avg_l", rep.SimRealAvgL, "sim_real_exp_l", rep.SimRealExpL, "pass", ok)
	return &RefereeGate{RefereeReport: rep, Pass: ok, Reason: why}, before, nil
}

type rowKey struct {
	variant string
	seed    int
}

// previousRows reads the rows of an earlier run of the same profile in
// dir (results.json is rewritten after every row), so an interrupted
// experiment resumes where it stopped.
func previousRows(dir string, prof Profile, trainOn string) map[rowKey]Row {
	out := map[rowKey]Row{}
	b, err := os.ReadFile(filepath.Join(dir, ResultsJSON))
	if err != nil {
		return out
	}
	var prev Results
	if json.Unmarshal(b, &prev) != nil {
		return out
	}
	pa, _ := json.Marshal(prev.Profile)
	pb, _ := json.Marshal(prof)
	if string(pa) != string(pb) || cmp.Or(prev.TrainOn, TrainOnUserAgent) != trainOn {
		return out
	}
	for _, r := range prev.Rows {
		out[rowKey{r.Variant, r.Seed}] = r
	}
	return out
}

// engineConfig lets whole tree levels of several trees queue at once.
func engineConfig() inference.EngineConfig {
	c := inference.DefaultEngineConfig()
	c.MaxBatch, c.QueueSize = 64, 4096
	return c
}

// startEngine serves m until the returned stop is called.
func startEngine(m *inference.Model, tok *inference.Tokenizer, logger *slog.Logger) (*inference.Engine, func(), error) {
	eng, err := inference.NewEngine(m, tok, engineConfig(), logger)
	if err != nil {
		return nil, nil, err
	}
	return eng, eng.Start(), nil
}

// bootstrap builds the corpus, trains the dialogue agent and the user
// agent with learner.TrainSFT on the non-held-out players (the dialogue
// agent is saved as the checkpoint every variant starts from) and serves
// the user agent.
func bootstrap(ctx context.Context, prof Profile, out string, progress io.Writer, logger *slog.Logger) (*env, *Bootstrap, func(), error) {
	c, err := newCorpus(prof)
	if err != nil {
		return nil, nil, nil, err
	}
	logger.Info("bootstrap corpus", "train", len(c.train), "held_out", len(c.heldOut))
	// learner.TrainSFT resumes a finished run from its last checkpoint, so a
	// rerun into the same directory reuses both agents.
	runs := filepath.Join(out, "sft")
	npcCfg := sftConfig(prof, learner.RoleNPC, runs, prof.Model.MaxSeq)
	npcCfg.Progress = progress
	npc, err := learner.TrainSFT(ctx, npcCfg, c.train, logger)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("bootstrap dialogue agent: %w", err)
	}
	uaCfg := sftConfig(prof, learner.RoleUser, runs, prof.UserAgentMaxSeq)
	uaCfg.Progress = progress
	uaRes, err := learner.TrainSFT(ctx, uaCfg, c.train, logger)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("bootstrap user agent: %w", err)
	}
	boot := &Bootstrap{NPC: npc.After, UserAgent: uaRes.After, NPCLoss: lastLoss(npc.Losses), UserAgentLoss: lastLoss(uaRes.Losses)}
	npcDir := filepath.Join(out, "models", "npc-sft")
	if err := os.RemoveAll(npcDir); err != nil {
		return nil, nil, nil, fmt.Errorf("bootstrap: %w", err)
	}
	man := schema.Manifest{Model: "npc", Version: "sft", Algorithm: "sft", CreatedAt: time.Now().UTC()}
	if err := inference.SaveCheckpoint(npcDir, npc.TrainedModel, npc.Tokenizer, man); err != nil {
		return nil, nil, nil, fmt.Errorf("bootstrap: %w", err)
	}
	uaEng, stop, err := startEngine(uaRes.TrainedModel, uaRes.Tokenizer, logger)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("bootstrap user agent engine: %w", err)
	}
	ua, err := simulator.NewUserAgent(uaEng, uaCfg.UserAgent)
	if err != nil {
		stop()
		return nil, nil, nil, fmt.Errorf("bootstrap user agent: %w", err)
	}
	card := npcCfg.DefaultCard
	e := &env{
		prof: prof, corpus: c, tok: npc.Tokenizer, npcDir: npcDir, ua: ua, players: rl.NewPlayerEnv(c.pop), logger: logger,
		out: out, uaModel: uaRes.TrainedModel, uaTok: uaRes.Tokenizer, progress: progress,
		pool: c.prompts(false, max(4*prof.RL.Batch, 32), 1, card),
		eval: c.prompts(true, prof.EvalPrompts, 9_000_000, card),
	}
	e.curve = e.eval[:min(prof.CurvePrompts, len(e.eval))]
	rs, rw, err := npcInstances(npc.Tokenizer, card, c.heldOut, prof.Model.MaxSeq)
	if err != nil {
		stop()
		return nil, nil, nil, fmt.Errorf("bootstrap references: %w", err)
	}
	e.refs = referenceSamples(rs, rw)
	return e, boot, stop, nil
}

func lastLoss(ls []float32) float64 {
	if len(ls) == 0 {
		return 0
	}
	return float64(ls[len(ls)-1])
}

// referenceSamples cuts each weighted sequence at its first weighted token
// into a prompt and a scored continuation (the rest: later NPC turns are
// scored, the user turns between them too, and then dropped by weight).
// To score exactly the NPC turns, every NPC turn becomes its own sample.
func referenceSamples(seqs [][]int, ws [][]float32) []rl.Sample {
	var out []rl.Sample
	for i, s := range seqs {
		w := ws[i]
		for j := 1; j < len(s); {
			if w[j] == 0 {
				j++
				continue
			}
			k := j
			for k < len(s) && w[k] != 0 {
				k++
			}
			out = append(out, rl.Sample{Prompt: s[:j], Tokens: s[j:k]})
			j = k
		}
	}
	return out
}

// heapPeak samples the Go heap in use until stop is called and returns
// the peak in MiB.
func heapPeak() (stop func() float64) {
	var mu sync.Mutex
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mu.Lock()
		peak = max(peak, ms.HeapInuse)
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return func() float64 {
		close(done)
		wg.Wait()
		sample()
		return float64(peak) / (1 << 20)
	}
}

// arm is where a row's policy starts and what it trains against: the SFT
// checkpoint and the bootstrap user agent, or in a later round of the loop
// the previous round's policy and the refreshed user agent.
type arm struct {
	// from is the checkpoint the policy starts from; ua is the user agent
	// RL trains against and the UA columns are measured with.
	from string
	ua   *simulator.UserAgent
	// save, when set, receives the trained policy's checkpoint (with its
	// weights' digests in the row); keepUA keeps the user agent's
	// dialogues in the row.
	save   string
	keepUA bool
}

// run trains (unless v is SFT only) and evaluates one variant with one seed.
func (e *env) run(ctx context.Context, v Variant, seed int, a *arm) (Row, error) {
	row := Row{Variant: v.Name, Table: v.Table, Seed: seed}
	runtime.GC()
	peak := heapPeak()
	model, _, _, err := inference.LoadCheckpoint(a.from, inference.DefaultBackendConfig())
	if err != nil {
		peak()
		return row, err
	}
	eng, stop, err := startEngine(model, e.tok, e.logger)
	if err != nil {
		peak()
		return row, err
	}
	defer stop()
	pc := e.prof.Policy
	pc.Seed = uint64(seed)*7919 + 1
	pol, err := rl.NewModelPolicy(eng, e.tok, model.Config().MaxSeq, pc)
	if err != nil {
		peak()
		return row, err
	}
	uc := e.prof.RL.Update
	if v.Config != nil {
		uc = v.Config.Update
	}
	up, err := rl.NewUpdater(model, uc)
	if err != nil {
		peak()
		return row, err
	}
	defer up.Close()
	uaEnv := rl.NewUserAgentEnv(a.ua, uint64(seed)*104729)
	evalWith := func(env rl.Environment, prompts []rl.Prompt) (rl.EvalResult, error) {
		if _, ok := env.(*rl.UserAgentEnv); ok {
			env = evalUserAgent(a.ua, seed)
		}
		return e.evaluate(ctx, eng, model.Config().MaxSeq, seed, env, prompts)
	}
	var trainEnv rl.Environment = uaEnv
	row.TrainOn = TrainOnUserAgent
	if e.onPlayers || v.TrainOn == TrainOnPlayers {
		trainEnv, row.TrainOn = e.players, TrainOnPlayers
	}
	if v.Config == nil {
		row.TrainOn = ""
	}
	curvePoint := func(step int) error {
		r, err := evalWith(trainEnv, e.curve)
		if err != nil {
			return err
		}
		row.Curve = append(row.Curve, CurvePoint{Step: step, AvgR: r.AvgR, AvgL: r.AvgL})
		return nil
	}
	if a.save != "" {
		if row.PolicyStart, err = weightsDigest(model); err != nil {
			peak()
			return row, err
		}
	}
	if v.Config != nil {
		cfg := *v.Config
		cfg.Seed = uint64(seed)
		tr, err := rl.NewTrainer(cfg, pol, trainEnv, up, e.logger)
		if err != nil {
			peak()
			return row, err
		}
		row.BudgetS, row.GroupNodes, row.ExactNodes = cfg.Tree.Budget(), cfg.Tree.W*cfg.Tree.Depth, cfg.Tree.NodesWithoutTerminations()
		if err := curvePoint(0); err != nil {
			peak()
			return row, err
		}
		var secs, nodes float64
		for step := range cfg.Steps {
			st, _, err := tr.Step(ctx, e.pool)
			if err != nil {
				peak()
				return row, err
			}
			secs += st.Seconds
			nodes += st.Nodes
			if (step+1)%e.prof.CurveEvery == 0 || step+1 == cfg.Steps {
				if err := curvePoint(step + 1); err != nil {
					peak()
					return row, err
				}
			}
		}
		if cfg.Steps > 0 {
			row.SecPerStep, row.NodesPerTree = secs/float64(cfg.Steps), nodes/float64(cfg.Steps)
		}
	}
	row.PeakHeapMB = peak()
	if a.save != "" {
		if row.PolicyEnd, err = e.savePolicy(a.save, model, v); err != nil {
			return row, err
		}
	}
	gt, err := evalWith(e.players, e.eval)
	if err != nil {
		return row, err
	}
	row.AvgL, row.AvgR, row.ExpL, row.HeldOut = gt.AvgL, gt.AvgR, gt.ExpL, gt.Outcomes
	row.Dist1, row.Dist2 = learner.Distinct(gt.NPCTurns, 1), learner.Distinct(gt.NPCTurns, 2)
	uaRes, err := evalWith(uaEnv, e.eval)
	if err != nil {
		return row, err
	}
	row.UAAvgL, row.UAAvgR, row.UAExpL = uaRes.AvgL, uaRes.AvgR, uaRes.ExpL
	if a.keepUA {
		row.UAHeldOut = uaRes.Outcomes
	}
	row.PPL, err = perplexity(up, e.refs)
	return row, err
}

// evaluate plays prompts with the policy eng serves. Its sampling seed
// depends on the seed index only, not on the step, variant or round: two
// evaluations differ only by the policy's weights.
func (e *env) evaluate(ctx context.Context, eng *inference.Engine, maxSeq, seed int, env rl.Environment, prompts []rl.Prompt) (rl.EvalResult, error) {
	pc := e.prof.Policy
	pc.Seed = uint64(seed)*31337 + 5
	pol, err := rl.NewModelPolicy(eng, e.tok, maxSeq, pc)
	if err != nil {
		return rl.EvalResult{}, err
	}
	return rl.Evaluate(ctx, pol, env, prompts, e.prof.EvalDepth, 0)
}

// evalUserAgent is the user agent's environment in evaluations of seed: the
// same draws for every policy evaluated with it.
func evalUserAgent(ua *simulator.UserAgent, seed int) rl.Environment {
	return rl.NewUserAgentEnv(ua, uint64(seed)*7727+3)
}

// perplexity is exp of the mean NLL of the reference NPC turns, scored in
// chunks.
func perplexity(up *rl.Updater, refs []rl.Sample) (float64, error) {
	nll, n := 0.0, 0
	for lo := 0; lo < len(refs); lo += 32 {
		lps, err := up.LogProbs(refs[lo:min(lo+32, len(refs))])
		if err != nil {
			return 0, fmt.Errorf("perplexity: %w", err)
		}
		for _, lp := range lps {
			for _, x := range lp {
				nll -= float64(x)
				n++
			}
		}
	}
	if n == 0 {
		return math.Inf(1), nil
	}
	return learner.Perplexity(nll, n), nil
}
