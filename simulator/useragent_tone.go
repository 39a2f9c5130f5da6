package simulator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"gonum.org/v1/gonum/optimize"

	"github.com/parleyhq/parley/schema"
)

// TonePrior is the spread of the normal prior on each word's weight in
// LearnTone and LearnWording: a word moves the odds of a quit by a factor
// of about e at most, unless the sessions show much more.
const TonePrior = 1.0

// LearnTone weighs the words of players' messages by how they change the
// odds that the player ends the session right after the next NPC turn: a
// logistic regression of every decision of the logged sessions
// (DecisionQueries) on the set of words of the player's message before
// that turn, over the words in at least minMessages of those messages,
// with TonePrior on the weights. Upset players say so ("ugh", "this is
// going nowhere") and quit sooner whatever the NPC says next; the user
// agent's transformer does not learn to read that at this size. Only what
// a deployment logs goes in: the players' messages and who quit when.
func LearnTone(sessions []schema.Dialogue, minMessages int) (map[string]float64, error) {
	w, err := learnWordWeights(sessions, minMessages, func(e schema.Exchange) string { return e.User })
	if err != nil {
		return nil, fmt.Errorf("learn tone: %w", err)
	}
	return w, nil
}

// LearnWording weighs the words of the NPC's turns as LearnTone weighs the
// players': by how they change the odds that the player ends the session
// right after the turn. Siblings differ in their words: a retention line
// ("wait, don't rush off") or a garbled one makes players quit sooner,
// and the transformer reads that little at this size (docs/experiments,
// "The NPC's wording"). Only what a deployment logs goes in: the NPC's
// turns and who quit after which.
func LearnWording(sessions []schema.Dialogue, minMessages int) (map[string]float64, error) {
	w, err := learnWordWeights(sessions, minMessages, func(e schema.Exchange) string { return e.NPC })
	if err != nil {
		return nil, fmt.Errorf("learn wording: %w", err)
	}
	return w, nil
}

// learnWordWeights is the regression of LearnTone and LearnWording on the
// words of text of each decision's last exchange.
func learnWordWeights(sessions []schema.Dialogue, minMessages int, text func(schema.Exchange) string) (map[string]float64, error) {
	if minMessages < 1 {
		return nil, fmt.Errorf("min messages %d must be at least 1", minMessages)
	}
	var msgs [][]string
	var quit []float64
	quits := 0
	count := map[string]int{}
	for _, d := range sessions {
		qs, q := DecisionQueries(d, nil, nil)
		for i, query := range qs {
			ex := query.Current.Exchanges
			ws := slices.Sorted(maps.Keys(set(words(text(ex[len(ex)-1])))))
			for _, w := range ws {
				count[w]++
			}
			msgs, quit = append(msgs, ws), append(quit, 0)
			if q[i] {
				quit[len(quit)-1] = 1
				quits++
			}
		}
	}
	if quits == 0 || quits == len(quit) {
		return nil, errors.New("need both quits and continues")
	}
	// Parameter 0 is the intercept, which the weights leave out: the
	// calibration has its own offset.
	index := map[string]int{}
	for _, w := range slices.Sorted(maps.Keys(count)) {
		if count[w] >= minMessages {
			index[w] = len(index) + 1
		}
	}
	rows := make([][]int, len(msgs))
	for i, ws := range msgs {
		for _, w := range ws {
			if j, ok := index[w]; ok {
				rows[i] = append(rows[i], j)
			}
		}
	}
	// objective is the negative log-likelihood plus the prior, and grad
	// its gradient, at the parameters x.
	objective := func(grad, x []float64) float64 {
		if grad != nil {
			clear(grad)
		}
		nll := 0.0
		for i, r := range rows {
			z := x[0]
			for _, j := range r {
				z += x[j]
			}
			// −log σ(z) for a quit, −log(1 − σ(z)) for a continue, stable for large |z|.
			nll += softplus(z) - quit[i]*z
			if grad != nil {
				g := 1/(1+math.Exp(-z)) - quit[i]
				grad[0] += g
				for _, j := range r {
					grad[j] += g
				}
			}
		}
		for j := 1; j < len(x); j++ {
			nll += x[j] * x[j] / (2 * TonePrior * TonePrior)
			if grad != nil {
				grad[j] += x[j] / (TonePrior * TonePrior)
			}
		}
		return nll
	}
	res, err := optimize.Minimize(optimize.Problem{
		Func: func(x []float64) float64 { return objective(nil, x) },
		Grad: func(grad, x []float64) { objective(grad, x) },
	}, make([]float64, len(index)+1), nil, &optimize.LBFGS{})
	if err != nil && res == nil {
		return nil, err
	}
	weights := make(map[string]float64, len(index))
	for w, j := range index {
		weights[w] = res.X[j]
	}
	return weights, nil
}

// CrossFitDecisions reads the decisions of logged sessions split in two
// halves (Decisions), each half's with a tone and a wording learned on the
// other (LearnTone and LearnWording over the words of minMessages messages
// or more), so that no decision is weighed by word weights learned from it
// and a calibration can be fitted on both halves. u reads the turns
// through its word topics, which must be set.
func (u *UserAgent) CrossFitDecisions(ctx context.Context, a, b []schema.Dialogue, minMessages int, demos func(schema.Dialogue) []PromptDialogue, risks []float64) ([]Decision, error) {
	if u.cfg.WordTopics == nil {
		return nil, errors.New("cross-fit decisions: the user agent has no word topics")
	}
	var ds []Decision
	for _, half := range [2][2][]schema.Dialogue{{a, b}, {b, a}} {
		topics := *u.cfg.WordTopics
		var err error
		if topics.Tone, err = LearnTone(half[0], minMessages); err != nil {
			return nil, fmt.Errorf("cross-fit decisions: %w", err)
		}
		if topics.Wording, err = LearnWording(half[0], minMessages); err != nil {
			return nil, fmt.Errorf("cross-fit decisions: %w", err)
		}
		toned, err := u.WithWordTopics(&topics)
		if err != nil {
			return nil, fmt.Errorf("cross-fit decisions: %w", err)
		}
		scored, err := toned.Decisions(ctx, half[1], demos, risks)
		if err != nil {
			return nil, fmt.Errorf("cross-fit decisions: %w", err)
		}
		ds = append(ds, scored...)
	}
	return ds, nil
}

// softplus is log(1 + e^z).
func softplus(z float64) float64 {
	if z > 0 {
		return z + math.Log1p(math.Exp(-z))
	}
	return math.Log1p(math.Exp(z))
}

// weightOf is the summed weight of the distinct words of a message, in
// sorted order so that the sum does not vary from run to run; 0 without
// weights, without reading the message.
func weightOf(weights map[string]float64, message string) float64 {
	if len(weights) == 0 {
		return 0
	}
	sum := 0.0
	for _, w := range slices.Sorted(maps.Keys(set(words(message)))) {
		sum += weights[w]
	}
	return sum
}
