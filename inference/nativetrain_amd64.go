//go:build !purego

package inference

import "golang.org/x/sys/cpu"

func init() {
	if hasAVX2FMA {
		trainKernels = append([]microKernel{{name: "avx2", rows: 6, cols: 16, run: gemm6x16Cols, runRows: gemm6x16Rows}}, trainKernels...)
	}
	if cpu.X86.HasAVX512F {
		trainKernels = append([]microKernel{{name: "avx512", rows: 12, cols: 32, run: gemm12x32Cols, runRows: gemm12x32Rows}}, trainKernels...)
	}
	trainKernel = trainKernels[0]
}

// gemm6x16ColsAVX2 is gemm6x16ColsGo with AVX2 FMA, k ≥ 1
// (nativetrain_amd64.s).
//
//go:noescape
func gemm6x16ColsAVX2(k int, a *float32, lda int, b, c *float32, ldc int)

func gemm6x16Cols(k int, a []float32, lda int, b, c []float32, ldc int) {
	_, _, _ = a[(k-1)*lda+5], b[k*16-1], c[5*ldc+15]
	gemm6x16ColsAVX2(k, &a[0], lda, &b[0], &c[0], ldc)
}

// gemm6x16Rows is gemm6x16RowsGo on the decoder's AVX2 kernel.
func gemm6x16Rows(k int, a []float32, lda int, b, c []float32, ldc int) {
	gemm6x16(b, a, lda, k, c, ldc)
}

// gemm12x32ColsAVX512 is the 12×32 micro-kernel with AVX-512 FMA, A read as
// columns, k ≥ 1 (nativetrain_amd64.s).
//
//go:noescape
func gemm12x32ColsAVX512(k int, a *float32, lda int, b, c *float32, ldc int)

func gemm12x32Cols(k int, a []float32, lda int, b, c []float32, ldc int) {
	_, _, _ = a[(k-1)*lda+11], b[k*32-1], c[11*ldc+31]
	gemm12x32ColsAVX512(k, &a[0], lda, &b[0], &c[0], ldc)
}

// gemm12x32RowsAVX512 is the 12×32 micro-kernel with AVX-512 FMA, A read as
// rows, k ≥ 1 (nativetrain_amd64.s).
//
//go:noescape
func gemm12x32RowsAVX512(k int, a *float32, lda int, b, c *float32, ldc int)

func gemm12x32Rows(k int, a []float32, lda int, b, c []float32, ldc int) {
	_, _, _ = a[11*lda+k-1], b[k*32-1], c[11*ldc+31]
	gemm12x32RowsAVX512(k, &a[0], lda, &b[0], &c[0], ldc)
}

// expAffineAVX2: see expAffine (nativetrain_amd64.s).
//
//go:noescape
func expAffineAVX2(dst, src *float32, n int, a, b float32) (sum float32)

// expAffine sets dst[i] = e^(a·src[i] + b), as expf, and returns Σ dst;
// dst may be src.
func expAffine(dst, src []float32, a, b float32) float32 {
	n := len(src)
	n8 := n &^ 7
	if !hasAVX2FMA || n8 == 0 {
		return expAffineGo(dst, src, a, b)
	}
	_ = dst[n-1]
	sum := expAffineAVX2(&dst[0], &src[0], n8, a, b)
	return sum + expAffineGo(dst[n8:n], src[n8:], a, b)
}
