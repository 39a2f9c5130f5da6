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
// out[0:32] = Σ_{d<n} a[d]·b[d·stride : d·stride+32], n ≥ 1: one
// broadcast and four 8-wide FMAs per d.
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

axloop:
	VBROADCASTSS (SI), Y4
	VFMADD231PS 0(AX), Y4, Y0
	VFMADD231PS 32(AX), Y4, Y1
	VFMADD231PS 64(AX), Y4, Y2
	VFMADD231PS 96(AX), Y4, Y3
	ADDQ $4, SI
	ADDQ DX, AX
	DECQ CX
	JNZ  axloop

	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VZEROUPPER
	RET
