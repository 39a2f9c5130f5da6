//go:build !purego

#include "textflag.h"

// A bfloat16 is the top half of the float32 it stands for: VPMOVZXWD
// widens 16 of them to 32-bit words, VPSLLD $16 moves each into the top
// half, and the result is exact float32 for the FMAs.

// func bf16Dot4x4AVX512(w *uint16, x *float32, ld, n int, s *[16]float32)
//
// s[4i+r] = Σ_{k<n} w[r][k]·x[i][k] for four bfloat16 rows of w and four
// float32 rows of x (both ld elements apart), n a positive multiple of 16:
// sixteen 16-wide accumulators, four widened weight vectors and four input
// vectors per 16 elements, then a horizontal sum. The four rows are short
// streams the hardware prefetcher is slow to follow, so the loop prefetches
// the next four rows (contiguous when ld is the row length) as it goes.
TEXT ·bf16Dot4x4AVX512(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), R8
	MOVQ x+8(FP), SI
	MOVQ ld+16(FP), BX
	MOVQ n+24(FP), CX
	MOVQ s+32(FP), AX
	LEAQ (BX*4), DI      // x row stride in bytes
	SHLQ $1, BX          // w row stride in bytes
	LEAQ (R8)(BX*2), R9
	ADDQ BX, R9          // w row 3
	LEAQ (SI)(DI*2), DX
	ADDQ DI, DX          // x row 3
	LEAQ (R8)(BX*4), R10 // the next four rows, prefetched as these are read
	SHRQ $4, CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15

b44loop:
	VPMOVZXWD (R8), Z16
	VPMOVZXWD (R8)(BX*1), Z17
	VPMOVZXWD (R8)(BX*2), Z18
	VPMOVZXWD (R9), Z19
	VPSLLD $16, Z16, Z16
	VPSLLD $16, Z17, Z17
	VPSLLD $16, Z18, Z18
	VPSLLD $16, Z19, Z19
	VMOVUPS (SI), Z20
	VMOVUPS (SI)(DI*1), Z21
	VMOVUPS (SI)(DI*2), Z22
	VMOVUPS (DX), Z23
	VFMADD231PS Z20, Z16, Z0
	VFMADD231PS Z20, Z17, Z1
	VFMADD231PS Z20, Z18, Z2
	VFMADD231PS Z20, Z19, Z3
	VFMADD231PS Z21, Z16, Z4
	VFMADD231PS Z21, Z17, Z5
	VFMADD231PS Z21, Z18, Z6
	VFMADD231PS Z21, Z19, Z7
	VFMADD231PS Z22, Z16, Z8
	VFMADD231PS Z22, Z17, Z9
	VFMADD231PS Z22, Z18, Z10
	VFMADD231PS Z22, Z19, Z11
	VFMADD231PS Z23, Z16, Z12
	VFMADD231PS Z23, Z17, Z13
	VFMADD231PS Z23, Z18, Z14
	VFMADD231PS Z23, Z19, Z15
	PREFETCHT0 (R10)
	PREFETCHT0 64(R10)
	ADDQ $128, R10
	ADDQ $32, R8
	ADDQ $32, R9
	ADDQ $64, SI
	ADDQ $64, DX
	DECQ CX
	JNZ  b44loop

	// Fold each accumulator to 256 bits, then four at a time as in
	// dot4x2AVX: per 128-bit lane hadd(hadd(a,b), hadd(c,d)), lanes added.
	VEXTRACTF64X4 $1, Z0, Y16
	VADDPS Y16, Y0, Y0
	VEXTRACTF64X4 $1, Z1, Y17
	VADDPS Y17, Y1, Y1
	VEXTRACTF64X4 $1, Z2, Y18
	VADDPS Y18, Y2, Y2
	VEXTRACTF64X4 $1, Z3, Y19
	VADDPS Y19, Y3, Y3
	VEXTRACTF64X4 $1, Z4, Y20
	VADDPS Y20, Y4, Y4
	VEXTRACTF64X4 $1, Z5, Y21
	VADDPS Y21, Y5, Y5
	VEXTRACTF64X4 $1, Z6, Y22
	VADDPS Y22, Y6, Y6
	VEXTRACTF64X4 $1, Z7, Y23
	VADDPS Y23, Y7, Y7
	VEXTRACTF64X4 $1, Z8, Y16
	VADDPS Y16, Y8, Y8
	VEXTRACTF64X4 $1, Z9, Y17
	VADDPS Y17, Y9, Y9
	VEXTRACTF64X4 $1, Z10, Y18
	VADDPS Y18, Y10, Y10
	VEXTRACTF64X4 $1, Z11, Y19
	VADDPS Y19, Y11, Y11
	VEXTRACTF64X4 $1, Z12, Y20
	VADDPS Y20, Y12, Y12
	VEXTRACTF64X4 $1, Z13, Y21
	VADDPS Y21, Y13, Y13
	VEXTRACTF64X4 $1, Z14, Y22
	VADDPS Y22, Y14, Y14
	VEXTRACTF64X4 $1, Z15, Y23
	VADDPS Y23, Y15, Y15
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVUPS X0, 0(AX)
	VHADDPS Y5, Y4, Y4
	VHADDPS Y7, Y6, Y6
	VHADDPS Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VADDPS X5, X4, X4
	VMOVUPS X4, 16(AX)
	VHADDPS Y9, Y8, Y8
	VHADDPS Y11, Y10, Y10
	VHADDPS Y10, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VADDPS X9, X8, X8
	VMOVUPS X8, 32(AX)
	VHADDPS Y13, Y12, Y12
	VHADDPS Y15, Y14, Y14
	VHADDPS Y14, Y12, Y12
	VEXTRACTF128 $1, Y12, X13
	VADDPS X13, X12, X12
	VMOVUPS X12, 48(AX)
	VZEROUPPER
	RET

// func bf16Dot4x1AVX512(w *uint16, x *float32, ld, n int, s *[4]float32)
//
// s[r] = Σ_{k<n} w[r][k]·x[k] for four bfloat16 rows of w (ld elements
// apart), n a positive multiple of 16: the single-token decode step, bound
// by reading the weights. 32 elements per iteration into two sets of four
// accumulators, so that FMA latency does not bound the loop.
TEXT ·bf16Dot4x1AVX512(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), R8
	MOVQ x+8(FP), SI
	MOVQ ld+16(FP), BX
	MOVQ n+24(FP), CX
	MOVQ s+32(FP), AX
	SHLQ $1, BX
	LEAQ (R8)(BX*2), R9
	ADDQ BX, R9
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	SHRQ $4, CX
	TESTQ $1, CX
	JZ    b41pairs
	VPMOVZXWD (R8), Z16
	VPMOVZXWD (R8)(BX*1), Z17
	VPMOVZXWD (R8)(BX*2), Z18
	VPMOVZXWD (R9), Z19
	VPSLLD $16, Z16, Z16
	VPSLLD $16, Z17, Z17
	VPSLLD $16, Z18, Z18
	VPSLLD $16, Z19, Z19
	VMOVUPS (SI), Z20
	VFMADD231PS Z20, Z16, Z0
	VFMADD231PS Z20, Z17, Z1
	VFMADD231PS Z20, Z18, Z2
	VFMADD231PS Z20, Z19, Z3
	ADDQ $32, R8
	ADDQ $32, R9
	ADDQ $64, SI

b41pairs:
	SHRQ $1, CX
	JZ   b41sum

b41loop:
	VPMOVZXWD (R8), Z16
	VPMOVZXWD (R8)(BX*1), Z17
	VPMOVZXWD (R8)(BX*2), Z18
	VPMOVZXWD (R9), Z19
	VPMOVZXWD 32(R8), Z24
	VPMOVZXWD 32(R8)(BX*1), Z25
	VPMOVZXWD 32(R8)(BX*2), Z26
	VPMOVZXWD 32(R9), Z27
	VPSLLD $16, Z16, Z16
	VPSLLD $16, Z17, Z17
	VPSLLD $16, Z18, Z18
	VPSLLD $16, Z19, Z19
	VPSLLD $16, Z24, Z24
	VPSLLD $16, Z25, Z25
	VPSLLD $16, Z26, Z26
	VPSLLD $16, Z27, Z27
	VMOVUPS (SI), Z20
	VMOVUPS 64(SI), Z21
	VFMADD231PS Z20, Z16, Z0
	VFMADD231PS Z20, Z17, Z1
	VFMADD231PS Z20, Z18, Z2
	VFMADD231PS Z20, Z19, Z3
	VFMADD231PS Z21, Z24, Z4
	VFMADD231PS Z21, Z25, Z5
	VFMADD231PS Z21, Z26, Z6
	VFMADD231PS Z21, Z27, Z7
	ADDQ $64, R8
	ADDQ $64, R9
	ADDQ $128, SI
	DECQ CX
	JNZ  b41loop

b41sum:
	VADDPS Z4, Z0, Z0
	VADDPS Z5, Z1, Z1
	VADDPS Z6, Z2, Z2
	VADDPS Z7, Z3, Z3
	VEXTRACTF64X4 $1, Z0, Y16
	VADDPS Y16, Y0, Y0
	VEXTRACTF64X4 $1, Z1, Y17
	VADDPS Y17, Y1, Y1
	VEXTRACTF64X4 $1, Z2, Y18
	VADDPS Y18, Y2, Y2
	VEXTRACTF64X4 $1, Z3, Y19
	VADDPS Y19, Y3, Y3
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVUPS X0, 0(AX)
	VZEROUPPER
	RET

// func bf16Dot4x2AVX(w *uint16, x0, x1 *float32, ld, n int, s *[8]float32)
//
// s[r] = w[r]·x0 and s[4+r] = w[r]·x1 over the first n elements, four
// bfloat16 rows of w ld elements apart, n a positive multiple of 8: eight
// 8-wide FMA accumulators, then a horizontal sum as in dot4x2AVX.
TEXT ·bf16Dot4x2AVX(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), R8
	MOVQ x0+8(FP), SI
	MOVQ x1+16(FP), DI
	MOVQ ld+24(FP), BX
	MOVQ n+32(FP), CX
	MOVQ s+40(FP), AX
	SHLQ $1, BX
	LEAQ (R8)(BX*2), R9
	ADDQ BX, R9
	SHRQ $3, CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

b42loop:
	VPMOVZXWD (R8), Y8
	VPMOVZXWD (R8)(BX*1), Y9
	VPMOVZXWD (R8)(BX*2), Y10
	VPMOVZXWD (R9), Y11
	VPSLLD $16, Y8, Y8
	VPSLLD $16, Y9, Y9
	VPSLLD $16, Y10, Y10
	VPSLLD $16, Y11, Y11
	VMOVUPS (SI), Y12
	VMOVUPS (DI), Y13
	VFMADD231PS Y12, Y8, Y0
	VFMADD231PS Y12, Y9, Y1
	VFMADD231PS Y12, Y10, Y2
	VFMADD231PS Y12, Y11, Y3
	VFMADD231PS Y13, Y8, Y4
	VFMADD231PS Y13, Y9, Y5
	VFMADD231PS Y13, Y10, Y6
	VFMADD231PS Y13, Y11, Y7
	ADDQ $16, R8
	ADDQ $16, R9
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  b42loop

	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X8
	VADDPS X8, X0, X0
	VMOVUPS X0, 0(AX)
	VHADDPS Y5, Y4, Y4
	VHADDPS Y7, Y6, Y6
	VHADDPS Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X9
	VADDPS X9, X4, X4
	VMOVUPS X4, 16(AX)
	VZEROUPPER
	RET

// func bf16GemvAVX512(w *uint16, x *float32, ld, n, rows int, y *float32)
//
// y[r] += Σ_{k<n} w[r][k]·x[k] for rows bfloat16 rows of w (ld elements
// apart), n a positive multiple of 16: the single-token decode step, bound
// by reading the weights, so one row after the other in a single
// sequential stream the hardware prefetcher follows, 64 elements per
// iteration into four accumulators.
TEXT ·bf16GemvAVX512(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), R8
	MOVQ x+8(FP), SI
	MOVQ ld+16(FP), BX
	MOVQ n+24(FP), CX
	MOVQ rows+32(FP), DX
	MOVQ y+40(FP), DI
	SHLQ $1, BX
	SHRQ $4, CX          // 16-element vectors per row
	MOVQ CX, R11
	ANDQ $3, R11         // left over after groups of four

gvrow:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	MOVQ R8, R9
	MOVQ SI, R10
	MOVQ CX, AX
	SHRQ $2, AX
	JZ   gvone

gvquad:
	VPMOVZXWD (R9), Z16
	VPMOVZXWD 32(R9), Z17
	VPMOVZXWD 64(R9), Z18
	VPMOVZXWD 96(R9), Z19
	VPSLLD $16, Z16, Z16
	VPSLLD $16, Z17, Z17
	VPSLLD $16, Z18, Z18
	VPSLLD $16, Z19, Z19
	VFMADD231PS (R10), Z16, Z0
	VFMADD231PS 64(R10), Z17, Z1
	VFMADD231PS 128(R10), Z18, Z2
	VFMADD231PS 192(R10), Z19, Z3
	ADDQ $128, R9
	ADDQ $256, R10
	DECQ AX
	JNZ  gvquad

gvone:
	MOVQ R11, AX
	TESTQ AX, AX
	JZ   gvsum

gvoneloop:
	VPMOVZXWD (R9), Z16
	VPSLLD $16, Z16, Z16
	VFMADD231PS (R10), Z16, Z0
	ADDQ $32, R9
	ADDQ $64, R10
	DECQ AX
	JNZ  gvoneloop

gvsum:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VADDSS (DI), X0, X0
	VMOVSS X0, (DI)
	ADDQ BX, R8
	ADDQ $4, DI
	DECQ DX
	JNZ  gvrow
	VZEROUPPER
	RET
