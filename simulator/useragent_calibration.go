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
// to P_T = σ(Scale·z + Offset + Early[f.Turn−1] + OnLast·f.OnLast +
// OffTopic·f.OffTopic + Repeat·f.Repeat): a temperature and an offset
// fitted on logged sessions (FitCalibration), so that the simulated
// players quit as often as the real ones, the first three turns' own
// offsets, the weight of the turn's repeating what the NPC said before
// and, where the agent has word topics, the weights of the turn's
// relevance to the player.
// A zero Scale counts as 1: the zero Calibration is P_T = σ(z), the model
// as it is.
type Calibration struct {
	Scale    float64    `json:"scale,omitempty"`
	Offset   float64    `json:"offset,omitempty"`
	Early    [3]float64 `json:"early"`
	OnLast   float64    `json:"on_last,omitempty"`
	OffTopic float64    `json:"off_topic,omitempty"`
	Repeat   float64    `json:"repeat,omitempty"`
}

// Validate rejects a negative or non-finite scale and a non-finite offset
// or weight.
func (c Calibration) Validate() error {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	ok := c.Scale >= 0 && finite(c.Scale) && finite(c.Offset) && finite(c.OnLast) && finite(c.OffTopic) && finite(c.Repeat)
	for _, e := range c.Early {
		ok = ok && finite(e)
	}
	if !ok {
		return fmt.Errorf("user agent calibration: scale %g must be finite and not negative, offsets %g %v and weights %g, %g, %g finite",
			c.Scale, c.Offset, c.Early, c.OnLast, c.OffTopic, c.Repeat)
	}
	return nil
}

// TerminationShare is P_T for the raw logit z of an NPC turn with features f.
func (c Calibration) TerminationShare(logit float64, f TurnFeatures) float64 {
	scale := c.Scale
	if scale == 0 {
		scale = 1
	}
	x := scale*logit + c.Offset + c.OnLast*f.OnLast + c.OffTopic*f.OffTopic + c.Repeat*f.Repeat
	if f.Turn >= 1 && f.Turn <= len(c.Early) {
		x += c.Early[f.Turn-1]
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
// finer grid around the best point; when the decisions carry features
// (relevance or repetition), Nelder–Mead from there fits all eight values
// together, within the grid's bounds and with FeaturePrior on the early
// offsets and the weights, so that what differs by turn does not go to the
// weights. It needs at least one quit and one continue.
func FitCalibration(ds []Decision) (Calibration, error) {
	quits, featured := 0, false
	for _, d := range ds {
		if d.Quit {
			quits++
		}
		featured = featured || d.Features.OnLast != 0 || d.Features.OffTopic != 0 || d.Features.Repeat != 0
	}
	if quits == 0 || quits == len(ds) {
		return Calibration{}, errors.New("fit calibration: need both quits and continues")
	}
	logLik := func(c Calibration) float64 {
		const eps = 1e-6
		sum := 0.0
		for _, d := range ds {
			p := math.Min(math.Max(EndProbability(c.TerminationShare(d.Logit, d.Features), 1), eps), 1-eps)
			if d.Quit {
				sum += math.Log(p)
			} else {
				sum += math.Log(1 - p)
			}
		}
		return sum
	}
	best, bestLL := Calibration{Scale: 1}, math.Inf(-1)
	search := func(scaleLo, scaleHi, scaleStep, offLo, offHi, offStep float64) {
		for a := scaleLo; a <= scaleHi+1e-9; a += scaleStep {
			for b := offLo; b <= offHi+1e-9; b += offStep {
				c := Calibration{Scale: a, Offset: b}
				if ll := logLik(c); ll > bestLL {
					best, bestLL = c, ll
				}
			}
		}
	}
	search(0.1, 3, 0.1, -6, 6, 0.2)
	search(max(best.Scale-0.1, 0.01), best.Scale+0.1, 0.01, best.Offset-0.2, best.Offset+0.2, 0.02)
	if !featured {
		return best, nil
	}
	// The grid's bounds hold, and a normal prior of spread FeaturePrior
	// on the weights keeps a few decisions from driving them apart.
	of := func(x []float64) Calibration {
		return Calibration{Scale: min(max(math.Abs(x[0]), 0.01), 3), Offset: min(max(x[1], -6), 6),
			Early: [3]float64{x[2], x[3], x[4]}, OnLast: x[5], OffTopic: x[6], Repeat: x[7]}
	}
	objective := func(c Calibration) float64 {
		sq := c.OnLast*c.OnLast + c.OffTopic*c.OffTopic + c.Repeat*c.Repeat
		for _, e := range c.Early {
			sq += e * e
		}
		return -logLik(c) + sq/(2*FeaturePrior*FeaturePrior)
	}
	start := []float64{best.Scale, best.Offset}
	res, err := optimize.Minimize(optimize.Problem{Func: func(x []float64) float64 { return objective(of(x)) }},
		append(start, make([]float64, 6)...), &optimize.Settings{FuncEvaluations: 4000}, &optimize.NelderMead{})
	if err != nil && res == nil {
		return Calibration{}, fmt.Errorf("fit calibration: %w", err)
	}
	if c := of(res.X); objective(c) < -bestLL {
		best = c
	}
	return best, nil
}

// FitCalibrationOn fits u's calibration (FitCalibration) on the decisions
// of logged sessions, each judged with the demos demos(session) and past
// NPC turns tagged with risks; it returns the calibration and the number
// of decisions. Only what a deployment observes goes in: who quit after
// which NPC turn.
func (u *UserAgent) FitCalibrationOn(ctx context.Context, sessions []schema.Dialogue, demos func(schema.Dialogue) []PromptDialogue, risks []float64) (Calibration, int, error) {
	var ds []Decision
	for _, s := range sessions {
		qs, quit := DecisionQueries(s, demos(s), risks)
		if len(qs) == 0 {
			continue
		}
		scores, err := u.Terminations(ctx, 0, qs)
		if err != nil {
			return Calibration{}, 0, fmt.Errorf("fit calibration on %s: %w", s.SessionID, err)
		}
		for i, sc := range scores {
			ds = append(ds, Decision{Logit: sc.Logit, Features: u.cfg.WordTopics.featuresOf(qs[i].Current), Quit: quit[i]})
		}
	}
	c, err := FitCalibration(ds)
	return c, len(ds), err
}

// The manifest metrics under which a published user agent version carries
// the calibration fitted to it and the number of decisions it was fitted
// on (learner's refresh).
const (
	MetricCalibrationScale     = "calibration_scale"
	MetricCalibrationOffset    = "calibration_offset"
	MetricCalibrationDecisions = "calibration_decisions"
	MetricCalibrationOnLast    = "calibration_on_last"
	MetricCalibrationOffTopic  = "calibration_off_topic"
	MetricCalibrationRepeat    = "calibration_repeat"
	// MetricCalibrationEarly + "1" … "3" carry Calibration.Early.
	MetricCalibrationEarly = "calibration_early_"
)

// Metrics are the manifest metrics that carry c with a version, fitted on
// decisions decisions (ForVersion reads them back).
func (c Calibration) Metrics(decisions int) map[string]float64 {
	out := map[string]float64{MetricCalibrationScale: c.Scale, MetricCalibrationOffset: c.Offset,
		MetricCalibrationOnLast: c.OnLast, MetricCalibrationOffTopic: c.OffTopic, MetricCalibrationRepeat: c.Repeat,
		MetricCalibrationDecisions: float64(decisions)}
	for i, e := range c.Early {
		out[MetricCalibrationEarly+strconv.Itoa(i+1)] = e
	}
	return out
}

// ForVersion returns c with the calibration that the user agent version in
// dir carries in its manifest man (MetricCalibrationScale …
// MetricCalibrationRepeat) and its word topics (WordTopicsFile), so
// whoever serves the version gets its P_T calibrated; c as it is when the
// version carries none. An empty dir reads the manifest's metrics alone.
func (c UserAgentConfig) ForVersion(dir string, man schema.Manifest) (UserAgentConfig, error) {
	scale, ok := man.Metrics[MetricCalibrationScale]
	if !ok {
		return c, nil
	}
	c.Calibration = Calibration{Scale: scale, Offset: man.Metrics[MetricCalibrationOffset],
		OnLast: man.Metrics[MetricCalibrationOnLast], OffTopic: man.Metrics[MetricCalibrationOffTopic],
		Repeat: man.Metrics[MetricCalibrationRepeat]}
	for i := range c.Calibration.Early {
		c.Calibration.Early[i] = man.Metrics[MetricCalibrationEarly+strconv.Itoa(i+1)]
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
