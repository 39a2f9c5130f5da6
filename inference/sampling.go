package inference

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Request is one generation: the prompt's token ids and its sampling
// settings.
type Request struct {
	Prompt    []int
	MaxTokens int
	// Temperature 0 means greedy decoding.
	Temperature float32
	// TopK keeps the K most likely tokens; 0 keeps all.
	TopK int
	// TopP keeps the smallest set of tokens whose probability reaches P;
	// 1 (or 0) keeps all.
	TopP float32
	// Stop ends the generation when one of these ids is sampled (the stop
	// token is not part of the result). Nil means the engine's default, its
	// chat format's stop tokens (Parley's <|end|>).
	Stop []int
	// Seed makes sampling reproducible; 0 draws a random seed.
	Seed uint64
}

// DefaultSampling returns the paper's defaults: top-k 50, temperature 0.7,
// top-p 1, up to 64 new tokens.
func DefaultSampling() Request {
	return Request{MaxTokens: 64, Temperature: 0.7, TopK: 50, TopP: 1}
}

// validate checks r against a vocabulary and context size.
func (r Request) validate(vocab, maxSeq int) error {
	switch {
	case len(r.Prompt) == 0:
		return fmt.Errorf("request: empty prompt")
	case len(r.Prompt) >= maxSeq:
		return fmt.Errorf("request: prompt of %d tokens leaves no room in a context of %d: %w", len(r.Prompt), maxSeq, ErrTooLong)
	case r.MaxTokens < 1:
		return fmt.Errorf("request: max tokens %d must be positive", r.MaxTokens)
	case r.Temperature < 0 || math.IsNaN(float64(r.Temperature)):
		return fmt.Errorf("request: temperature %g must not be negative", r.Temperature)
	case r.TopK < 0:
		return fmt.Errorf("request: top-k %d is negative", r.TopK)
	case r.TopP < 0 || r.TopP > 1:
		return fmt.Errorf("request: top-p %g outside [0, 1]", r.TopP)
	}
	for _, id := range r.Prompt {
		if id < 0 || id >= vocab {
			return fmt.Errorf("request: token id %d outside vocabulary of %d", id, vocab)
		}
	}
	return nil
}

// sampler draws tokens for one request.
type sampler struct {
	temperature float32
	topK        int
	topP        float32
	rng         *rand.Rand
	idx         []int     // scratch: candidate ids
	probs       []float64 // scratch
}

func newSampler(r Request, seed uint64) *sampler {
	return &sampler{
		temperature: r.Temperature,
		topK:        r.TopK,
		topP:        r.TopP,
		rng:         rand.New(rand.NewPCG(seed, seed^0x6a09e667f3bcc909)),
	}
}

// sample draws a token id from logits: temperature, then top-k, then top-p.
func (s *sampler) sample(logits []float32) int {
	if s.temperature == 0 || s.topK == 1 {
		return argmaxF32(logits)
	}
	n := len(logits)
	s.idx = s.idx[:0]
	for i := range n {
		s.idx = append(s.idx, i)
	}
	k := n
	if s.topK > 0 && s.topK < n {
		k = s.topK
	}
	byLogit := func(a, b int) int {
		if logits[a] != logits[b] {
			if logits[a] > logits[b] {
				return -1
			}
			return 1
		}
		return a - b
	}
	if k < n {
		partialTopK(s.idx, k, byLogit)
		s.idx = s.idx[:k]
	}
	slices.SortFunc(s.idx, byLogit)
	// Softmax over the candidates at the temperature.
	maxL := float64(logits[s.idx[0]])
	s.probs = s.probs[:0]
	sum := 0.0
	for _, id := range s.idx {
		p := math.Exp((float64(logits[id]) - maxL) / float64(s.temperature))
		s.probs = append(s.probs, p)
		sum += p
	}
	keep := len(s.idx)
	if s.topP > 0 && s.topP < 1 {
		cum := 0.0
		for i, p := range s.probs {
			cum += p / sum
			if cum >= float64(s.topP) {
				keep = i + 1
				break
			}
		}
		sum = 0
		for _, p := range s.probs[:keep] {
			sum += p
		}
	}
	u := s.rng.Float64() * sum
	for i, p := range s.probs[:keep] {
		u -= p
		if u < 0 {
			return s.idx[i]
		}
	}
	return s.idx[keep-1]
}

// partialTopK moves the k smallest elements under cmp to the front of ids
// (in no particular order), by quickselect.
func partialTopK(ids []int, k int, cmp func(a, b int) int) {
	lo, hi := 0, len(ids)-1
	for lo < hi {
		p := ids[(lo+hi)/2]
		i, j := lo, hi
		for i <= j {
			for cmp(ids[i], p) < 0 {
				i++
			}
			for cmp(ids[j], p) > 0 {
				j--
			}
			if i <= j {
				ids[i], ids[j] = ids[j], ids[i]
				i++
				j--
			}
		}
		switch {
		case k-1 <= j:
			hi = j
		case k-1 >= i:
			lo = i
		default:
			return
		}
	}
}

func argmaxF32(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
