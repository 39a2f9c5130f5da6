package inference

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
)

// randBF16 returns n random bfloat16 values and the same widened to float32.
func randBF16(rng *rand.Rand, n int) ([]uint16, []float32) {
	b, f := make([]uint16, n), make([]float32, n)
	for i, v := range randSlice(rng, n) {
		b[i] = bfloat16.FromFloat32(v).Bits()
		f[i] = bf16Float(b[i])
	}
	return b, f
}

// maxRelDiff is max |got − want| over max |want| (or over 1 when want is
// all small).
func maxRelDiff(got, want []float32) float64 {
	scale := 1.0
	for _, v := range want {
		scale = max(scale, abs64(float64(v)))
	}
	return maxAbsDiff(got, want) / scale
}

// TestBF16DotsMatchGo checks the bfloat16 dot-product kernels (AVX-512,
// AVX2 or plain Go, whichever the CPU, build and decodeWide select) against
// the plain-Go ones for every length up to 70, so each accumulator and the
// tail are exercised.
func TestBF16DotsMatchGo(t *testing.T) {
	forEachDecodeKernel(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for in := 1; in <= 70; in++ {
			w, _ := randBF16(rng, 4*in)
			x := randSlice(rng, 4*in)
			var got, want [16]float32
			bf16Dot4x4(w, x, in, &got)
			bf16Dot4x4Go(w, x, in, &want)
			if d := maxRelDiff(got[:], want[:]); d > 1e-5 {
				t.Fatalf("in=%d: bf16Dot4x4 = %v; plain Go = %v", in, got, want)
			}
			var got1, want1 [4]float32
			bf16Dot4x1(w, x[:in], in, &got1)
			bf16Dot4x1Go(w, x[:in], in, &want1)
			if d := maxRelDiff(got1[:], want1[:]); d > 1e-5 {
				t.Fatalf("in=%d: bf16Dot4x1 = %v; plain Go = %v", in, got1, want1)
			}
		}
	})
}

// TestBF16MatmulMatchesF32 multiplies by a matrix held in bfloat16 blocks
// and by the same matrix widened to float32 on the float32 path (rows,
// 16- or 32-wide panels), at sizes that are not multiples of the kernels'
// blocks, and wants the same products to 1e-4 relative.
func TestBF16MatmulMatchesF32(t *testing.T) {
	forEachDecodeKernel(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(9, 10))
		for _, tc := range []struct {
			n, in  int
			blocks []int // rows of each bf16 block, stacked
			o0, o1 int
		}{
			{1, 1, []int{1}, 0, 1}, {1, 45, []int{37}, 0, 37}, {3, 17, []int{5, 9}, 2, 13},
			{4, 16, []int{8}, 0, 8}, {5, 33, []int{4, 4, 3}, 0, 11}, {13, 100, []int{29, 3}, 4, 31},
			{33, 7, []int{6, 7}, 0, 13}, {8, 64, []int{64}, 16, 48}, {1, 896, []int{64, 32, 32}, 0, 128},
			{32, 130, []int{48, 16}, 0, 64}, {37, 48, []int{32}, 0, 32},
		} {
			out := 0
			for _, r := range tc.blocks {
				out += r
			}
			for _, add := range []bool{false, true} {
				t.Run(fmt.Sprintf("%dx%dx%v[%d:%d]add=%v", tc.n, tc.in, tc.blocks, tc.o0, tc.o1, add), func(t *testing.T) {
					wb, wf := randBF16(rng, out*tc.in)
					x, y0 := randSlice(rng, tc.n*tc.in), randSlice(rng, tc.n*out)
					m := cpuMatrix{in: tc.in, out: out}
					at := 0
					for _, r := range tc.blocks {
						m.bf16 = append(m.bf16, bf16Block{w: wb[at*tc.in : (at+r)*tc.in], rows: r})
						at += r
					}
					got := slices.Clone(y0)
					m.mulRange(got, x, tc.n, tc.o0, tc.o1, add)
					want := slices.Clone(y0)
					f := newCPUMatrix(wf, out, tc.in)
					if f.width == 0 || (tc.o0%f.width == 0 && tc.o1%f.width == 0) {
						f.mulRange(want, x, tc.n, tc.o0, tc.o1, add)
					} else {
						matmulRows(want, x, wf, tc.n, tc.in, out, tc.o0, tc.o1, add)
					}
					if d := maxRelDiff(got, want); d > 1e-4 {
						t.Fatalf("bf16 differs from float32 by %g relative", d)
					}
				})
			}
		}
	})
}
