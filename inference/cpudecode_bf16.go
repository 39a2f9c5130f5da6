package inference

import "math"

// bf16Block is a block of consecutive rows of a weight matrix held in
// bfloat16, [rows, in] as the checkpoint stores them: a view of the
// memory-mapped file, never a copy.
type bf16Block struct {
	w    []uint16
	rows int
}

// bf16Float widens a bfloat16 to the float32 it stands for, exactly.
func bf16Float(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// widenBF16 writes src widened to float32 into dst.
func widenBF16(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, b := range src {
		dst[i] = bf16Float(b)
	}
}

// mulBF16 is mulRange on bfloat16 rows: the blocks stacked are the matrix,
// and each output o in [o0, o1) is a dot product of x's rows with the
// block row that holds it, accumulated in float32.
func (m *cpuMatrix) mulBF16(y, x []float32, n, o0, o1 int, add bool) {
	start := 0
	for _, blk := range m.bf16 {
		lo, hi := max(o0, start), min(o1, start+blk.rows)
		if lo < hi {
			matmulRowsBF16(y, x, blk.w[(lo-start)*m.in:(hi-start)*m.in], n, m.in, m.out, lo, add)
		}
		start += blk.rows
	}
}

// matmulRowsBF16 is matmulRows for the bfloat16 rows w [r, in], which give
// the outputs [o0, o0+r) of y [n, out]: four weight rows with four inputs
// at a time (one with each input left over), the batch in blocks that stay
// in cache, so each weight is read from memory once per call.
func matmulRowsBF16(y, x []float32, w []uint16, n, in, out, o0 int, add bool) {
	const bBlock = 32
	r := len(w) / in
	if n == 1 {
		yr := y[o0 : o0+r]
		if !add {
			clear(yr)
		}
		bf16Gemv(w, x[:in], in, yr)
		return
	}
	var s [16]float32
	for b0 := 0; b0 < n; b0 += bBlock {
		b1 := min(b0+bBlock, n)
		o := 0
		for ; o+4 <= r; o += 4 {
			wo := w[o*in : (o+4)*in]
			b := b0
			for ; b+4 <= b1; b += 4 {
				bf16Dot4x4(wo, x[b*in:(b+4)*in], in, &s)
				for i := range 4 {
					at := (b+i)*out + o0 + o
					store4(y[at:at+4], s[4*i], s[4*i+1], s[4*i+2], s[4*i+3], add)
				}
			}
			for ; b < b1; b++ {
				s4 := (*[4]float32)(s[:4])
				bf16Dot4x1(wo, x[b*in:(b+1)*in], in, s4)
				at := b*out + o0 + o
				store4(y[at:at+4], s4[0], s4[1], s4[2], s4[3], add)
			}
		}
		for ; o < r; o++ {
			for b := b0; b < b1; b++ {
				v := bf16Dot(w[o*in:(o+1)*in], x[b*in:(b+1)*in])
				if add {
					y[b*out+o0+o] += v
				} else {
					y[b*out+o0+o] = v
				}
			}
		}
	}
}

// bf16GemvRows adds to y[r] the dot product of bfloat16 row r of w
// [len(y), in] with x [in], four rows at a time.
func bf16GemvRows(w []uint16, x []float32, in int, y []float32) {
	r := 0
	var s [4]float32
	for ; r+4 <= len(y); r += 4 {
		bf16Dot4x1(w[r*in:(r+4)*in], x, in, &s)
		y[r] += s[0]
		y[r+1] += s[1]
		y[r+2] += s[2]
		y[r+3] += s[3]
	}
	for ; r < len(y); r++ {
		y[r] += bf16Dot(w[r*in:(r+1)*in], x)
	}
}

// bf16Dot returns Σ bf16(w[i])·x[i].
func bf16Dot(w []uint16, x []float32) float32 {
	x = x[:len(w)]
	var s float32
	for i, b := range w {
		s += bf16Float(b) * x[i]
	}
	return s
}

// bf16Dot4x1Go sets s[r] to the dot product of bfloat16 row r of w
// [4, in] with x [in].
func bf16Dot4x1Go(w []uint16, x []float32, in int, s *[4]float32) {
	bf16Tail4x1(w, x, in, 0, s, false)
}

// bf16Dot4x4Go sets s[4i+r] to the dot product of bfloat16 row r of w
// [4, in] with row i of x [4, in].
func bf16Dot4x4Go(w []uint16, x []float32, in int, s *[16]float32) {
	bf16Tail4x4(w, x, in, 0, s, false)
}

// bf16Tail4x1 sets (or with add, adds to) s[r] the dot products of
// bfloat16 row r of w [4, in] with x [in] over the elements [k, in).
func bf16Tail4x1(w []uint16, x []float32, in, k int, s *[4]float32, add bool) {
	w0, w1, w2, w3 := w[k:in], w[in+k:2*in], w[2*in+k:3*in], w[3*in+k:4*in]
	var s0, s1, s2, s3 float32
	for i, a := range x[k:in] {
		s0 += bf16Float(w0[i]) * a
		s1 += bf16Float(w1[i]) * a
		s2 += bf16Float(w2[i]) * a
		s3 += bf16Float(w3[i]) * a
	}
	if !add {
		*s = [4]float32{}
	}
	s[0] += s0
	s[1] += s1
	s[2] += s2
	s[3] += s3
}

// bf16Tail4x4 is bf16Tail4x1 for the four rows of x [4, in] into s[4i:4i+4].
func bf16Tail4x4(w []uint16, x []float32, in, k int, s *[16]float32, add bool) {
	for i := range 4 {
		bf16Tail4x1(w, x[i*in:(i+1)*in], in, k, (*[4]float32)(s[4*i:4*i+4]), add)
	}
}
