package learner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// Role names the agent a model plays.
type Role string

// The two agents.
const (
	// RoleNPC is the dialogue agent: it writes the NPC's turns.
	RoleNPC Role = "npc"
	// RoleUser is the user agent: it imitates the player, including when
	// the player ends the conversation.
	RoleUser Role = "user"
)

// Validate reports a role that is neither npc nor user.
func (r Role) Validate() error {
	if r != RoleNPC && r != RoleUser {
		return fmt.Errorf("role %q: want npc or user", r)
	}
	return nil
}

// EvalConfig sizes an evaluation on held-out dialogues.
type EvalConfig struct {
	// MaxDialogues caps the held-out dialogues evaluated (first ones by
	// storage order).
	MaxDialogues int `json:"max_dialogues"`
	// MaxReplies caps the turns generated for Dist-n and words per turn.
	MaxReplies int `json:"max_replies"`
	// ReplyTokens caps the tokens of one generated turn.
	ReplyTokens int `json:"reply_tokens"`
	// MaxTurns is L, the most exchanges of a dialogue: expected simulated
	// lengths are capped there.
	MaxTurns int `json:"max_turns"`
	// ScoreBatch is the number of sequences scored in one forward pass.
	ScoreBatch int `json:"score_batch"`
	// Seed fixes the sampling of generated turns and terminations.
	Seed uint64 `json:"seed"`
}

// DefaultEvalConfig returns a size that runs in about a minute on 2 cores
// with the default model.
func DefaultEvalConfig() EvalConfig {
	return EvalConfig{MaxDialogues: 64, MaxReplies: 64, ReplyTokens: 32, MaxTurns: 10, ScoreBatch: 8, Seed: 1}
}

// Validate reports the first bad field.
func (c EvalConfig) Validate() error {
	if c.MaxDialogues < 1 || c.MaxReplies < 0 || c.ReplyTokens < 1 || c.MaxTurns < 1 || c.ScoreBatch < 1 {
		return fmt.Errorf("eval config: max dialogues %d, max replies %d, reply tokens %d, max turns %d, score batch %d out of range",
			c.MaxDialogues, c.MaxReplies, c.ReplyTokens, c.MaxTurns, c.ScoreBatch)
	}
	return nil
}

// Metrics are the paper's fidelity and quality measures of one model on
// held-out dialogues (DESIGN.md §5, §8). Fields that do not apply to the
// role are zero.
type Metrics struct {
	// PPL is exp of the mean token NLL of the reference turns the role
	// writes (NPC turns, or the user turns with their [Continue] /
	// [Terminate] token).
	PPL float64 `json:"ppl"`
	// Dist1 and Dist2 are the distinct word unigrams and bigrams over the
	// generated turns; AvgWords their mean word count.
	Dist1    float64 `json:"dist1"`
	Dist2    float64 `json:"dist2"`
	AvgWords float64 `json:"avg_words"`
	// RealDist1, RealDist2 and RealAvgWords are the same measures of the
	// reference turns, the real players' or NPC's.
	RealDist1    float64 `json:"real_dist1"`
	RealDist2    float64 `json:"real_dist2"`
	RealAvgWords float64 `json:"real_avg_words"`
	// Rho is the Pearson correlation between the simulated (expected) and
	// real exchange lengths of the held-out dialogues, each replayed with
	// its own opening, NPC turns and player demos (user role only). It is
	// 0 when undefined, which RhoDefined tells.
	Rho        float64 `json:"rho"`
	RhoDefined bool    `json:"rho_defined"`
	// TermLogLoss is the log-loss of P_T as the prediction of whether the
	// player ended the dialogue after each NPC turn, and EndLogLoss that of
	// the end probability p = min(2·P_T, 1) with which a simulated player
	// quits there, the one a calibration fits (user role only).
	TermLogLoss float64 `json:"term_log_loss"`
	EndLogLoss  float64 `json:"end_log_loss"`
	// AvgL is the mean simulated (expected) exchange length and RealAvgL
	// the real one; AvgR the mean over dialogues of Σ r_k along the real
	// NPC turns (user role only).
	AvgL     float64 `json:"avg_l"`
	RealAvgL float64 `json:"real_avg_l"`
	AvgR     float64 `json:"avg_r"`
	// Dialogues, Tokens and Replies count what was evaluated.
	Dialogues int `json:"dialogues"`
	Tokens    int `json:"tokens"`
	Replies   int `json:"replies"`
	// lengths are the dialogues behind Rho, in the evaluation's order, so
	// that two agents measured on the same dialogues compare paired
	// (FidelityGate).
	lengths []dialogueLength
}

// dialogueLength is one held-out dialogue's simulated (expected) and real
// exchange length, and its player.
type dialogueLength struct {
	player    string
	sim, real float64
}

// lengthsRho is ρ over the dialogues ls[i], i in units (Pearson).
func lengthsRho(ls []dialogueLength, units []int) (float64, error) {
	sim, real := make([]float64, len(units)), make([]float64, len(units))
	for k, i := range units {
		sim[k], real[k] = ls[i].sim, ls[i].real
	}
	return Pearson(sim, real)
}

// Map returns the metrics under their JSON names, as a manifest records
// them. Undefined ρ is left out.
func (m Metrics) Map() map[string]float64 {
	out := map[string]float64{
		"ppl": m.PPL, "dist1": m.Dist1, "dist2": m.Dist2, "avg_words": m.AvgWords,
		"real_avg_words": m.RealAvgWords, "dialogues": float64(m.Dialogues), "tokens": float64(m.Tokens),
	}
	if m.AvgL > 0 || m.RealAvgL > 0 {
		out["term_log_loss"], out["end_log_loss"], out["avg_l"], out["real_avg_l"], out["avg_r"] = m.TermLogLoss, m.EndLogLoss, m.AvgL, m.RealAvgL, m.AvgR
	}
	if m.RhoDefined {
		out["rho"] = m.Rho
	}
	return out
}

// MetricsRow is one named line of a metrics table.
type MetricsRow struct {
	Name    string  `json:"name"`
	Metrics Metrics `json:"metrics"`
}

// WriteMetricsTable writes rows as a Markdown table with the columns of the
// paper's Table 2: PPL, Dist-1, Dist-2, Avg.words, ρ, plus the termination
// log-loss and simulated vs real Avg.L.
func WriteMetricsTable(w io.Writer, rows []MetricsRow) error {
	var b strings.Builder
	b.WriteString("| model | PPL | Dist-1 | Dist-2 | Avg.words | ρ | term log-loss | Avg.L sim / real |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		m := r.Metrics
		rho := "–"
		if m.RhoDefined {
			rho = fmt.Sprintf("%.3f", m.Rho)
		}
		fmt.Fprintf(&b, "| %s | %.2f | %.3f | %.3f | %.2f | %s | %.4f | %.2f / %.2f |\n",
			r.Name, m.PPL, m.Dist1, m.Dist2, m.AvgWords, rho, m.TermLogLoss, m.AvgL, m.RealAvgL)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// evaluator evaluates one model for one role.
type evaluator struct {
	role   Role
	cfg    EvalConfig
	ua     simulator.UserAgentConfig
	prompt npcPrompt
	risks  []float64
	logger *slog.Logger
	// skipFidelity leaves the user agent's fidelity out of evaluate
	// (SFTConfig.FidelityByGate).
	skipFidelity bool
}

// Evaluate measures m on the held-out dialogues. demos holds the
// dialogues the user agent may show as a player's style demonstrations
// (usually every dialogue of the held-out players); risks are the [End
// Risk] values of the training layout (simulator.TrainingRisks).
func (ev evaluator) evaluate(ctx context.Context, m *inference.Model, tok *inference.Tokenizer, heldOut []schema.Dialogue, demos map[string][]schema.Dialogue) (Metrics, error) {
	if len(heldOut) == 0 {
		return Metrics{}, errors.New("evaluate: no held-out dialogues")
	}
	heldOut = heldOut[:min(len(heldOut), ev.cfg.MaxDialogues)]
	var met Metrics
	met.Dialogues = len(heldOut)

	// PPL on the reference turns, in the training layout.
	var insts []instance
	for _, d := range heldOut {
		var ins []instance
		if ev.role == RoleNPC {
			in, err := ev.prompt.instance(tok, d, m.Config().MaxSeq)
			if err != nil {
				return Metrics{}, fmt.Errorf("evaluate: %w", err)
			}
			ins = []instance{in}
		} else {
			var err error
			if ins, err = userInstances(tok, ev.ua, pickDemos(demos[d.PlayerID], d), d, ev.risks, m.Config().MaxSeq); err != nil {
				return Metrics{}, fmt.Errorf("evaluate: %w", err)
			}
		}
		for _, in := range ins {
			if in.weighted() > 0 {
				insts = append(insts, in)
			}
		}
	}
	nll, n, err := sumNLL(m, insts, ev.cfg.ScoreBatch)
	if err != nil {
		return Metrics{}, fmt.Errorf("evaluate: %w", err)
	}
	met.PPL, met.Tokens = Perplexity(nll, n), n

	var ref []string
	if ev.role == RoleNPC {
		for _, d := range heldOut {
			for _, x := range d.Exchanges {
				ref = append(ref, x.NPC)
			}
		}
		gen, err := ev.npcReplies(ctx, m, tok, heldOut)
		if err != nil {
			return Metrics{}, fmt.Errorf("evaluate: %w", err)
		}
		met.Dist1, met.Dist2, met.AvgWords, met.Replies = Distinct(gen, 1), Distinct(gen, 2), AvgWords(gen), len(gen)
	} else {
		for _, d := range heldOut {
			for _, x := range d.Exchanges[min(1, len(d.Exchanges)):] {
				ref = append(ref, x.User)
			}
		}
		if !ev.skipFidelity {
			if err := ev.userFidelity(ctx, m, tok, heldOut, demos, &met); err != nil {
				return Metrics{}, fmt.Errorf("evaluate: %w", err)
			}
		}
	}
	met.RealDist1, met.RealDist2, met.RealAvgWords = Distinct(ref, 1), Distinct(ref, 2), AvgWords(ref)
	return met, nil
}

// fidelity measures the user agent m as ev.ua serves it, calibration
// included, on the held-out dialogues: ρ, the termination log-loss and the
// simulated and real Avg.L, as evaluate does, without PPL or Dist-n of the
// reference turns.
func (ev evaluator) fidelity(ctx context.Context, m *inference.Model, tok *inference.Tokenizer, heldOut []schema.Dialogue, demos map[string][]schema.Dialogue) (Metrics, error) {
	heldOut = heldOut[:min(len(heldOut), ev.cfg.MaxDialogues)]
	met := Metrics{Dialogues: len(heldOut)}
	if err := ev.userFidelity(ctx, m, tok, heldOut, demos, &met); err != nil {
		return Metrics{}, fmt.Errorf("fidelity: %w", err)
	}
	return met, nil
}

// startEngine runs an inference engine on m, prompted and stopped in chat's
// format, until the returned stop is called.
func startEngine(m *inference.Model, chat *inference.ChatFormat, scoreBatch int, logger *slog.Logger) (*inference.Engine, func(), error) {
	cfg := inference.DefaultEngineConfig()
	cfg.ScoreBatch, cfg.Chat = scoreBatch, chat
	eng, err := inference.NewEngine(m, chat.Tokenizer(), cfg, logger)
	if err != nil {
		return nil, nil, err
	}
	return eng, eng.Start(), nil
}

// sumNLL returns the weighted negative log-likelihood of the instances and
// the weighted token count. On the pure-Go backend the native trainer's
// forward scores them, many times faster than GoMLX's graph.
func sumNLL(m *inference.Model, insts []instance, batch int) (float64, int, error) {
	logProbs := m.SequenceLogProbs
	if kind, _ := inference.ResolveTrainer("", m.BackendConfig()); kind == inference.TrainerNative {
		nt, err := inference.NewNativeTrainer(m, inference.DefaultTrainConfig())
		if err != nil {
			return 0, 0, fmt.Errorf("score held-out turns: %w", err)
		}
		defer nt.Close()
		logProbs = nt.LogProbs
	}
	var nll float64
	var n int
	for start := 0; start < len(insts); start += batch {
		part := insts[start:min(start+batch, len(insts))]
		seqs := make([][]int, len(part))
		for i, in := range part {
			seqs[i] = in.tokens
		}
		lps, err := logProbs(seqs)
		if err != nil {
			return 0, 0, fmt.Errorf("score held-out turns: %w", err)
		}
		for i, in := range part {
			for j, lp := range lps[i] {
				if w := in.weights[j+1]; w > 0 {
					nll -= float64(w) * float64(lp)
					n++
				}
			}
		}
	}
	return nll, n, nil
}

// npcReplies generates NPC turns for held-out prefixes (the real dialogue
// up to a user turn), at most MaxReplies, all queued at once.
func (ev evaluator) npcReplies(ctx context.Context, m *inference.Model, tok *inference.Tokenizer, heldOut []schema.Dialogue) ([]string, error) {
	eng, stop, err := startEngine(m, ev.prompt.format(tok), ev.cfg.ScoreBatch, ev.logger)
	if err != nil {
		return nil, err
	}
	defer stop()
	var prompts [][]int
	for _, d := range heldOut {
		for k := range d.Exchanges {
			if len(prompts) == ev.cfg.MaxReplies {
				break
			}
			p, err := ev.prompt.generationPrompt(tok, d, k, eng.MaxSeq()-ev.cfg.ReplyTokens)
			if err != nil {
				continue // a prefix that does not fit is skipped
			}
			prompts = append(prompts, p)
		}
	}
	return generateAll(ctx, eng, prompts, ev.cfg)
}

// generateAll samples one reply per prompt with the paper's sampling
// (top-k 50, temperature 0.7), waiting for earlier ones when the queue is full.
func generateAll(ctx context.Context, eng *inference.Engine, prompts [][]int, cfg EvalConfig) ([]string, error) {
	out := make([]string, len(prompts))
	streams := make([]*inference.Stream, len(prompts))
	next := 0 // first stream not yet waited for
	for i, p := range prompts {
		req := inference.DefaultSampling()
		req.Prompt, req.MaxTokens, req.Seed = p, cfg.ReplyTokens, cfg.Seed*1000003+uint64(i)+1
		for {
			s, err := eng.Generate(ctx, req)
			if errors.Is(err, inference.ErrQueueFull) && next < i {
				res, werr := streams[next].Wait()
				if werr != nil {
					return nil, fmt.Errorf("generate: %w", werr)
				}
				out[next] = strings.TrimSpace(res.Text)
				next++
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("generate: %w", err)
			}
			streams[i] = s
			break
		}
	}
	for ; next < len(prompts); next++ {
		res, err := streams[next].Wait()
		if err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
		out[next] = strings.TrimSpace(res.Text)
	}
	return out, nil
}

// userFidelity replays every held-out dialogue through the user agent with
// its real opening and NPC turns, one exchange level at a time (each level
// one batched UserAgent.Step, the [End Risk] of earlier NPC turns being the
// agent's own p as when serving). P_T after each NPC turn predicts whether
// the player ended there (log-loss). The p's give the expected simulated
// length, the training data's risk by exchange (the same scale as p)
// standing in past the real dialogue's last NPC turn, where no NPC turn
// exists to judge; ρ compares it with the real length over the dialogues
// whose length the player decided (player_ended, idle_timeout) or the cap
// (max_turns). The replies the agent generates feed Dist-n and words per
// turn.
func (ev evaluator) userFidelity(ctx context.Context, m *inference.Model, tok *inference.Tokenizer, heldOut []schema.Dialogue, demos map[string][]schema.Dialogue, met *Metrics) error {
	eng, stop, err := startEngine(m, ev.prompt.format(tok), ev.cfg.ScoreBatch, ev.logger)
	if err != nil {
		return err
	}
	defer stop()
	uacfg := ev.ua
	uacfg.Sampling.MaxTokens = ev.cfg.ReplyTokens
	ua, err := simulator.NewUserAgent(eng, uacfg)
	if err != nil {
		return err
	}
	ps := make([][]float64, len(heldOut))
	pts := make([][]float64, len(heldOut))
	var replies []string
	for level := 1; ; level++ {
		var queries []simulator.UserAgentQuery
		var who []int
		for i, d := range heldOut {
			if len(d.Exchanges) < level {
				continue
			}
			cur := simulator.PromptDialogue{Exchanges: d.Exchanges[:level], Risks: slices.Clone(ps[i])}
			queries = append(queries, simulator.UserAgentQuery{Demos: promptDemos(pickDemos(demos[d.PlayerID], d), ev.risks), Current: cur})
			who = append(who, i)
		}
		if len(queries) == 0 {
			break
		}
		answers, err := ua.Step(ctx, 0, queries, ev.cfg.Seed+uint64(level))
		if err != nil {
			return fmt.Errorf("user agent level %d: %w", level, err)
		}
		for k, a := range answers {
			i := who[k]
			ps[i] = append(ps[i], a.P)
			pts[i] = append(pts[i], a.PT)
			if !a.Terminated && len(replies) < ev.cfg.MaxReplies {
				replies = append(replies, a.Reply)
			}
		}
	}
	var probs, ends []float64
	var labels []bool
	var rewards [][]float64
	for i, d := range heldOut {
		n := len(d.Exchanges)
		for k, pt := range pts[i] {
			last := k == n-1
			if last && !d.Reason.PlayerEnded() {
				continue // the system ended it: no label
			}
			probs = append(probs, pt)
			ends = append(ends, ps[i][k])
			labels = append(labels, last)
		}
		rs := make([]float64, len(ps[i]))
		for k, p := range ps[i] {
			rs[k] = simulator.StepReward(p, false)
		}
		rewards = append(rewards, rs)
		if d.Reason.PlayerEnded() || d.Reason == schema.EndMaxTurns {
			met.lengths = append(met.lengths, dialogueLength{player: d.PlayerID, sim: ExpectedLength(ps[i], ev.risks, ev.cfg.MaxTurns), real: float64(n)})
		}
	}
	met.TermLogLoss, met.EndLogLoss = BinaryLogLoss(probs, labels), BinaryLogLoss(ends, labels)
	met.AvgR = AvgR(rewards)
	all := make([]int, len(met.lengths))
	for i, l := range met.lengths {
		all[i] = i
		met.AvgL += l.sim / float64(len(all))
		met.RealAvgL += l.real / float64(len(all))
	}
	if rho, err := lengthsRho(met.lengths, all); err == nil {
		met.Rho, met.RhoDefined = rho, true
	}
	met.Dist1, met.Dist2, met.AvgWords, met.Replies = Distinct(replies, 1), Distinct(replies, 2), AvgWords(replies), len(replies)
	if math.IsNaN(met.TermLogLoss) {
		met.TermLogLoss = 0
	}
	return nil
}
