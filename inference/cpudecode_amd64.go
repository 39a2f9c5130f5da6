//go:build !purego

package inference

import "golang.org/x/sys/cpu"

// hasAVX2FMA reports whether dot4x2AVX can run on this CPU.
var hasAVX2FMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// dot4x2AVX is dot4x2 with AVX2 FMA over n floats, n a positive multiple
// of 8 (cpudecode_amd64.s).
//
//go:noescape
func dot4x2AVX(w0, w1, w2, w3, x0, x1 *float32, n int, out *[8]float32)

// dot4x2 returns the dot products of four weight rows with two inputs of
// the same length, with AVX2 FMA when the CPU has it.
func dot4x2(w0, w1, w2, w3, x0, x1 []float32) (s00, s01, s02, s03, s10, s11, s12, s13 float32) {
	n := len(x0)
	n8 := n &^ 7
	if !hasAVX2FMA || n8 == 0 {
		return dot4x2Go(w0, w1, w2, w3, x0, x1)
	}
	w0, w1, w2, w3, x1 = w0[:n], w1[:n], w2[:n], w3[:n], x1[:n]
	var out [8]float32
	dot4x2AVX(&w0[0], &w1[0], &w2[0], &w3[0], &x0[0], &x1[0], n8, &out)
	if n8 == n {
		return out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7]
	}
	t00, t01, t02, t03, t10, t11, t12, t13 := dot4x2Go(w0[n8:], w1[n8:], w2[n8:], w3[n8:], x0[n8:], x1[n8:])
	return out[0] + t00, out[1] + t01, out[2] + t02, out[3] + t03, out[4] + t10, out[5] + t11, out[6] + t12, out[7] + t13
}

// dot4x1 is dot4x2 for a single input.
func dot4x1(w0, w1, w2, w3, x []float32) (s0, s1, s2, s3 float32) {
	if !hasAVX2FMA || len(x) < 8 {
		return dot4x1Go(w0, w1, w2, w3, x)
	}
	s0, s1, s2, s3, _, _, _, _ = dot4x2(w0, w1, w2, w3, x, x)
	return
}

// axpy32AVX sets out[0:32] = Σ_{d<n} a[d]·b[d·stride : d·stride+32] for
// n ≥ 1 (cpudecode_amd64.s).
//
//go:noescape
func axpy32AVX(out, a, b *float32, n, stride int)

// axpy32AVX512 is axpy32AVX with AVX-512 FMA that also prefetches
// n·128 bytes from ahead (cpudecode_amd64.s).
//
//go:noescape
func axpy32AVX512(out, a, b *float32, n, stride int, ahead *float32)

// axpy32 sets out[0:32] = Σ_d a[d]·b[d·stride : d·stride+32] over
// d < len(a), with AVX-512 or AVX2 FMA when the CPU has it (AVX-512 only
// while decodeWide allows the wide kernels).
func axpy32(out, a, b []float32, stride int) { axpy32Ahead(out, a, b, stride, nil) }

// axpy32Ahead is axpy32 that, with AVX-512, also asks for next[:32·len(a)]
// in the L2 cache while it computes, when next is that long: attention
// fetches the next head's keys and values while it works on this one's.
func axpy32Ahead(out, a, b []float32, stride int, next []float32) {
	n := len(a)
	if !hasAVX2FMA || n == 0 {
		axpy32Go(out, a, b, stride)
		return
	}
	_ = out[31]
	_ = b[(n-1)*stride+31]
	if cpu.X86.HasAVX512F && decodeWide {
		ahead := &b[0] // lines the kernel reads anyway
		if len(next) >= 32*n {
			ahead = &next[0]
		}
		axpy32AVX512(&out[0], &a[0], &b[0], n, stride, ahead)
		return
	}
	axpy32AVX(&out[0], &a[0], &b[0], n, stride)
}

// gemm6x16AVX: see gemm6x16 (cpudecode_amd64.s).
//
//go:noescape
func gemm6x16AVX(w, x *float32, xstride, in int, y *float32, ystride int)

// gemm6x16 adds to y[b][0:16] the products Σ_k x[b][k]·w[k][0:16] for six
// rows b of x (xstride apart) and y (ystride apart), w a packed [in][16]
// panel, with AVX2 FMA when the CPU has it.
func gemm6x16(w, x []float32, xstride, in int, y []float32, ystride int) {
	if !hasAVX2FMA || in == 0 {
		gemm6x16Go(w, x, xstride, in, y, ystride)
		return
	}
	_ = w[in*16-1]
	_ = x[5*xstride+in-1]
	_ = y[5*ystride+15]
	gemm6x16AVX(&w[0], &x[0], xstride, in, &y[0], ystride)
}

// gemv32AVX512: see gemv32 (cpudecode_amd64.s).
//
//go:noescape
func gemv32AVX512(w, x *float32, in, panels int, y *float32)

// gemv32 adds to y[p·32 : p·32+32] the products Σ_k x[k]·w[p][k][0:32]
// for the first panels packed [in][32] panels p of w, with AVX-512 when
// the CPU has it.
func gemv32(w, x []float32, in, panels int, y []float32) {
	if !cpu.X86.HasAVX512F || in == 0 || panels == 0 {
		gemv32Go(w, x, in, panels, y)
		return
	}
	_, _, _ = w[panels*in*32-1], x[in-1], y[panels*32-1]
	gemv32AVX512(&w[0], &x[0], in, panels, &y[0])
}

// qkScoresAVX512: see qkScores (cpudecode_amd64.s).
//
//go:noescape
func qkScoresAVX512(s, q, kt *float32, hd, stride, t int)

// qkScoresAVX2: see qkScores (cpudecode_amd64.s).
//
//go:noescape
func qkScoresAVX2(s, q, kt *float32, hd, stride, t int)

// qkScores sets scores[t] = q·k_t for t < len(scores), kt the keys in
// transposed tiles (keyAt): whole tiles as qkScoresGo, and a last partial
// tile with AVX-512 (while decodeWide allows it) sixteen positions at a
// time, else with AVX2 FMA eight at a time, reading only the positions
// scored.
func qkScores(scores, q, kt, next []float32) {
	hd, T := len(q), len(scores)
	t0 := T / kvTile * kvTile
	wide := cpu.X86.HasAVX512F && decodeWide
	if !wide && !hasAVX2FMA || hd == 0 || t0 == T {
		qkScoresGo(scores, q, kt, next)
		return
	}
	qkScoresGo(scores[:t0], q, kt, next)
	_ = kt[t0*hd+(hd-1)*kvTile+T-t0-1]
	if wide {
		qkScoresAVX512(&scores[t0], &q[0], &kt[t0*hd], hd, kvTile, T-t0)
	} else {
		qkScoresAVX2(&scores[t0], &q[0], &kt[t0*hd], hd, kvTile, T-t0)
	}
}

// gemm8x32RowsAVX512: see gemm8x32Rows (cpudecode_amd64.s).
//
//go:noescape
func gemm8x32RowsAVX512(k int, a *float32, lda int, b, c *float32, ldc int)

// gemm8x32Rows adds to c[r][0:32] the products Σ_l a[r·lda+l]·b[l][0:32]
// for eight rows r (lda and ldc apart), b a packed [k][32] panel, with
// AVX-512 when the CPU has it.
func gemm8x32Rows(k int, a []float32, lda int, b, c []float32, ldc int) {
	if !cpu.X86.HasAVX512F || k == 0 {
		gemmRows32Go(8, k, a, lda, b, c, ldc)
		return
	}
	_, _, _ = a[7*lda+k-1], b[k*32-1], c[7*ldc+31]
	gemm8x32RowsAVX512(k, &a[0], lda, &b[0], &c[0], ldc)
}
