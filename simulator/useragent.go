package simulator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
)

// UserAgentEngine is what the user agent needs of an inference engine.
type UserAgentEngine interface {
	Tokenizer() *inference.Tokenizer
	MaxSeq() int
	Score(ctx context.Context, prompt []int, continuations [][]int) ([][]float32, error)
	Generate(ctx context.Context, req inference.Request) (*inference.Stream, error)
}

var _ UserAgentEngine = (*inference.Engine)(nil)

// UserAgentConfig holds the constants of the user agent (DESIGN §5).
type UserAgentConfig struct {
	// Lambda and StepInterval set the dynamic threshold
	// α = 1 + Lambda·floor(step/StepInterval).
	Lambda       float64 `json:"lambda"`
	StepInterval int     `json:"step_interval"`
	// Sampling is the generation request of user replies (its Prompt and
	// Seed are set per reply).
	Sampling inference.Request `json:"sampling"`
	// DemoHeader and CurrentHeader are the system turns that open each demo
	// dialogue and the current dialogue.
	DemoHeader    string `json:"demo_header"`
	CurrentHeader string `json:"current_header"`
	// Calibration maps the model's termination logit to P_T; the zero
	// value leaves it as the model gives it (FitCalibration).
	Calibration Calibration `json:"calibration"`
	// WordTopics, from the served version (LoadWordTopics), let the
	// calibration read an NPC turn's relevance; nil reads none.
	WordTopics *WordTopics `json:"-"`
}

// DefaultUserAgentConfig returns the paper's defaults: λ = 0.02 every 10
// steps, top-k 50 and temperature 0.7.
func DefaultUserAgentConfig() UserAgentConfig {
	return UserAgentConfig{
		Lambda: 0.02, StepInterval: 10, Sampling: inference.DefaultSampling(),
		DemoHeader: "Earlier dialogue of this player.", CurrentHeader: "Current dialogue.",
	}
}

// Validate checks the threshold schedule and the sampling length.
func (c UserAgentConfig) Validate() error {
	if c.Lambda < 0 || c.StepInterval < 1 {
		return fmt.Errorf("user agent: lambda %g must not be negative and step interval %d must be at least 1", c.Lambda, c.StepInterval)
	}
	if c.Sampling.MaxTokens < 1 {
		return fmt.Errorf("user agent: sampling max tokens %d must be at least 1", c.Sampling.MaxTokens)
	}
	if c.DemoHeader == "" || c.CurrentHeader == "" {
		return errors.New("user agent: demo and current headers are required")
	}
	return c.Calibration.Validate()
}

// TerminationShare is P_T = P([Terminate]) / (P([Terminate]) + P([Continue]))
// from the two tokens' log-probabilities.
func TerminationShare(logTerminate, logContinue float64) float64 {
	return 1 / (1 + math.Exp(logContinue-logTerminate))
}

// DynamicAlpha is α = 1 + λ·floor(step/interval): the user agent grows
// stricter as RL proceeds.
func DynamicAlpha(lambda float64, interval, step int) float64 {
	return 1 + lambda*math.Floor(float64(step)/float64(interval))
}

// EndProbability is p = min(α·2·P_T, 1).
func EndProbability(pT, alpha float64) float64 { return math.Min(alpha*2*pT, 1) }

// StepReward is the immediate reward r = 1 − p, or 0 when the user terminated.
func StepReward(p float64, terminated bool) float64 {
	if terminated {
		return 0
	}
	return 1 - p
}

// PromptDialogue is a dialogue as the user agent's prompt shows it.
type PromptDialogue struct {
	Exchanges []schema.Exchange `json:"exchanges"`
	// Risks[k] is rendered as "[End Risk: p]" after NPC turn k; turns past
	// the end of Risks are rendered without one.
	Risks []float64 `json:"risks,omitempty"`
	// Terminated adds a final "[Terminate]" user turn: the player ended it.
	Terminated bool `json:"terminated"`
}

// PromptDialogueOf shows d in a prompt: a dialogue the player ended
// (player_ended or idle_timeout) ends with [Terminate]; others do not.
func PromptDialogueOf(d schema.Dialogue, risks []float64) PromptDialogue {
	return PromptDialogue{Exchanges: d.Exchanges, Risks: risks, Terminated: d.Reason.PlayerEnded()}
}

// EmpiricalRisks returns, for exchange k = 1..maxTurns, the share of
// dialogues that reached exchange k and whose player ended them right after
// it: a data-only stand-in for [End Risk] values where no user agent has
// scored the dialogues yet (bootstrap SFT).
func EmpiricalRisks(ds []schema.Dialogue, maxTurns int) []float64 {
	reached, ended := make([]int, maxTurns), make([]int, maxTurns)
	for _, d := range ds {
		for k := 0; k < len(d.Exchanges) && k < maxTurns; k++ {
			reached[k]++
		}
		if n := len(d.Exchanges); n >= 1 && n <= maxTurns && d.Reason.PlayerEnded() {
			ended[n-1]++
		}
	}
	out := make([]float64, maxTurns)
	for k := range out {
		if reached[k] > 0 {
			out[k] = float64(ended[k]) / float64(reached[k])
		}
	}
	return out
}

// TrainingRisks are the [End Risk] values a user agent is trained and
// prompted with where no user agent has judged the turns: for exchange k,
// min(2·h_k, 1) with h_k from EmpiricalRisks. The factor 2 puts them on the
// scale of the served p = min(α·2·P_T, 1) of a calibrated agent; they
// depend on the exchange index only, so they leak nothing about a
// dialogue's own ending. Demos carry them in training and at RL time alike.
func TrainingRisks(ds []schema.Dialogue, maxTurns int) []float64 {
	h := EmpiricalRisks(ds, maxTurns)
	for k := range h {
		h[k] = math.Min(2*h[k], 1)
	}
	return h
}

// segment is one piece of a prompt: a special token or ordinary text.
// target marks the pieces of the target dialogue's user turns.
type segment struct {
	special string
	text    string
	target  bool
}

// layout lays out demos and the current dialogue in the prompt template:
//
//	<|sys|>{DemoHeader}<|end|>
//	<|user|>[Continue] {U1}<|end|><|npc|>{D1} [End Risk: 0.14]<|end|> ... <|user|>[Terminate]<|end|>
//	(second demo alike)
//	<|sys|>{CurrentHeader}<|end|>
//	<|user|>[Continue] {U1}<|end|><|npc|>{D1} [End Risk: 0.10]<|end|> ... <|npc|>{Di}<|end|>
//
// The current dialogue's last NPC turn gets no risk: it is the turn being
// judged. With pending set, the layout ends with "<|user|>", where the
// model's next token is [Continue] or [Terminate].
func (c UserAgentConfig) layout(demos []PromptDialogue, current PromptDialogue, pending, markTarget bool) []segment {
	var segs []segment
	dialogue := func(header string, d PromptDialogue, isCurrent bool) {
		segs = append(segs, segment{special: inference.TokSys}, segment{text: header}, segment{special: inference.TokEnd})
		tgt := markTarget && isCurrent
		for k, x := range d.Exchanges {
			segs = append(segs, segment{special: inference.TokUser, target: tgt}, segment{special: inference.TokContinue, target: tgt},
				segment{text: " " + x.User, target: tgt}, segment{special: inference.TokEnd, target: tgt})
			npc := x.NPC
			last := isCurrent && pending && k == len(d.Exchanges)-1
			if k < len(d.Risks) && !last {
				npc += fmt.Sprintf(" [End Risk: %.2f]", d.Risks[k])
			}
			segs = append(segs, segment{special: inference.TokNPC}, segment{text: npc}, segment{special: inference.TokEnd})
		}
		if d.Terminated && !(isCurrent && pending) {
			segs = append(segs, segment{special: inference.TokUser, target: tgt}, segment{special: inference.TokTerminate, target: tgt},
				segment{special: inference.TokEnd, target: tgt})
		}
	}
	for _, d := range demos {
		dialogue(c.DemoHeader, d, false)
	}
	dialogue(c.CurrentHeader, current, true)
	if pending {
		segs = append(segs, segment{special: inference.TokUser})
	}
	return segs
}

func render(segs []segment) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteString(s.special)
		b.WriteString(s.text)
	}
	return b.String()
}

// encode turns segments into token ids; player and NPC text is encoded as
// ordinary text, so special-token strings typed by a player stay text.
func encode(tok *inference.Tokenizer, segs []segment) ([]int, []float32, error) {
	var ids []int
	var weights []float32
	for _, s := range segs {
		var piece []int
		if s.special != "" {
			id, ok := tok.TokenID(s.special)
			if !ok {
				return nil, nil, fmt.Errorf("encode user agent prompt: tokenizer has no %q token", s.special)
			}
			piece = []int{id}
		} else {
			piece = tok.EncodeOrdinary(s.text)
		}
		w := float32(0)
		if s.target {
			w = 1
		}
		for range piece {
			weights = append(weights, w)
		}
		ids = append(ids, piece...)
	}
	return ids, weights, nil
}

// RenderUserAgentPrompt returns the prompt text that asks whether the
// player goes on after the last NPC turn of current (see the layout above).
func (c UserAgentConfig) RenderUserAgentPrompt(demos []PromptDialogue, current PromptDialogue) string {
	return render(c.layout(demos, current, true, false))
}

// EncodeUserAgentTraining returns one SFT instance of the user agent: the
// token ids of demos followed by the whole target dialogue, and per-token
// loss weights that are 1 on the target's user turns (their [Continue] or
// [Terminate] token, text and <|end|>) and 0 elsewhere, as inference.Batch
// expects them.
func (c UserAgentConfig) EncodeUserAgentTraining(tok *inference.Tokenizer, demos []PromptDialogue, target PromptDialogue) ([]int, []float32, error) {
	return encode(tok, c.layout(demos, target, false, true))
}

// UserAgentQuery asks the user agent about one node of a rollout: the
// player's demos and the current dialogue whose last exchange holds the NPC
// turn to judge.
type UserAgentQuery struct {
	Demos   []PromptDialogue
	Current PromptDialogue
}

// UserAgentAnswer is the user agent's verdict on one NPC turn.
type UserAgentAnswer struct {
	PT         float64 `json:"p_t"`    // P([Terminate]) / (P([Terminate]) + P([Continue]))
	P          float64 `json:"p"`      // min(α·2·P_T, 1)
	Reward     float64 `json:"reward"` // 1 − p, or 0 when terminated
	Terminated bool    `json:"terminated"`
	Reply      string  `json:"reply,omitempty"` // the user's next message when not terminated
	// Truncated counts the demos and oldest exchanges left out to fit the context.
	Truncated int `json:"truncated,omitempty"`
}

// UserAgent is the learned player simulator: it judges NPC turns and
// answers them in the player's style.
type UserAgent struct {
	eng        UserAgentEngine
	cfg        UserAgentConfig
	cont, term int
}

// NewUserAgent returns a user agent on eng, whose tokenizer must hold the
// [Continue] and [Terminate] tokens.
func NewUserAgent(eng UserAgentEngine, cfg UserAgentConfig) (*UserAgent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tok := eng.Tokenizer()
	cont, ok1 := tok.TokenID(inference.TokContinue)
	term, ok2 := tok.TokenID(inference.TokTerminate)
	if !ok1 || !ok2 {
		return nil, errors.New("new user agent: tokenizer lacks [Continue] or [Terminate]")
	}
	return &UserAgent{eng: eng, cfg: cfg, cont: cont, term: term}, nil
}

// TerminationScore is the user agent's end probability for one query,
// without a termination draw or a reply.
type TerminationScore struct {
	// Logit is log P([Terminate]) − log P([Continue]) as the model gives it.
	Logit float64 `json:"logit"`
	PT    float64 `json:"p_t"` // σ of the calibrated logit
	P     float64 `json:"p"`   // min(α·2·P_T, 1)
	// Truncated counts the demos and oldest exchanges left out to fit the context.
	Truncated int `json:"truncated,omitempty"`
}

// Terminations scores every query's [Terminate] and [Continue] in one
// engine call and returns the end probabilities at RL step `step`: the p
// that Step acts on, for callers that need p alone (the referee, the
// calibration), without sampling or generating anything.
func (u *UserAgent) Terminations(ctx context.Context, step int, queries []UserAgentQuery) ([]TerminationScore, error) {
	scores, _, err := u.terminations(ctx, step, queries)
	if err != nil {
		return nil, fmt.Errorf("user agent terminations: %w", err)
	}
	return scores, nil
}

// terminations fits and scores the queries; it also returns their prompts.
func (u *UserAgent) terminations(ctx context.Context, step int, queries []UserAgentQuery) ([]TerminationScore, [][]int, error) {
	tok := u.eng.Tokenizer()
	budget := u.budget()
	prompts := make([][]int, len(queries))
	scores := make([]TerminationScore, len(queries))
	for i, q := range queries {
		ids, dropped, err := u.fit(tok, q, budget)
		if err != nil {
			return nil, nil, fmt.Errorf("query %d: %w", i, err)
		}
		prompts[i], scores[i].Truncated = ids, dropped
	}
	if len(queries) == 0 {
		return scores, prompts, nil
	}
	// One Score call for the level: the prompts' common prefix is the
	// shared prompt, and each query contributes two continuations.
	lps, err := u.score(ctx, prompts)
	if err != nil {
		return nil, nil, err
	}
	alpha := DynamicAlpha(u.cfg.Lambda, u.cfg.StepInterval, step)
	for i := range scores {
		sc := &scores[i]
		sc.Logit = lps[2*i] - lps[2*i+1]
		sc.PT = u.cfg.Calibration.TerminationShare(sc.Logit, u.cfg.WordTopics.featuresOf(queries[i]))
		sc.P = EndProbability(sc.PT, alpha)
	}
	return scores, prompts, nil
}

// Step answers a whole level of a rollout at RL step `step`: it scores every
// query's [Terminate] and [Continue] in one engine call (Terminations),
// samples the terminations with their probabilities p, and generates the
// replies of the players that go on, all queued at once so the engine
// batches them. The same seed gives the same terminations and sampling
// seeds.
func (u *UserAgent) Step(ctx context.Context, step int, queries []UserAgentQuery, seed uint64) ([]UserAgentAnswer, error) {
	if len(queries) == 0 {
		return nil, nil
	}
	scores, prompts, err := u.terminations(ctx, step, queries)
	if err != nil {
		return nil, fmt.Errorf("user agent step: %w", err)
	}
	answers := make([]UserAgentAnswer, len(queries))
	rng := rand.New(rand.NewPCG(seed, uint64(step)))
	for i, sc := range scores {
		a := &answers[i]
		a.PT, a.P, a.Truncated = sc.PT, sc.P, sc.Truncated
		a.Terminated = rng.Float64() < a.P
		a.Reward = StepReward(a.P, a.Terminated)
	}

	// Queue every reply, waiting for earlier ones when the queue is full.
	type pending struct {
		i      int
		stream *inference.Stream
	}
	var queue []pending
	wait := func(p pending) error {
		res, err := p.stream.Wait()
		if err != nil {
			return fmt.Errorf("user agent step: generate reply %d: %w", p.i, err)
		}
		answers[p.i].Reply = cleanReply(res.Text)
		return nil
	}
	for i := range answers {
		if answers[i].Terminated {
			continue
		}
		req := u.cfg.Sampling
		req.Prompt = append(append([]int(nil), prompts[i]...), u.cont)
		req.Seed = rng.Uint64() | 1
		for {
			s, err := u.eng.Generate(ctx, req)
			if errors.Is(err, inference.ErrQueueFull) && len(queue) > 0 {
				if err := wait(queue[0]); err != nil {
					return nil, err
				}
				queue = queue[1:]
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("user agent step: generate reply %d: %w", i, err)
			}
			queue = append(queue, pending{i, s})
			break
		}
	}
	for _, p := range queue {
		if err := wait(p); err != nil {
			return nil, err
		}
	}
	return answers, nil
}

// budget is the most prompt tokens that leave room for the decision token
// and a whole reply.
func (u *UserAgent) budget() int { return u.eng.MaxSeq() - u.cfg.Sampling.MaxTokens - 2 }

// fit encodes q's prompt within budget tokens, leaving out the last demo
// first, then the current dialogue's oldest exchanges (keeping the turn
// judged). It returns how many demos and exchanges it left out.
func (u *UserAgent) fit(tok *inference.Tokenizer, q UserAgentQuery, budget int) ([]int, int, error) {
	demos, cur := q.Demos, q.Current
	if len(cur.Exchanges) == 0 {
		return nil, 0, errors.New("current dialogue has no exchange to judge")
	}
	dropped := 0
	for {
		ids, _, err := encode(tok, u.cfg.layout(demos, cur, true, false))
		if err != nil {
			return nil, 0, err
		}
		if len(ids) <= budget {
			return ids, dropped, nil
		}
		switch {
		case len(demos) > 0:
			demos = demos[:len(demos)-1]
		case len(cur.Exchanges) > 1:
			cur.Exchanges = cur.Exchanges[1:]
			if len(cur.Risks) > 0 {
				cur.Risks = cur.Risks[1:]
			}
		default:
			return nil, 0, fmt.Errorf("prompt of %d tokens exceeds %d even with one exchange: %w", len(ids), budget, inference.ErrTooLong)
		}
		dropped++
	}
}

// score returns the log-probabilities of [Terminate] (index 2i) and
// [Continue] (2i+1) after each prompt. The prompts' common prefix is the
// shared prompt of one Score call and each prompt contributes two
// continuations; prompts with no common prefix are scored one by one.
func (u *UserAgent) score(ctx context.Context, prompts [][]int) ([]float64, error) {
	out := make([]float64, 2*len(prompts))
	last := func(lp [][]float32, at int) {
		for j, seq := range lp {
			out[at+j] = float64(seq[len(seq)-1])
		}
	}
	prefix := commonPrefix(prompts)
	if prefix == 0 {
		for i, p := range prompts {
			lp, err := u.eng.Score(ctx, p, [][]int{{u.term}, {u.cont}})
			if err != nil {
				return nil, err
			}
			last(lp, 2*i)
		}
		return out, nil
	}
	conts := make([][]int, 0, 2*len(prompts))
	for _, p := range prompts {
		rest := p[prefix:]
		conts = append(conts, append(append([]int(nil), rest...), u.term), append(append([]int(nil), rest...), u.cont))
	}
	lp, err := u.eng.Score(ctx, prompts[0][:prefix], conts)
	if err != nil {
		return nil, err
	}
	last(lp, 0)
	return out, nil
}

// commonPrefix returns the length of the longest common prefix of seqs.
func commonPrefix(seqs [][]int) int {
	n := len(seqs[0])
	for _, s := range seqs[1:] {
		k := 0
		for k < n && k < len(s) && s[k] == seqs[0][k] {
			k++
		}
		n = k
	}
	return n
}

// cleanReply makes generated text fit to send as a player message: valid
// UTF-8, without control-token strings, trimmed.
func cleanReply(text string) string {
	text = strings.ToValidUTF8(text, "")
	for _, special := range []string{inference.TokPad, inference.TokSys, inference.TokUser, inference.TokNPC,
		inference.TokEnd, inference.TokContinue, inference.TokTerminate} {
		text = strings.ReplaceAll(text, special, "")
	}
	return strings.TrimSpace(text)
}
