//go:build !purego

package inference

import "golang.org/x/sys/cpu"

// hasBF16AVX512 reports whether the AVX-512 bfloat16 kernels can run: they
// widen words (AVX512BW) and add 256-bit halves in the upper registers
// (AVX512VL).
var hasBF16AVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL

// bf16Dot4x4AVX512 sets s[4i+r] to the dot product of bfloat16 row r of w
// with float32 row i of x over the first n elements, n a positive multiple
// of 16; rows are ld elements apart in both (cpudecode_bf16_amd64.s).
//
//go:noescape
func bf16Dot4x4AVX512(w *uint16, x *float32, ld, n int, s *[16]float32)

// bf16Dot4x1AVX512 is bf16Dot4x4AVX512 for one row of x.
//
//go:noescape
func bf16Dot4x1AVX512(w *uint16, x *float32, ld, n int, s *[4]float32)

// bf16GemvAVX512 adds to y[r] the dot product of bfloat16 row r of w with
// x over the first n elements for rows rows ld elements apart, n a positive
// multiple of 16 (cpudecode_bf16_amd64.s).
//
//go:noescape
func bf16GemvAVX512(w *uint16, x *float32, ld, n, rows int, y *float32)

// bf16Dot4x2AVX sets s[r] and s[4+r] to the dot products of bfloat16 row
// r of w (rows ld elements apart) with x0 and x1 over the first n
// elements, n a positive multiple of 8, with AVX2 FMA.
//
//go:noescape
func bf16Dot4x2AVX(w *uint16, x0, x1 *float32, ld, n int, s *[8]float32)

// bf16Dot4x4 sets s[4i+r] to the dot product of bfloat16 row r of w [4, in]
// with row i of x [4, in], accumulated in float32: AVX-512 while
// decodeWide allows it, else AVX2 FMA, else plain Go; the last in mod 16
// (or 8) elements in Go.
func bf16Dot4x4(w []uint16, x []float32, in int, s *[16]float32) {
	_, _ = w[4*in-1], x[4*in-1]
	switch {
	case hasBF16AVX512 && decodeWide && in >= 16:
		k := in &^ 15
		bf16Dot4x4AVX512(&w[0], &x[0], in, k, s)
		if k < in {
			bf16Tail4x4(w, x, in, k, s, true)
		}
	case hasAVX2FMA && in >= 8:
		k := in &^ 7
		bf16Dot4x2AVX(&w[0], &x[0], &x[in], in, k, (*[8]float32)(s[:8]))
		bf16Dot4x2AVX(&w[0], &x[2*in], &x[3*in], in, k, (*[8]float32)(s[8:]))
		if k < in {
			bf16Tail4x4(w, x, in, k, s, true)
		}
	default:
		bf16Dot4x4Go(w, x, in, s)
	}
}

// bf16Dot4x1 is bf16Dot4x4 for one row of x.
func bf16Dot4x1(w []uint16, x []float32, in int, s *[4]float32) {
	_, _ = w[4*in-1], x[in-1]
	switch {
	case hasBF16AVX512 && decodeWide && in >= 16:
		k := in &^ 15
		bf16Dot4x1AVX512(&w[0], &x[0], in, k, s)
		if k < in {
			bf16Tail4x1(w, x, in, k, s, true)
		}
	case hasAVX2FMA && in >= 8:
		k := in &^ 7
		var s8 [8]float32
		bf16Dot4x2AVX(&w[0], &x[0], &x[0], in, k, &s8)
		*s = [4]float32(s8[:4])
		if k < in {
			bf16Tail4x1(w, x, in, k, s, true)
		}
	default:
		bf16Dot4x1Go(w, x, in, s)
	}
}

// bf16Gemv adds to y[r] the dot product of bfloat16 row r of w [len(y),
// in] with x [in], accumulated in float32: one row after the other with
// AVX-512 while decodeWide allows it, else four rows at a time.
func bf16Gemv(w []uint16, x []float32, in int, y []float32) {
	if !hasBF16AVX512 || !decodeWide || in < 16 || len(y) == 0 {
		bf16GemvRows(w, x, in, y)
		return
	}
	k := in &^ 15
	_, _ = w[len(y)*in-1], x[in-1]
	bf16GemvAVX512(&w[0], &x[0], in, k, len(y), &y[0])
	if k < in {
		for r := range y {
			y[r] += bf16Dot(w[r*in+k:(r+1)*in], x[k:in])
		}
	}
}
