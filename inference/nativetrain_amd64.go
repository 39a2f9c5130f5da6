//go:build !purego

package inference

import "golang.org/x/sys/cpu"

func init() {
	if hasAVX2FMA {
		trainKernels = append([]microKernel{{rows: 6, cols: 16, run: gemm6x16Packed}}, trainKernels...)
	}
	if cpu.X86.HasAVX512F {
		trainKernels = append([]microKernel{{rows: 12, cols: 32, run: gemm12x32Packed}}, trainKernels...)
	}
	trainKernel = trainKernels[0]
}

// gemm6x16PackedAVX2 is gemm6x16PackedGo with AVX2 FMA, k ≥ 1
// (nativetrain_amd64.s).
//
//go:noescape
func gemm6x16PackedAVX2(k int, a *float32, lda int, b, c *float32, ldc int)

func gemm6x16Packed(k int, a []float32, lda int, b, c []float32, ldc int) {
	_, _, _ = a[(k-1)*lda+5], b[k*16-1], c[5*ldc+15]
	gemm6x16PackedAVX2(k, &a[0], lda, &b[0], &c[0], ldc)
}

// gemm12x32PackedAVX512 is the 12×32 micro-kernel with AVX-512 FMA, k ≥ 1
// (nativetrain_amd64.s).
//
//go:noescape
func gemm12x32PackedAVX512(k int, a *float32, lda int, b, c *float32, ldc int)

func gemm12x32Packed(k int, a []float32, lda int, b, c []float32, ldc int) {
	_, _, _ = a[(k-1)*lda+11], b[k*32-1], c[11*ldc+31]
	gemm12x32PackedAVX512(k, &a[0], lda, &b[0], &c[0], ldc)
}
