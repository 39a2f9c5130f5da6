//go:build !amd64 || purego

package inference

// hasAVX2FMA is false: the kernels are plain Go on this platform.
const hasAVX2FMA = false

func dot4x2(w0, w1, w2, w3, x0, x1 []float32) (s00, s01, s02, s03, s10, s11, s12, s13 float32) {
	return dot4x2Go(w0, w1, w2, w3, x0, x1)
}

func dot4x1(w0, w1, w2, w3, x []float32) (s0, s1, s2, s3 float32) {
	return dot4x1Go(w0, w1, w2, w3, x)
}

func axpy32(out, a, b []float32, stride int) { axpy32Go(out, a, b, stride) }

func axpy32Ahead(out, a, b []float32, stride int, _ []float32) { axpy32Go(out, a, b, stride) }

func gemm6x16(w, x []float32, xstride, in int, y []float32, ystride int) {
	gemm6x16Go(w, x, xstride, in, y, ystride)
}

func gemv32(w, x []float32, in, panels int, y []float32) { gemv32Go(w, x, in, panels, y) }

func qkScores(scores, q, kt, next []float32) { qkScoresGo(scores, q, kt, next) }

func gemm8x32Rows(k int, a []float32, lda int, b, c []float32, ldc int) {
	gemmRows32Go(8, k, a, lda, b, c, ldc)
}
