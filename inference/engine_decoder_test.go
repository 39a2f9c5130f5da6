package inference

import (
	"math"
	"math/rand/v2"
	"testing"
)

func argmax(x []float32) int { return argmaxF32(x) }

// logSoftmaxAt returns log softmax(logits)[id].
func logSoftmaxAt(logits []float32, id int) float32 {
	maxL := float64(logits[0])
	for _, v := range logits {
		maxL = math.Max(maxL, float64(v))
	}
	sum := 0.0
	for _, v := range logits {
		sum += math.Exp(float64(v) - maxL)
	}
	return float32(float64(logits[id]) - maxL - math.Log(sum))
}

func maxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// TestDecoderMatchesFullForward checks that KV-cache decoding (prefill, then
// one token at a time, with a cache re-layout in the middle) gives the same
// logits as recomputing the whole sequence, over random prompts, on each
// decoder.
func TestDecoderMatchesFullForward(t *testing.T) {
	for _, name := range []string{DecoderGoMLX, DecoderCPU} {
		t.Run(name, func(t *testing.T) { testDecoderMatchesFullForward(t, name) })
	}
}

func testDecoderMatchesFullForward(t *testing.T, name string) {
	m := newTinyModel(t, 3)
	V := m.Config().VocabSize
	rng := rand.New(rand.NewPCG(5, 6))
	dec := newDecoder(m, name, 0)
	defer dec.close()
	if err := dec.resize([]int{-1, -1, -1, -1}, 4, 32); err != nil {
		t.Fatal(err)
	}
	seqs := make([][]int, 3)
	for i, n := range []int{5, 11, 1} {
		for range n {
			seqs[i] = append(seqs[i], 1+rng.IntN(V-1))
		}
	}
	const tol = 1e-4
	check := func(what string, row int, got []float32) {
		t.Helper()
		want, err := m.LastLogits([][]int{seqs[row]})
		if err != nil {
			t.Fatal(err)
		}
		if d := maxAbsDiff(got, want[0]); d > tol {
			t.Fatalf("%s: seq %d (len %d): max |cache - full| = %g; want < %g", what, row, len(seqs[row]), d, tol)
		}
	}
	// One batched prefill of prompts of different lengths, given out of
	// row order.
	logits, _, err := dec.prefill([]int{0, 2, 1}, [][]int{seqs[0], seqs[2], seqs[1]})
	if err != nil {
		t.Fatal(err)
	}
	for j, i := range []int{0, 2, 1} {
		l := logits[j*V : (j+1)*V]
		check("prefill", i, l)
		seqs[i] = append(seqs[i], argmax(l))
	}
	// rowOf[i] is the cache row of seqs[i].
	rowOf := []int{0, 1, 2}
	for step := range 24 {
		if step == 8 {
			// Move the sequences to other rows and a longer cache, as the
			// engine does when the batch grows.
			if err := dec.resize([]int{2, -1, 0, -1, 1, -1, -1, -1}, 8, 64); err != nil {
				t.Fatal(err)
			}
			rowOf = []int{2, 4, 0}
		}
		rows, _ := dec.dims()
		toks, pos, active := make([]int32, rows), make([]int32, rows), make([]bool, rows)
		for i, s := range seqs {
			toks[rowOf[i]] = int32(s[len(s)-1])
			pos[rowOf[i]] = int32(len(s) - 1)
			active[rowOf[i]] = true
		}
		logits, err := dec.step(toks, pos, active)
		if err != nil {
			t.Fatal(err)
		}
		for i := range seqs {
			l := logits[rowOf[i]*V : (rowOf[i]+1)*V]
			check("step", i, l)
			seqs[i] = append(seqs[i], argmax(l))
		}
	}
}
