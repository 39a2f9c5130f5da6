package simulator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"gonum.org/v1/gonum/optimize"

	"github.com/parleyhq/parley/schema"
)

// Calibration maps the user agent's termination logit
// z = log P([Terminate]) − log P([Continue]) of an NPC turn with features f
// to P_T = σ(Scale·z + Offset + Early[f.Turn−1] + Σ weight·feature): a
// temperature and an offset fitted on logged sessions (FitCalibration), so
// that the simulated players quit as often as the real ones, the first
// three turns' own offsets, and a weight for each of the turn's features
// (TurnFeatures: its repeating what the NPC said before, its asking
// something and, where the agent has word topics, its relevance to the
// player, the tone of the player's last message and that of the player's
// messages before it).
// A zero Scale counts as 1: the zero Calibration is P_T = σ(z), the model
// as it is.
type Calibration struct {
	Scale      float64    `json:"scale,omitempty"`
	Offset     float64    `json:"offset,omitempty"`
	Early      [3]float64 `json:"early"`
	OnLast     float64    `json:"on_last,omitempty"`
	OffTopic   float64    `json:"off_topic,omitempty"`
	Repeat     float64    `json:"repeat,omitempty"`
	Question   float64    `json:"question,omitempty"`
	OnEarlier  float64    `json:"on_earlier,omitempty"`
	NamesNew   float64    `json:"names_new,omitempty"`
	NoTopic    float64    `json:"no_topic,omitempty"`
	AsksNamed  float64    `json:"asks_named,omitempty"`
	NamesKnown float64    `json:"names_known,omitempty"`
	Tone       float64    `json:"tone,omitempty"`
	PlayerTone float64    `json:"player_tone,omitempty"`
	Wording    float64    `json:"wording,omitempty"`
}

// numFeatures is the number of TurnFeatures a Calibration weighs.
const numFeatures = 12

// weights are c's feature weights in the order of TurnFeatures.values.
func (c *Calibration) weights() [numFeatures]*float64 {
	return [numFeatures]*float64{&c.OnLast, &c.OffTopic, &c.Repeat, &c.Question, &c.OnEarlier, &c.NamesNew, &c.NoTopic, &c.AsksNamed, &c.NamesKnown, &c.Tone, &c.PlayerTone, &c.Wording}
}

// Validate rejects a negative or non-finite scale and a non-finite offset
// or weight.
func (c Calibration) Validate() error {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	ok := c.Scale >= 0 && finite(c.Scale) && finite(c.Offset)
	for _, e := range c.Early {
		ok = ok && finite(e)
	}
	for _, w := range c.weights() {
		ok = ok && finite(*w)
	}
	if !ok {
		return fmt.Errorf("user agent calibration: the scale must be finite and not negative, the offsets and weights finite: %s", c.Summary())
	}
	return nil
}

// Summary lists c's values, two decimals each, as logs and gate reasons
// show them.
func (c Calibration) Summary() string {
	return fmt.Sprintf("scale %.2f, offset %.2f, early %.2f, on-last %.2f, off-topic %.2f, repeat %.2f, question %.2f, on-earlier %.2f, names-new %.2f, no-topic %.2f, asks-named %.2f, names-known %.2f, tone %.2f, player-tone %.2f, wording %.2f",
		c.Scale, c.Offset, c.Early, c.OnLast, c.OffTopic, c.Repeat, c.Question, c.OnEarlier, c.NamesNew, c.NoTopic, c.AsksNamed, c.NamesKnown, c.Tone, c.PlayerTone, c.Wording)
}

// TerminationShare is P_T for the raw logit z of an NPC turn with features f.
func (c Calibration) TerminationShare(logit float64, f TurnFeatures) float64 {
	scale := c.Scale
	if scale == 0 {
		scale = 1
	}
	x := scale*logit + c.Offset
	if f.Turn >= 1 && f.Turn <= len(c.Early) {
		x += c.Early[f.Turn-1]
	}
	v := f.values()
	for i, w := range c.weights() {
		x += *w * v[i]
	}
	return 1 / (1 + math.Exp(-x))
}

// Decision is one observed continue-or-quit decision of a player: the user
// agent's raw termination logit after an NPC turn, the turn's features and
// whether the player ended the session right after it.
type Decision struct {
	Logit    float64
	Features TurnFeatures
	Quit     bool
}

// DecisionQueries returns a query for every NPC turn of d after which the
// player decided something a deployment observes: each exchange the player
// answered (continued) and, when the player ended the session, the last
// one (quit). The last exchange of a session cut for another reason
// (max_turns, safety, error) is censored and left out. Past NPC turns carry
// risks by exchange index, as in training.
func DecisionQueries(d schema.Dialogue, demos []PromptDialogue, risks []float64) (queries []UserAgentQuery, quit []bool) {
	n := len(d.Exchanges)
	for k := 1; k <= n; k++ {
		ended := k == n
		if ended && !d.Reason.PlayerEnded() {
			break
		}
		cur := PromptDialogue{Exchanges: d.Exchanges[:k]}
		cur.Risks = risks[:min(k-1, len(risks))]
		queries = append(queries, UserAgentQuery{Demos: demos, Current: cur})
		quit = append(quit, ended)
	}
	return queries, quit
}

// FeaturePrior is the spread of the normal prior on the calibration's
// early-turn offsets and feature weights (FitCalibration).
const FeaturePrior = 2.0

// FitCalibration returns the Calibration under which the end probability
// p = min(2·P_T, 1) at α = 1 gives the observed decisions the highest
// likelihood: a grid over Scale in [0.1, 3] and Offset in [−6, 6], then a
// finer grid around the best point; when the decisions carry features,
// L-BFGS from there fits the scale, the offsets and the weights together,
// with FeaturePrior on the early offsets and the weights, so that what
// differs by turn does not go to the weights, and the scale and offset
// kept within the grid's bounds. It needs at least one quit and one
// continue.
func FitCalibration(ds []Decision) (Calibration, error) {
	quits, featured := 0, false
	for _, d := range ds {
		if d.Quit {
			quits++
		}
		featured = featured || d.Features.values() != [numFeatures]float64{}
	}
	if quits == 0 || quits == len(ds) {
		return Calibration{}, errors.New("fit calibration: need both quits and continues")
	}
	// A decision's row: z, 1, the early-turn indicators, the features; the
	// parameters: Scale, Offset, Early, the weights in the same order.
	const params = 2 + 3 + numFeatures
	rows := make([][params]float64, len(ds))
	for i, d := range ds {
		r := &rows[i]
		r[0], r[1] = d.Logit, 1
		if d.Features.Turn >= 1 && d.Features.Turn <= 3 {
			r[1+d.Features.Turn] = 1
		}
		v := d.Features.values()
		copy(r[5:], v[:])
	}
	of := func(x []float64) Calibration {
		c := Calibration{Scale: min(max(x[0], 0.01), 3), Offset: min(max(x[1], -6), 6), Early: [3]float64{x[2], x[3], x[4]}}
		for i, w := range c.weights() {
			*w = x[5+i]
		}
		return c
	}
	// objective is the negative log-likelihood plus the prior, and grad
	// its gradient, at the parameters x (not clamped).
	objective := func(grad, x []float64) float64 {
		const eps = 1e-6
		if grad != nil {
			clear(grad)
		}
		nll := 0.0
		for i, d := range ds {
			z := 0.0
			for j, v := range rows[i] {
				z += x[j] * v
			}
			s := 1 / (1 + math.Exp(-z))
			p := 2 * s
			inside := p > eps && p < 1-eps
			p = min(max(p, eps), 1-eps)
			var dz float64 // d(−log-likelihood)/dz
			if d.Quit {
				nll -= math.Log(p)
				if inside {
					dz = -(1 - s)
				}
			} else {
				nll -= math.Log(1 - p)
				if inside {
					dz = 2 * s * (1 - s) / (1 - 2*s)
				}
			}
			if grad != nil && dz != 0 {
				for j, v := range rows[i] {
					grad[j] += dz * v
				}
			}
		}
		for j := 2; j < params; j++ {
			nll += x[j] * x[j] / (2 * FeaturePrior * FeaturePrior)
			if grad != nil {
				grad[j] += x[j] / (FeaturePrior * FeaturePrior)
			}
		}
		return nll
	}
	at := func(c Calibration) []float64 {
		x := []float64{c.Scale, c.Offset, c.Early[0], c.Early[1], c.Early[2]}
		for _, w := range c.weights() {
			x = append(x, *w)
		}
		return x
	}
	best := Calibration{Scale: 1}
	bestNLL := math.Inf(1)
	search := func(scaleLo, scaleHi, scaleStep, offLo, offHi, offStep float64) {
		for a := scaleLo; a <= scaleHi+1e-9; a += scaleStep {
			for b := offLo; b <= offHi+1e-9; b += offStep {
				c := Calibration{Scale: a, Offset: b}
				if nll := objective(nil, at(c)); nll < bestNLL {
					best, bestNLL = c, nll
				}
			}
		}
	}
	search(0.1, 3, 0.1, -6, 6, 0.2)
	search(max(best.Scale-0.1, 0.01), best.Scale+0.1, 0.01, best.Offset-0.2, best.Offset+0.2, 0.02)
	if !featured {
		return best, nil
	}
	res, err := optimize.Minimize(optimize.Problem{
		Func: func(x []float64) float64 { return objective(nil, x) },
		Grad: func(grad, x []float64) { objective(grad, x) },
	}, at(best), nil, &optimize.LBFGS{})
	if err != nil && res == nil {
		return Calibration{}, fmt.Errorf("fit calibration: %w", err)
	}
	if c := of(res.X); objective(nil, at(c)) < bestNLL {
		best = c
	}
	return best, nil
}

// FitCalibrationOn fits u's calibration (FitCalibration) on the decisions
// of logged sessions (Decisions); it returns the calibration and the
// number of decisions.
func (u *UserAgent) FitCalibrationOn(ctx context.Context, sessions []schema.Dialogue, demos func(schema.Dialogue) []PromptDialogue, risks []float64) (Calibration, int, error) {
	ds, err := u.Decisions(ctx, sessions, demos, risks)
	if err != nil {
		return Calibration{}, 0, err
	}
	c, err := FitCalibration(ds)
	return c, len(ds), err
}

// Decisions scores the decisions of logged sessions, each judged with the
// demos demos(session) and past NPC turns tagged with risks, and reads
// their turns' features. Only what a deployment observes goes in: who
// quit after which NPC turn.
func (u *UserAgent) Decisions(ctx context.Context, sessions []schema.Dialogue, demos func(schema.Dialogue) []PromptDialogue, risks []float64) ([]Decision, error) {
	var ds []Decision
	for _, s := range sessions {
		qs, quit := DecisionQueries(s, demos(s), risks)
		if len(qs) == 0 {
			continue
		}
		scores, err := u.Terminations(ctx, 0, qs)
		if err != nil {
			return nil, fmt.Errorf("fit calibration on %s: %w", s.SessionID, err)
		}
		for i, sc := range scores {
			ds = append(ds, Decision{Logit: sc.Logit, Features: u.cfg.WordTopics.featuresOf(qs[i]), Quit: quit[i]})
		}
	}
	return ds, nil
}

// The manifest metrics under which a published user agent version carries
// the calibration fitted to it and the number of decisions it was fitted
// on (learner's refresh).
const (
	MetricCalibrationScale     = "calibration_scale"
	MetricCalibrationOffset    = "calibration_offset"
	MetricCalibrationDecisions = "calibration_decisions"
	MetricCalibrationRepeat    = "calibration_repeat"
	// MetricCalibrationEarly + "1" … "3" carry Calibration.Early.
	MetricCalibrationEarly = "calibration_early_"
)

// weightMetrics are the manifest metrics of Calibration.weights, in their
// order; a version fitted before a weight existed carries none, and serves
// it at 0.
var weightMetrics = [numFeatures]string{"calibration_on_last", "calibration_off_topic", MetricCalibrationRepeat,
	"calibration_question", "calibration_on_earlier", "calibration_names_new", "calibration_no_topic", "calibration_asks_named", "calibration_names_known", "calibration_tone", "calibration_player_tone", "calibration_wording"}

// Metrics are the manifest metrics that carry c with a version, fitted on
// decisions decisions (ForVersion reads them back).
func (c Calibration) Metrics(decisions int) map[string]float64 {
	out := map[string]float64{MetricCalibrationScale: c.Scale, MetricCalibrationOffset: c.Offset,
		MetricCalibrationDecisions: float64(decisions)}
	for i, e := range c.Early {
		out[MetricCalibrationEarly+strconv.Itoa(i+1)] = e
	}
	for i, w := range c.weights() {
		out[weightMetrics[i]] = *w
	}
	return out
}

// ForVersion returns c with the calibration that the user agent version in
// dir carries in its manifest man (Calibration.Metrics) and its word
// topics (WordTopicsFile), so whoever serves the version gets its P_T
// calibrated; c as it is when the version carries none. An empty dir
// reads the manifest's metrics alone.
func (c UserAgentConfig) ForVersion(dir string, man schema.Manifest) (UserAgentConfig, error) {
	scale, ok := man.Metrics[MetricCalibrationScale]
	if !ok {
		return c, nil
	}
	c.Calibration = Calibration{Scale: scale, Offset: man.Metrics[MetricCalibrationOffset]}
	for i := range c.Calibration.Early {
		c.Calibration.Early[i] = man.Metrics[MetricCalibrationEarly+strconv.Itoa(i+1)]
	}
	for i, w := range c.Calibration.weights() {
		*w = man.Metrics[weightMetrics[i]]
	}
	if dir == "" {
		return c, nil
	}
	topics, err := LoadWordTopics(dir, man)
	if err != nil {
		return UserAgentConfig{}, err
	}
	c.WordTopics = topics
	return c, nil
}

// WithCalibration returns a user agent on the same engine whose P_T goes
// through c.
func (u *UserAgent) WithCalibration(c Calibration) (*UserAgent, error) {
	cfg := u.cfg
	cfg.Calibration = c
	return NewUserAgent(u.eng, cfg)
}

// WithWordTopics returns a user agent on the same engine whose calibration
// reads NPC turns' relevance through t (nil: none).
func (u *UserAgent) WithWordTopics(t *WordTopics) (*UserAgent, error) {
	cfg := u.cfg
	cfg.WordTopics = t
	return NewUserAgent(u.eng, cfg)
}
