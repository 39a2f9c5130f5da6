package inference

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unicode/utf8"
)

// probsLogits returns logits whose softmax at temperature 1 is p.
func probsLogits(p ...float64) []float32 {
	l := make([]float32, len(p))
	for i, x := range p {
		l[i] = float32(math.Log(x))
	}
	return l
}

func TestSamplerFilters(t *testing.T) {
	logits := probsLogits(0.05, 0.5, 0.15, 0.3) // ranks: 1, 3, 2, 0
	tests := []struct {
		name    string
		req     Request
		allowed []int
		freq    map[int]float64 // expected frequencies, ±0.03
	}{
		{"greedy", Request{Temperature: 0}, []int{1}, map[int]float64{1: 1}},
		{"top-k 1", Request{Temperature: 1, TopK: 1}, []int{1}, nil},
		{"top-k 2", Request{Temperature: 1, TopK: 2}, []int{1, 3}, map[int]float64{1: 0.5 / 0.8, 3: 0.3 / 0.8}},
		{"top-p 0.75", Request{Temperature: 1, TopP: 0.75}, []int{1, 3}, nil},
		{"top-p 0.9", Request{Temperature: 1, TopP: 0.9}, []int{1, 3, 2}, nil},
		{"plain", Request{Temperature: 1, TopP: 1}, []int{0, 1, 2, 3}, map[int]float64{0: 0.05, 1: 0.5, 2: 0.15, 3: 0.3}},
		{"cold", Request{Temperature: 0.5, TopP: 1}, []int{0, 1, 2, 3}, map[int]float64{1: 0.25 / (0.0025 + 0.25 + 0.0225 + 0.09)}},
	}
	const n = 6000
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSampler(tc.req, 99)
			count := map[int]int{}
			for range n {
				count[s.sample(logits)]++
			}
			for id := range count {
				if !slices.Contains(tc.allowed, id) {
					t.Errorf("sampled id %d; allowed %v (counts %v)", id, tc.allowed, count)
				}
			}
			for id, want := range tc.freq {
				if got := float64(count[id]) / n; math.Abs(got-want) > 0.03 {
					t.Errorf("frequency of %d = %.3f; want %.3f", id, got, want)
				}
			}
		})
	}
}

func TestPartialTopK(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for trial := range 200 {
		n := 1 + rng.IntN(300)
		k := 1 + rng.IntN(n)
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = float32(rng.IntN(50)) // ties on purpose
		}
		cmp := func(a, b int) int {
			switch {
			case vals[a] > vals[b]:
				return -1
			case vals[a] < vals[b]:
				return 1
			}
			return a - b
		}
		ids := make([]int, n)
		for i := range ids {
			ids[i] = i
		}
		partialTopK(ids, k, cmp)
		got := slices.Clone(ids[:k])
		slices.SortFunc(got, cmp)
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		slices.SortFunc(all, cmp)
		if !slices.Equal(got, all[:k]) {
			t.Fatalf("trial %d (n %d, k %d): top-k %v; want %v", trial, n, k, got, all[:k])
		}
	}
}

func TestCompleteUTF8(t *testing.T) {
	s := []byte("a€b") // € is 3 bytes
	tests := []struct {
		n, from, want int
	}{
		{1, 0, 1}, // "a"
		{2, 1, 1}, // "a" + first byte of €: hold it back
		{3, 1, 1},
		{4, 1, 4}, // € complete
		{5, 4, 5},
	}
	for _, tc := range tests {
		if got := completeUTF8(s[:tc.n], tc.from); got != tc.want {
			t.Errorf("completeUTF8(%q, %d) = %d; want %d", s[:tc.n], tc.from, got, tc.want)
		}
	}
	if !utf8.Valid(s[:completeUTF8(s[:3], 0)]) {
		t.Error("completeUTF8 cut inside a rune")
	}
}
