package learner

import (
	"errors"
	"math"
	"strings"
	"unicode"
)

// ErrUndefined is returned for a statistic that the data cannot define, such
// as a correlation of a constant series.
var ErrUndefined = errors.New("learner: statistic undefined for this data")

// Perplexity is exp of the mean negative log-likelihood per token:
// PPL = exp(Σ nll / tokens). It is +Inf for no tokens.
func Perplexity(sumNLL float64, tokens int) float64 {
	if tokens <= 0 {
		return math.Inf(1)
	}
	return math.Exp(sumNLL / float64(tokens))
}

// Words splits text into lower-cased words: maximal runs of letters, digits
// and apostrophes. Punctuation and emoji are not words.
func Words(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\''
	})
}

// Distinct is Dist-n: the number of distinct word n-grams over the number of
// word n-grams in texts, n-grams never crossing from one text to the next.
// It is 0 when the texts hold no n-gram.
func Distinct(texts []string, n int) float64 {
	if n < 1 {
		return 0
	}
	seen := map[string]struct{}{}
	total := 0
	for _, t := range texts {
		ws := Words(t)
		for i := 0; i+n <= len(ws); i++ {
			seen[strings.Join(ws[i:i+n], "\x00")] = struct{}{}
			total++
		}
	}
	if total == 0 {
		return 0
	}
	return float64(len(seen)) / float64(total)
}

// AvgWords is the mean number of words per text (0 for none).
func AvgWords(texts []string) float64 {
	if len(texts) == 0 {
		return 0
	}
	n := 0
	for _, t := range texts {
		n += len(Words(t))
	}
	return float64(n) / float64(len(texts))
}

// AvgL is the mean exchange length of dialogues (0 for none).
func AvgL(lengths []int) float64 {
	if len(lengths) == 0 {
		return 0
	}
	s := 0
	for _, l := range lengths {
		s += l
	}
	return float64(s) / float64(len(lengths))
}

// AvgR is the mean over dialogues of the sum of their immediate rewards
// r_k (0 for none).
func AvgR(rewards [][]float64) float64 {
	if len(rewards) == 0 {
		return 0
	}
	s := 0.0
	for _, rs := range rewards {
		for _, r := range rs {
			s += r
		}
	}
	return s / float64(len(rewards))
}

// Pearson is the correlation coefficient of x and y. It returns
// ErrUndefined for fewer than two pairs, series of different lengths, or a
// series without variance.
func Pearson(x, y []float64) (float64, error) {
	if len(x) != len(y) || len(x) < 2 {
		return 0, ErrUndefined
	}
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx /= float64(len(x))
	my /= float64(len(y))
	var sxy, sxx, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return 0, ErrUndefined
	}
	return sxy / math.Sqrt(sxx*syy), nil
}

// BinaryLogLoss is the mean of −[y·ln p + (1−y)·ln(1−p)] over predictions
// p of binary labels y, with p clamped to [1e-7, 1−1e-7]. It is 0 for no
// predictions.
func BinaryLogLoss(p []float64, y []bool) float64 {
	if len(p) == 0 || len(p) != len(y) {
		return 0
	}
	s := 0.0
	for i, v := range p {
		v = math.Min(math.Max(v, 1e-7), 1-1e-7)
		if y[i] {
			s -= math.Log(v)
		} else {
			s -= math.Log(1 - v)
		}
	}
	return s / float64(len(p))
}

// ExpectedLength is the expected number of exchanges of a dialogue in which
// the user ends the conversation after exchange k with probability p[k-1],
// capped at maxTurns. Past the last given probability the hazard of the
// same exchange in prior holds (the last prior value past its end; 0 with
// no prior), so an agent's probabilities count only where they were
// predicted and an uninformative agent gets the same length for every
// dialogue.
func ExpectedLength(p, prior []float64, maxTurns int) float64 {
	survive, e := 1.0, 0.0
	for k := range maxTurns {
		e += survive // P(exchange k+1 happens)
		h := 0.0
		switch {
		case k < len(p):
			h = p[k]
		case k < len(prior):
			h = prior[k]
		case len(prior) > 0:
			h = prior[len(prior)-1]
		}
		survive *= 1 - math.Min(math.Max(h, 0), 1)
	}
	return e
}
