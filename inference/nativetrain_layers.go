package inference

import (
	"math"
	"sync"
)

// The native trainer's layers, each a pair of plain functions in the shape of
// llm.c's train_gpt2.c: X_forward writes its output and keeps what the
// backward needs; X_backward accumulates (+=) into the gradients of its
// inputs and weights, so a layer never needs to know who else reads its
// input. n is the number of token rows; every activation is [n, width] in
// rows. The math is Model.forward's.

// nativeLinear holds one weight W [out, in] packed for the forward (Wᵀ) and
// the backward (W) products, re-packed after every update.
type nativeLinear struct {
	w       []float32
	out, in int
	// ldy is the row stride of the output y and its gradient dy: out, or
	// more for the LM head (see paddedStride).
	ldy      int
	fwd, bwd packedMatrix
	xPacked  packedMatrix // scratch of the weight gradient: X packed
}

// newNativeLinear views w as a weight [out, in] whose outputs are rows ldy
// apart.
func newNativeLinear(w []float32, out, in, ldy int) nativeLinear {
	return nativeLinear{w: w, out: out, in: in, ldy: ldy}
}

// paddedStride is a row stride for rows of n floats that is not a multiple
// of 4 KiB: the weight gradient reads dy down its columns, and rows a
// multiple of 4 KiB apart all fall into the same few cache sets (a product
// over [2048, 2048] logits ran at two thirds of the speed).
func paddedStride(n int) int {
	if n*4%4096 == 0 {
		return n + 16
	}
	return n
}

// pack lays out the current weights for both products.
func (l *nativeLinear) pack(pool *cpuPool) {
	l.fwd.packCols(pool, l.w, l.out, l.in, l.in)
	l.bwd.packRows(pool, l.w, l.out, l.in, l.in)
}

// linearForward computes y [n, out] (+)= x [n, in]·Wᵀ.
func linearForward(pool *cpuPool, y, x []float32, l *nativeLinear, n int, add bool) {
	gemm(pool, y, l.ldy, leftOperand{data: x, ld: l.in}, n, &l.fwd, add)
}

// linearBackward accumulates dx [n, in] += dy·W and dw [out, in] += dyᵀ·x
// for dy [n, out].
func linearBackward(pool *cpuPool, dx, dw, dy, x []float32, l *nativeLinear, n int) {
	gemm(pool, dx, l.in, leftOperand{data: dy, ld: l.ldy}, n, &l.bwd, true)
	l.xPacked.packRows(pool, x, n, l.in, l.in)
	gemm(pool, dw, l.in, leftOperand{data: dy, ld: l.ldy, trans: true}, l.out, &l.xPacked, true)
}

// rowChunks is the number of fixed row ranges a reduction over rows is split
// into: each range sums into its own partial, and the partials are added in
// order, so the result does not depend on the scheduling.
const rowChunks = 8

// embeddingForward copies the embedding row of each token into x [n, d].
func embeddingForward(x, emb []float32, toks []int, d int) {
	for j, id := range toks {
		copy(x[j*d:(j+1)*d], emb[id*d:(id+1)*d])
	}
}

// embeddingBackward accumulates dx's rows into the embedding rows of their
// tokens.
func embeddingBackward(demb, dx []float32, toks []int, d int) {
	for j, id := range toks {
		axpy(demb[id*d:(id+1)*d], 1, dx[j*d:(j+1)*d])
	}
}

// rmsnormForward writes out = x·rstd·g for x [n, d] and keeps rstd [n] =
// 1/√(mean(x²) + eps).
func rmsnormForward(pool *cpuPool, out, rstd, x, g []float32, n, d int, eps float32) {
	pool.run(n, 64, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			xr, or := x[j*d:(j+1)*d], out[j*d:(j+1)*d]
			var ss float32
			for _, v := range xr {
				ss += v * v
			}
			r := 1 / float32(math.Sqrt(float64(ss/float32(d)+eps)))
			rstd[j] = r
			for i, v := range xr {
				or[i] = v * r * g[i]
			}
		}
	})
}

// rmsnormBackward accumulates into dx [n, d] and dg [d] the gradients of
// out = x·rstd·g given dout: dx += rstd·(dout·g) − rstd³/d·x·Σ(dout·g·x),
// dg += Σ_rows dout·x·rstd. partial is scratch of rowChunks·d floats.
func rmsnormBackward(pool *cpuPool, dx, dg, dout, x, g, rstd, partial []float32, n, d int) {
	clear(partial)
	per := (n + rowChunks - 1) / rowChunks
	pool.run(rowChunks, 1, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			pg := partial[c*d : (c+1)*d]
			for j := c * per; j < min((c+1)*per, n); j++ {
				xr, dr, dxr := x[j*d:(j+1)*d], dout[j*d:(j+1)*d], dx[j*d:(j+1)*d]
				r := rstd[j]
				var dot float32
				for i, v := range xr {
					dot += dr[i] * g[i] * v
					pg[i] += dr[i] * v * r
				}
				k := r * r * r * dot / float32(d)
				for i, v := range xr {
					dxr[i] += r*dr[i]*g[i] - k*v
				}
			}
		}
	})
	for c := range rowChunks {
		axpy(dg, 1, partial[c*d:(c+1)*d])
	}
}

// ropeForward rotates, in place, the first rot columns of each row of qkv
// [n, width] (the queries' and the keys' heads), head by head, at the
// position pos[j] of row j: x·cos + rotate_half(x)·sin.
func ropeForward(pool *cpuPool, qkv []float32, pos []int, cos, sin []float32, n, width, rot, hd int) {
	half := hd / 2
	pool.run(n, 64, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			cs, sn := cos[pos[j]*half:(pos[j]+1)*half], sin[pos[j]*half:(pos[j]+1)*half]
			row := qkv[j*width : j*width+rot]
			for h := 0; h < rot; h += hd {
				rotate(row[h:h+hd], cs, sn)
			}
		}
	})
}

// ropeBackward maps, in place, the gradients of the rotated queries and
// keys in dqkv to those of the unrotated ones: the rotation's transpose.
func ropeBackward(pool *cpuPool, dqkv []float32, pos []int, cos, sin []float32, n, width, rot, hd int) {
	half := hd / 2
	pool.run(n, 64, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			cs, sn := cos[pos[j]*half:(pos[j]+1)*half], sin[pos[j]*half:(pos[j]+1)*half]
			row := dqkv[j*width : j*width+rot]
			for h := 0; h < rot; h += hd {
				x1, x2 := row[h:h+half], row[h+half:h+hd]
				for i, c := range cs {
					a, b := x1[i], x2[i]
					x1[i] = a*c + b*sn[i]
					x2[i] = b*c - a*sn[i]
				}
			}
		}
	})
}

// biasForward adds the bias b [width] to every row of y [n, width].
func biasForward(pool *cpuPool, y, b []float32, n, width int) {
	pool.run(n, 64, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			axpy(y[j*width:(j+1)*width], 1, b)
		}
	})
}

// biasBackward accumulates into db [width] the column sums of dy [n,
// width]. partial is scratch of rowChunks·width floats.
func biasBackward(pool *cpuPool, db, dy, partial []float32, n, width int) {
	partial = partial[:rowChunks*width]
	clear(partial)
	per := (n + rowChunks - 1) / rowChunks
	pool.run(rowChunks, 1, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			pc := partial[c*width : (c+1)*width]
			for j := c * per; j < min((c+1)*per, n); j++ {
				axpy(pc, 1, dy[j*width:(j+1)*width])
			}
		}
	})
	for c := range rowChunks {
		axpy(db, 1, partial[c*width:(c+1)*width])
	}
}

// seqSpan is one sequence of the batch: its rows [off, off+len) in the
// activations and its attention probabilities at probOff, heads·len² floats.
type seqSpan struct {
	off, len, probOff int
}

// attnScratch is one attention head's packed operands, its probabilities
// when the caller keeps none, and its score gradients.
type attnScratch struct {
	b1, b2 packedMatrix
	p, dp  []float32
}

var attnScratchPool = sync.Pool{New: func() any { return new(attnScratch) }}

// causalBlocks calls f for consecutive blocks of rows [i0, i1) of an [L, L]
// causal product: each block of rows, or of columns for the transposed
// products, only needs the scores up to (from) its diagonal, which is what
// the callers compute, so a head costs about two thirds of full squares.
func causalBlocks(L int, f func(i0, i1 int)) {
	block := 4 * trainKernel.rows
	for i0 := 0; i0 < L; i0 += block {
		f(i0, min(i0+block, L))
	}
}

// attentionForward computes causal softmax attention within each sequence:
// for qkv [n, (heads+2·kvHeads)·hd] (rotated queries, rotated keys, values,
// head after head) it writes att [n, heads·hd] and keeps the probabilities,
// per sequence and head a [len, len] matrix (zero above the diagonal), in
// probs; with probs nil, a forward with no backward, they are dropped after
// each head. Query head h reads key/value head h/(heads/kvHeads) (grouped-
// query attention; every head its own when kvHeads = heads). Each sequence
// and key/value head is one parallel unit, its group of query heads one
// after the other; the products run on the gemm micro-kernel.
func attentionForward(pool *cpuPool, att, probs, qkv []float32, seqs []seqSpan, heads, kvHeads, hd int) {
	scale := float32(1 / math.Sqrt(float64(hd)))
	group, dq := heads/kvHeads, heads*hd
	w, dk := dq+2*kvHeads*hd, kvHeads*hd
	pool.run(len(seqs)*kvHeads, 1, func(lo, hi int) {
		sc := attnScratchPool.Get().(*attnScratch)
		defer attnScratchPool.Put(sc)
		for u := lo; u < hi; u++ {
			s, g := seqs[u/kvHeads], u%kvHeads
			L := s.len
			k, v := s.off*w+dq+g*hd, s.off*w+dq+dk+g*hd
			sc.b1.packCols(nil, qkv[k:], L, hd, w)
			sc.b2.packRows(nil, qkv[v:], L, hd, w)
			for h := g * group; h < (g+1)*group; h++ {
				q := s.off*w + h*hd
				var p []float32
				if probs != nil {
					p = probs[s.probOff+h*L*L : s.probOff+(h+1)*L*L]
				} else {
					p = grow(&sc.p, L*L)
				}
				// Scores q·kᵀ up to the diagonal, then a causal softmax of
				// each row, then the output p·v.
				causalBlocks(L, func(i0, i1 int) {
					kt := sc.b1.cols(i1)
					gemm(nil, p[i0*L:], L, leftOperand{data: qkv[q+i0*w:], ld: w}, i1-i0, &kt, false)
					for t := i0; t < i1; t++ {
						pr := p[t*L : (t+1)*L]
						mx := pr[0]
						for _, x := range pr[:t+1] {
							mx = max(mx, x)
						}
						inv := 1 / expAffine(pr[:t+1], pr[:t+1], scale, -scale*mx)
						for j := range pr[:t+1] {
							pr[j] *= inv
						}
						clear(pr[t+1:])
					}
					vs := sc.b2.rows(0, i1)
					gemm(nil, att[(s.off+i0)*dq+h*hd:], dq, leftOperand{data: p[i0*L:], ld: L}, i1-i0, &vs, false)
				})
			}
		}
	})
}

// attentionBackward accumulates into dqkv, laid out as qkv, the gradients of
// the rotated queries, rotated keys and values given datt [n, heads·hd]:
// with dS = P·(dP − rowsum(P·dP))·scale for dP = dout·vᵀ, dv += Pᵀ·dout,
// dq += dS·k, dk += dSᵀ·q, each key/value head summing over its group of
// query heads (one parallel unit, so no two write the same gradient).
func attentionBackward(pool *cpuPool, dqkv, datt, probs, qkv []float32, seqs []seqSpan, heads, kvHeads, hd int) {
	scale := float32(1 / math.Sqrt(float64(hd)))
	group, dq := heads/kvHeads, heads*hd
	w, dk := dq+2*kvHeads*hd, kvHeads*hd
	pool.run(len(seqs)*kvHeads, 1, func(lo, hi int) {
		sc := attnScratchPool.Get().(*attnScratch)
		defer attnScratchPool.Put(sc)
		for u := lo; u < hi; u++ {
			s, g := seqs[u/kvHeads], u%kvHeads
			L := s.len
			k, v := s.off*w+dq+g*hd, s.off*w+dq+dk+g*hd
			for h := g * group; h < (g+1)*group; h++ {
				q, do := s.off*w+h*hd, s.off*dq+h*hd
				p := probs[s.probOff+h*L*L : s.probOff+(h+1)*L*L]
				dp := grow(&sc.dp, L*L)
				// dP and dS up to the diagonal.
				sc.b1.packCols(nil, qkv[v:], L, hd, w)
				causalBlocks(L, func(i0, i1 int) {
					vt := sc.b1.cols(i1)
					gemm(nil, dp[i0*L:], L, leftOperand{data: datt[do+i0*dq:], ld: dq}, i1-i0, &vt, false)
					for t := i0; t < i1; t++ {
						pr, dr := p[t*L:t*L+t+1], dp[t*L:t*L+t+1]
						var sum float32
						for j, x := range pr {
							sum += x * dr[j]
						}
						for j, x := range pr {
							dr[j] = x * (dr[j] - sum) * scale
						}
						clear(dp[t*L+t+1 : (t+1)*L])
					}
				})
				// dv += Pᵀ·dout and dk += dSᵀ·q: key rows [v0, v1) read the
				// queries from v0 on; dq += dS·k: query rows read keys up to
				// their block's end.
				sc.b1.packRows(nil, datt[do:], L, hd, dq)
				sc.b2.packRows(nil, qkv[q:], L, hd, w)
				causalBlocks(L, func(v0, v1 int) {
					from := sc.b1.rows(v0, L)
					gemm(nil, dqkv[v+v0*w:], w, leftOperand{data: p[v0*L+v0:], ld: L, trans: true}, v1-v0, &from, true)
					from = sc.b2.rows(v0, L)
					gemm(nil, dqkv[k+v0*w:], w, leftOperand{data: dp[v0*L+v0:], ld: L, trans: true}, v1-v0, &from, true)
				})
				sc.b1.packRows(nil, qkv[k:], L, hd, w)
				causalBlocks(L, func(i0, i1 int) {
					upTo := sc.b1.rows(0, i1)
					gemm(nil, dqkv[q+i0*w:], w, leftOperand{data: dp[i0*L:], ld: L}, i1-i0, &upTo, true)
				})
			}
		}
	})
}

// swigluForward writes act [n, f] = silu(gate)·up for gu [n, 2f] (gate,
// then up, per row).
func swigluForward(pool *cpuPool, act, gu []float32, n, f int) {
	pool.run(n, 64, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			g, u, a := gu[j*2*f:j*2*f+f], gu[j*2*f+f:(j+1)*2*f], act[j*f:(j+1)*f]
			expAffine(a, g, -1, 0)
			for i, gv := range g {
				a[i] = gv / (1 + a[i]) * u[i]
			}
		}
	})
}

// swigluBackward writes dgu [n, 2f] from dact [n, f]: d gate =
// dact·up·silu'(gate) with silu'(g) = σ(g)·(1 + g·(1 − σ(g))), d up =
// dact·silu(gate).
func swigluBackward(pool *cpuPool, dgu, dact, gu []float32, n, f int) {
	pool.run(n, 64, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			g, u, da := gu[j*2*f:j*2*f+f], gu[j*2*f+f:(j+1)*2*f], dact[j*f:(j+1)*f]
			dg, du := dgu[j*2*f:j*2*f+f], dgu[j*2*f+f:(j+1)*2*f]
			expAffine(dg, g, -1, 0)
			for i, gv := range g {
				s := 1 / (1 + dg[i])
				dg[i] = da[i] * u[i] * s * (1 + gv*(1-s))
				du[i] = da[i] * gv * s
			}
		}
	})
}

// logSoftmaxForward computes, for logits [n, v] in rows ld apart, the
// log-probability logp[j] = logits[j][tgt[j]] − logsumexp(logits[j]), and
// overwrites each row with e^(logit − max), keeping 1/Σ in inv [n], for the
// backward.
func logSoftmaxForward(pool *cpuPool, inv, logp, logits []float32, tgt []int, n, v, ld int) {
	pool.run(n, 16, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			row := logits[j*ld : j*ld+v]
			mx := row[0]
			for _, x := range row {
				mx = max(mx, x)
			}
			target := row[tgt[j]]
			sum := expAffine(row, row, 1, -mx)
			inv[j] = 1 / sum
			logp[j] = target - mx - float32(math.Log(float64(sum)))
		}
	})
}

// logSoftmaxBackward overwrites the rows left by logSoftmaxForward with the
// gradient of the loss −Σ_j w[j]·logp[j] with respect to the logits:
// w[j]·(softmax(row) − onehot(tgt[j])).
func logSoftmaxBackward(pool *cpuPool, rows, inv, w []float32, tgt []int, n, v, ld int) {
	pool.run(n, 16, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			row := rows[j*ld : j*ld+v]
			f := w[j] * inv[j]
			for i, e := range row {
				row[i] = f * e
			}
			row[tgt[j]] -= w[j]
		}
	})
}

// expAffineGo is expAffine in plain Go.
func expAffineGo(dst, src []float32, a, b float32) float32 {
	dst = dst[:len(src)]
	var sum float32
	for i, x := range src {
		e := expf(a*x + b)
		dst[i] = e
		sum += e
	}
	return sum
}
