//go:build !purego

#include "textflag.h"

// func dot4x2AVX(w0, w1, w2, w3, x0, x1 *float32, n int, out *[8]float32)
//
// out[k] = w_k·x0 and out[4+k] = w_k·x1 over n floats, n a positive
// multiple of 8: eight 8-wide FMA accumulators, then a horizontal sum.
TEXT ·dot4x2AVX(SB), NOSPLIT, $0-64
	MOVQ w0+0(FP), AX
	MOVQ w1+8(FP), BX
	MOVQ w2+16(FP), CX
	MOVQ w3+24(FP), DX
	MOVQ x0+32(FP), SI
	MOVQ x1+40(FP), DI
	MOVQ n+48(FP), R8
	MOVQ out+56(FP), R9
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ R10, R10

loop:
	VMOVUPS (SI)(R10*4), Y8
	VMOVUPS (DI)(R10*4), Y9
	VMOVUPS (AX)(R10*4), Y10
	VFMADD231PS Y8, Y10, Y0
	VFMADD231PS Y9, Y10, Y4
	VMOVUPS (BX)(R10*4), Y11
	VFMADD231PS Y8, Y11, Y1
	VFMADD231PS Y9, Y11, Y5
	VMOVUPS (CX)(R10*4), Y12
	VFMADD231PS Y8, Y12, Y2
	VFMADD231PS Y9, Y12, Y6
	VMOVUPS (DX)(R10*4), Y13
	VFMADD231PS Y8, Y13, Y3
	VFMADD231PS Y9, Y13, Y7
	ADDQ $8, R10
	CMPQ R10, R8
	JLT  loop

	// Per 128-bit lane: hadd(hadd(a,b), hadd(c,d)) = [Σa Σb Σc Σd], then
	// add the two lanes.
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X8
	VADDPS X8, X0, X0
	VMOVUPS X0, 0(R9)
	VHADDPS Y5, Y4, Y4
	VHADDPS Y7, Y6, Y6
	VHADDPS Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X9
	VADDPS X9, X4, X4
	VMOVUPS X4, 16(R9)
	VZEROUPPER
	RET

// func axpy32AVX(out, a, b *float32, n, stride int)
//
// out[0:32] = Σ_{d<n} a[d]·b[d·stride : d·stride+32], n ≥ 1: two values of
// d per iteration into two sets of four 8-wide accumulators, so that FMA
// latency does not bound the loop.
TEXT ·axpy32AVX(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), AX
	MOVQ n+24(FP), CX
	MOVQ stride+32(FP), DX
	SHLQ $2, DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	TESTQ $1, CX
	JZ    axpairs
	VBROADCASTSS (SI), Y4
	VFMADD231PS 0(AX), Y4, Y0
	VFMADD231PS 32(AX), Y4, Y1
	VFMADD231PS 64(AX), Y4, Y2
	VFMADD231PS 96(AX), Y4, Y3
	ADDQ $4, SI
	ADDQ DX, AX

axpairs:
	SHRQ $1, CX
	JZ   axdone

axloop:
	VBROADCASTSS (SI), Y4
	VBROADCASTSS 4(SI), Y9
	VFMADD231PS 0(AX), Y4, Y0
	VFMADD231PS 32(AX), Y4, Y1
	VFMADD231PS 64(AX), Y4, Y2
	VFMADD231PS 96(AX), Y4, Y3
	VFMADD231PS 0(AX)(DX*1), Y9, Y5
	VFMADD231PS 32(AX)(DX*1), Y9, Y6
	VFMADD231PS 64(AX)(DX*1), Y9, Y7
	VFMADD231PS 96(AX)(DX*1), Y9, Y8
	ADDQ $8, SI
	LEAQ (AX)(DX*2), AX
	DECQ CX
	JNZ  axloop

axdone:
	VADDPS Y5, Y0, Y0
	VADDPS Y6, Y1, Y1
	VADDPS Y7, Y2, Y2
	VADDPS Y8, Y3, Y3
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VZEROUPPER
	RET

// func gemm6x16AVX(w, x *float32, xstride, in int, y *float32, ystride int)
//
// y[b][0:16] += Σ_{k<in} x[b][k]·w[k][0:16] for the six rows b of x and y
// (xstride and ystride floats apart), w a packed [in][16] panel, in ≥ 1:
// twelve 8-wide accumulators, two weight loads and six broadcasts per k.
TEXT ·gemm6x16AVX(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), AX
	MOVQ x+8(FP), SI
	MOVQ xstride+16(FP), BX
	SHLQ $2, BX
	MOVQ in+24(FP), CX
	MOVQ y+32(FP), DI
	MOVQ ystride+40(FP), DX
	SHLQ $2, DX
	LEAQ (SI)(BX*2), R8
	ADDQ BX, R8
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

gloop:
	VMOVUPS (AX), Y12
	VMOVUPS 32(AX), Y13
	VBROADCASTSS (SI), Y14
	VFMADD231PS Y12, Y14, Y0
	VFMADD231PS Y13, Y14, Y1
	VBROADCASTSS (SI)(BX*1), Y15
	VFMADD231PS Y12, Y15, Y2
	VFMADD231PS Y13, Y15, Y3
	VBROADCASTSS (SI)(BX*2), Y14
	VFMADD231PS Y12, Y14, Y4
	VFMADD231PS Y13, Y14, Y5
	VBROADCASTSS (R8), Y15
	VFMADD231PS Y12, Y15, Y6
	VFMADD231PS Y13, Y15, Y7
	VBROADCASTSS (R8)(BX*1), Y14
	VFMADD231PS Y12, Y14, Y8
	VFMADD231PS Y13, Y14, Y9
	VBROADCASTSS (R8)(BX*2), Y15
	VFMADD231PS Y12, Y15, Y10
	VFMADD231PS Y13, Y15, Y11
	ADDQ $64, AX
	ADDQ $4, SI
	ADDQ $4, R8
	DECQ CX
	JNZ  gloop

	LEAQ (DI)(DX*2), R9
	ADDQ DX, R9
	VADDPS (DI), Y0, Y0
	VADDPS 32(DI), Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VADDPS (DI)(DX*1), Y2, Y2
	VADDPS 32(DI)(DX*1), Y3, Y3
	VMOVUPS Y2, (DI)(DX*1)
	VMOVUPS Y3, 32(DI)(DX*1)
	VADDPS (DI)(DX*2), Y4, Y4
	VADDPS 32(DI)(DX*2), Y5, Y5
	VMOVUPS Y4, (DI)(DX*2)
	VMOVUPS Y5, 32(DI)(DX*2)
	VADDPS (R9), Y6, Y6
	VADDPS 32(R9), Y7, Y7
	VMOVUPS Y6, (R9)
	VMOVUPS Y7, 32(R9)
	VADDPS (R9)(DX*1), Y8, Y8
	VADDPS 32(R9)(DX*1), Y9, Y9
	VMOVUPS Y8, (R9)(DX*1)
	VMOVUPS Y9, 32(R9)(DX*1)
	VADDPS (R9)(DX*2), Y10, Y10
	VADDPS 32(R9)(DX*2), Y11, Y11
	VMOVUPS Y10, (R9)(DX*2)
	VMOVUPS Y11, 32(R9)(DX*2)
	VZEROUPPER
	RET

// func gemv32AVX512(w, x *float32, in, panels int, y *float32)
//
// y[p·32 : p·32+32] += Σ_{k<in} x[k]·w[p][k][0:32] for each of panels
// packed [in][32] panels p of w, in ≥ 1: four values of k per iteration
// into four pairs of 16-wide accumulators, so that FMA latency does not
// bound the loop, then one panel after the other.
TEXT ·gemv32AVX512(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), AX
	MOVQ x+8(FP), SI
	MOVQ in+16(FP), CX
	MOVQ panels+24(FP), DX
	MOVQ y+32(FP), DI

gvpanel:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	MOVQ SI, R8
	MOVQ CX, R9
	SHRQ $2, R9
	JZ   gvtail

gvquad:
	VBROADCASTSS (R8), Z8
	VBROADCASTSS 4(R8), Z9
	VBROADCASTSS 8(R8), Z10
	VBROADCASTSS 12(R8), Z11
	VFMADD231PS (AX), Z8, Z0
	VFMADD231PS 64(AX), Z8, Z1
	VFMADD231PS 128(AX), Z9, Z2
	VFMADD231PS 192(AX), Z9, Z3
	VFMADD231PS 256(AX), Z10, Z4
	VFMADD231PS 320(AX), Z10, Z5
	VFMADD231PS 384(AX), Z11, Z6
	VFMADD231PS 448(AX), Z11, Z7
	ADDQ $16, R8
	ADDQ $512, AX
	DECQ R9
	JNZ  gvquad

gvtail:
	MOVQ CX, R9
	ANDQ $3, R9
	JZ   gvsum

gvone:
	VBROADCASTSS (R8), Z8
	VFMADD231PS (AX), Z8, Z0
	VFMADD231PS 64(AX), Z8, Z1
	ADDQ $4, R8
	ADDQ $128, AX
	DECQ R9
	JNZ  gvone

gvsum:
	VADDPS Z2, Z0, Z0
	VADDPS Z3, Z1, Z1
	VADDPS Z6, Z4, Z4
	VADDPS Z7, Z5, Z5
	VADDPS Z4, Z0, Z0
	VADDPS Z5, Z1, Z1
	VADDPS (DI), Z0, Z0
	VADDPS 64(DI), Z1, Z1
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	ADDQ $128, DI
	DECQ DX
	JNZ  gvpanel
	VZEROUPPER
	RET

// func axpy32AVX512(out, a, b *float32, n, stride int, ahead *float32)
//
// out[0:32] = Σ_{d<n} a[d]·b[d·stride : d·stride+32], n ≥ 1: four values
// of d per iteration into four pairs of 16-wide accumulators, then the
// last n mod 4 one at a time. Per value of d it also asks for the next
// 128 bytes from ahead in the L2 cache (n·128 bytes in all), so that
// memory the caller reads next arrives while this computes: PREFETCHT1,
// not T0, whose requests wait for the L1's few miss buffers (a batch-32
// decode step took 16 % more CPU with T0).
TEXT ·axpy32AVX512(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), AX
	MOVQ n+24(FP), CX
	MOVQ stride+32(FP), DX
	MOVQ ahead+40(FP), R11
	SHLQ $2, DX
	LEAQ (DX)(DX*2), R10
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	MOVQ CX, R9
	SHRQ $2, R9
	JZ   a5tail

a5quad:
	PREFETCHT1 (R11)
	PREFETCHT1 64(R11)
	PREFETCHT1 128(R11)
	PREFETCHT1 192(R11)
	PREFETCHT1 256(R11)
	PREFETCHT1 320(R11)
	PREFETCHT1 384(R11)
	PREFETCHT1 448(R11)
	ADDQ $512, R11
	VBROADCASTSS (SI), Z8
	VBROADCASTSS 4(SI), Z9
	VBROADCASTSS 8(SI), Z10
	VBROADCASTSS 12(SI), Z11
	VFMADD231PS (AX), Z8, Z0
	VFMADD231PS 64(AX), Z8, Z1
	VFMADD231PS (AX)(DX*1), Z9, Z2
	VFMADD231PS 64(AX)(DX*1), Z9, Z3
	VFMADD231PS (AX)(DX*2), Z10, Z4
	VFMADD231PS 64(AX)(DX*2), Z10, Z5
	VFMADD231PS (AX)(R10*1), Z11, Z6
	VFMADD231PS 64(AX)(R10*1), Z11, Z7
	ADDQ $16, SI
	LEAQ (AX)(DX*4), AX
	DECQ R9
	JNZ  a5quad

a5tail:
	ANDQ $3, CX
	JZ   a5sum

a5one:
	PREFETCHT1 (R11)
	PREFETCHT1 64(R11)
	ADDQ $128, R11
	VBROADCASTSS (SI), Z8
	VFMADD231PS (AX), Z8, Z0
	VFMADD231PS 64(AX), Z8, Z1
	ADDQ $4, SI
	ADDQ DX, AX
	DECQ CX
	JNZ  a5one

a5sum:
	VADDPS Z2, Z0, Z0
	VADDPS Z3, Z1, Z1
	VADDPS Z6, Z4, Z4
	VADDPS Z7, Z5, Z5
	VADDPS Z4, Z0, Z0
	VADDPS Z5, Z1, Z1
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VZEROUPPER
	RET

// func qkScoresAVX512(s, q, kt *float32, hd, stride, t int)
//
// s[j] = Σ_{d<hd} q[d]·kt[d·stride + j] for j < t, hd ≥ 1, t ≥ 1: sixteen
// positions at a time, the last chunk masked so that no key past t is
// read, two accumulators over pairs of d.
TEXT ·qkScoresAVX512(SB), NOSPLIT, $0-48
	MOVQ s+0(FP), DI
	MOVQ q+8(FP), SI
	MOVQ kt+16(FP), AX
	MOVQ hd+24(FP), R8
	MOVQ stride+32(FP), DX
	SHLQ $2, DX
	MOVQ t+40(FP), R9
	MOVQ $0xffff, R11
	KMOVW R11, K1

qkchunk:
	CMPQ R9, $16
	JGE  qkfull
	MOVQ R9, CX
	MOVQ $1, R11
	SHLQ CX, R11
	DECQ R11
	KMOVW R11, K1

qkfull:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	MOVQ SI, R12
	MOVQ AX, R13
	MOVQ R8, BX
	SHRQ $1, BX
	JZ   qktail

qkpair:
	VMOVUPS.Z (R13), K1, Z2
	VMOVUPS.Z (R13)(DX*1), K1, Z3
	VBROADCASTSS (R12), Z4
	VBROADCASTSS 4(R12), Z5
	VFMADD231PS Z2, Z4, Z0
	VFMADD231PS Z3, Z5, Z1
	ADDQ $8, R12
	LEAQ (R13)(DX*2), R13
	DECQ BX
	JNZ  qkpair

qktail:
	TESTQ $1, R8
	JZ    qkstore
	VMOVUPS.Z (R13), K1, Z2
	VBROADCASTSS (R12), Z4
	VFMADD231PS Z2, Z4, Z0

qkstore:
	VADDPS Z1, Z0, Z0
	VMOVUPS Z0, K1, (DI)
	ADDQ $64, DI
	ADDQ $64, AX
	SUBQ $16, R9
	JG   qkchunk
	VZEROUPPER
	RET


// func qkScoresAVX2(s, q, kt *float32, hd, stride, t int)
//
// qkScoresAVX512 with AVX2 FMA: eight positions at a time, the last chunk
// masked (VMASKMOVPS, whose masked-off lanes are neither read nor written)
// so that no key past t is read and no score past t written.
TEXT ·qkScoresAVX2(SB), NOSPLIT, $0-48
	MOVQ s+0(FP), DI
	MOVQ q+8(FP), SI
	MOVQ kt+16(FP), AX
	MOVQ hd+24(FP), R8
	MOVQ stride+32(FP), DX
	SHLQ $2, DX
	MOVQ t+40(FP), R9
	LEAQ qkMask<>(SB), R10
	VMOVDQU (R10), Y6

qk2chunk:
	CMPQ R9, $8
	JGE  qk2full
	MOVQ $8, CX
	SUBQ R9, CX
	VMOVDQU (R10)(CX*4), Y6 // lanes below R9 set

qk2full:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	MOVQ SI, R12
	MOVQ AX, R13
	MOVQ R8, BX
	SHRQ $1, BX
	JZ   qk2tail

qk2pair:
	VMASKMOVPS (R13), Y6, Y2
	VMASKMOVPS (R13)(DX*1), Y6, Y3
	VBROADCASTSS (R12), Y4
	VBROADCASTSS 4(R12), Y5
	VFMADD231PS Y2, Y4, Y0
	VFMADD231PS Y3, Y5, Y1
	ADDQ $8, R12
	LEAQ (R13)(DX*2), R13
	DECQ BX
	JNZ  qk2pair

qk2tail:
	TESTQ $1, R8
	JZ    qk2store
	VMASKMOVPS (R13), Y6, Y2
	VBROADCASTSS (R12), Y4
	VFMADD231PS Y2, Y4, Y0

qk2store:
	VADDPS Y1, Y0, Y0
	CMPQ   R9, $8
	JL     qk2last
	VMOVUPS Y0, (DI)
	ADDQ   $32, DI
	ADDQ   $32, AX
	SUBQ   $8, R9
	JG     qk2chunk
	VZEROUPPER
	RET

qk2last:
	VMASKMOVPS Y0, Y6, (DI)
	VZEROUPPER
	RET

// qkMask is eight set lanes then eight clear: from 4·(8−r) bytes in, the
// mask of the first r lanes.
DATA qkMask<>+0(SB)/8, $0xffffffffffffffff
DATA qkMask<>+8(SB)/8, $0xffffffffffffffff
DATA qkMask<>+16(SB)/8, $0xffffffffffffffff
DATA qkMask<>+24(SB)/8, $0xffffffffffffffff
DATA qkMask<>+32(SB)/8, $0
DATA qkMask<>+40(SB)/8, $0
DATA qkMask<>+48(SB)/8, $0
DATA qkMask<>+56(SB)/8, $0
GLOBL qkMask<>(SB), RODATA|NOPTR, $64

// func gemm8x32RowsAVX512(k int, a *float32, lda int, b, c *float32, ldc int)
//
// c[r][0:32] += Σ_{l<k} a[r·lda + l]·b[l][0:32] for r < 8, k ≥ 1: the
// native trainer's 12×32 row kernel cut to eight rows (sixteen
// accumulators), for the blocks of a batch that twelve do not divide.
TEXT ·gemm8x32RowsAVX512(SB), NOSPLIT, $0-48
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), BX
	SHLQ $2, BX
	MOVQ b+24(FP), AX
	MOVQ c+32(FP), DI
	MOVQ ldc+40(FP), DX
	SHLQ $2, DX
	LEAQ (SI)(BX*2), R8
	ADDQ BX, R8
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
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15

r8loop:
	VMOVUPS (AX), Z24
	VMOVUPS 64(AX), Z25
	VBROADCASTSS (SI), Z26
	VFMADD231PS Z24, Z26, Z0
	VFMADD231PS Z25, Z26, Z1
	VBROADCASTSS (SI)(BX*1), Z27
	VFMADD231PS Z24, Z27, Z2
	VFMADD231PS Z25, Z27, Z3
	VBROADCASTSS (SI)(BX*2), Z28
	VFMADD231PS Z24, Z28, Z4
	VFMADD231PS Z25, Z28, Z5
	VBROADCASTSS (R8), Z29
	VFMADD231PS Z24, Z29, Z6
	VFMADD231PS Z25, Z29, Z7
	VBROADCASTSS (R8)(BX*1), Z26
	VFMADD231PS Z24, Z26, Z8
	VFMADD231PS Z25, Z26, Z9
	VBROADCASTSS (R8)(BX*2), Z27
	VFMADD231PS Z24, Z27, Z10
	VFMADD231PS Z25, Z27, Z11
	VBROADCASTSS (R9), Z28
	VFMADD231PS Z24, Z28, Z12
	VFMADD231PS Z25, Z28, Z13
	VBROADCASTSS (R9)(BX*1), Z29
	VFMADD231PS Z24, Z29, Z14
	VFMADD231PS Z25, Z29, Z15
	ADDQ $128, AX
	ADDQ $4, SI
	ADDQ $4, R8
	ADDQ $4, R9
	DECQ CX
	JNZ  r8loop

	VADDPS (DI), Z0, Z0
	VADDPS 64(DI), Z1, Z1
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	ADDQ DX, DI
	VADDPS (DI), Z2, Z2
	VADDPS 64(DI), Z3, Z3
	VMOVUPS Z2, (DI)
	VMOVUPS Z3, 64(DI)
	ADDQ DX, DI
	VADDPS (DI), Z4, Z4
	VADDPS 64(DI), Z5, Z5
	VMOVUPS Z4, (DI)
	VMOVUPS Z5, 64(DI)
	ADDQ DX, DI
	VADDPS (DI), Z6, Z6
	VADDPS 64(DI), Z7, Z7
	VMOVUPS Z6, (DI)
	VMOVUPS Z7, 64(DI)
	ADDQ DX, DI
	VADDPS (DI), Z8, Z8
	VADDPS 64(DI), Z9, Z9
	VMOVUPS Z8, (DI)
	VMOVUPS Z9, 64(DI)
	ADDQ DX, DI
	VADDPS (DI), Z10, Z10
	VADDPS 64(DI), Z11, Z11
	VMOVUPS Z10, (DI)
	VMOVUPS Z11, 64(DI)
	ADDQ DX, DI
	VADDPS (DI), Z12, Z12
	VADDPS 64(DI), Z13, Z13
	VMOVUPS Z12, (DI)
	VMOVUPS Z13, 64(DI)
	ADDQ DX, DI
	VADDPS (DI), Z14, Z14
	VADDPS 64(DI), Z15, Z15
	VMOVUPS Z14, (DI)
	VMOVUPS Z15, 64(DI)
	VZEROUPPER
	RET
