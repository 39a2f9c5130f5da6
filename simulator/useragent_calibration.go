package simulator

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/parleyhq/parley/schema"
)

// Calibration maps the user agent's termination logit
// z = log P([Terminate]) − log P([Continue]) to P_T = σ(Scale·z + Offset):
// a temperature and an offset fitted on logged sessions (FitCalibration),
// so that the simulated players quit as often as the real ones. A zero
// Scale counts as 1: the zero Calibration is P_T = σ(z), the model as it is.
type Calibration struct {
	Scale  float64 `json:"scale,omitempty"`
	Offset float64 `json:"offset,omitempty"`
}

// Validate rejects a negative or non-finite scale and a non-finite offset.
func (c Calibration) Validate() error {
	if c.Scale < 0 || math.IsNaN(c.Scale) || math.IsInf(c.Scale, 0) || math.IsNaN(c.Offset) || math.IsInf(c.Offset, 0) {
		return fmt.Errorf("user agent calibration: scale %g must be finite and not negative, offset %g finite", c.Scale, c.Offset)
	}
	return nil
}

// TerminationShare is P_T = σ(Scale·z + Offset) for the raw logit z.
func (c Calibration) TerminationShare(logit float64) float64 {
	scale := c.Scale
	if scale == 0 {
		scale = 1
	}
	return 1 / (1 + math.Exp(-(scale*logit + c.Offset)))
}

// Decision is one observed continue-or-quit decision of a player: the user
// agent's raw termination logit after an NPC turn and whether the player
// ended the session right after it.
type Decision struct {
	Logit float64
	Quit  bool
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

// FitCalibration returns the Calibration under which the end probability
// p = min(2·P_T, 1) at α = 1 gives the observed decisions the highest
// likelihood: a grid over Scale in [0.1, 3] and Offset in [−6, 6], then a
// finer grid around the best point. It needs at least one quit and one
// continue.
func FitCalibration(ds []Decision) (Calibration, error) {
	quits := 0
	for _, d := range ds {
		if d.Quit {
			quits++
		}
	}
	if quits == 0 || quits == len(ds) {
		return Calibration{}, errors.New("fit calibration: need both quits and continues")
	}
	logLik := func(c Calibration) float64 {
		const eps = 1e-6
		sum := 0.0
		for _, d := range ds {
			p := math.Min(math.Max(EndProbability(c.TerminationShare(d.Logit), 1), eps), 1-eps)
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
			ds = append(ds, Decision{Logit: sc.Logit, Quit: quit[i]})
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
)

// ForVersion returns c with the calibration that a user agent version's
// manifest carries (MetricCalibrationScale, MetricCalibrationOffset), so
// whoever serves the version gets its P_T calibrated; c as it is when the
// version carries none.
func (c UserAgentConfig) ForVersion(man schema.Manifest) UserAgentConfig {
	scale, ok := man.Metrics[MetricCalibrationScale]
	if !ok {
		return c
	}
	c.Calibration = Calibration{Scale: scale, Offset: man.Metrics[MetricCalibrationOffset]}
	return c
}

// WithCalibration returns a user agent on the same engine whose P_T goes
// through c.
func (u *UserAgent) WithCalibration(c Calibration) (*UserAgent, error) {
	cfg := u.cfg
	cfg.Calibration = c
	return NewUserAgent(u.eng, cfg)
}
