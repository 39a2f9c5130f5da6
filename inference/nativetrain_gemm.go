package inference

// The native trainer's matrix products. A linear layer y = x·Wᵀ (W [out, in]
// as in PyTorch) needs three products per step:
//
//	forward   Y  = X·Wᵀ    A = X [n, in],     B = Wᵀ [in, out]
//	backward  dX = dY·W    A = dY [n, out],   B = W [out, in]
//	weights   dW += dYᵀ·X  A = dYᵀ [out, n],  B = X [n, in]
//
// All three are one routine, gemm: C (+)= A·B with A read in rows and B
// packed into panels of the micro-kernel's width, the layout the decoder's
// gemm6x16 reads. Packing costs one pass over B, small beside the m·n·k
// multiply-adds, and lets the micro-kernel stream both operands.

// microKernel computes a block of rows×cols outputs: c[r][j] += Σ_l
// a[r][l]·panel[l][j] for r < rows, j < cols, with a rows lda apart, c rows
// ldc apart and panel a packed [k][cols] panel.
type microKernel struct {
	rows, cols int
	run        func(panel, a []float32, lda, k int, c []float32, ldc int)
}

// trainKernel is the micro-kernel the native trainer multiplies with: the
// decoder's 6×16 kernel (AVX2 FMA where the CPU has it, plain Go
// otherwise), unless nativetrain_amd64.go finds a wider one.
var trainKernel = microKernel{rows: 6, cols: 16, run: gemm6x16}

const (
	gemmKC      = 256 // depth of a block of k kept in cache across micro-kernels
	gemmJobRows = 96  // rows of C in one parallel job
	gemmJobCols = 64  // columns of C in one parallel job
	// gemmMaxRows and gemmMaxCols bound the micro-kernels' blocks, for
	// scratch tiles on the stack.
	gemmMaxRows = 16
	gemmMaxCols = 32
)

// packedMatrix is a right-hand operand B [k, n] laid out for a micro-kernel
// of width w: panels of w columns, [⌈n/w⌉][k][w], zero past column n.
type packedMatrix struct {
	data    []float32
	k, n, w int
}

func (p *packedMatrix) panels() int { return (p.n + p.w - 1) / p.w }

// resize makes p a [k, n] matrix in panels of trainKernel's width, reusing
// its buffer when it is large enough.
func (p *packedMatrix) resize(k, n int) {
	p.k, p.n, p.w = k, n, trainKernel.cols
	grow(&p.data, p.panels()*k*p.w)
}

// packRows packs B [k, n] read in rows: B[i][j] = b[i·ldb + j].
func (p *packedMatrix) packRows(pool *cpuPool, b []float32, k, n, ldb int) {
	p.resize(k, n)
	w := p.w
	pool.run(p.panels(), 1, func(lo, hi int) {
		for q := lo; q < hi; q++ {
			j0 := q * w
			cols := min(w, n-j0)
			dst := p.data[q*k*w : (q+1)*k*w]
			for i := range k {
				d := dst[i*w : i*w+w]
				copy(d, b[i*ldb+j0:i*ldb+j0+cols])
				clear(d[cols:])
			}
		}
	})
}

// packCols packs B = Wᵀ [k, n] for W [n, k] read in rows: B[i][j] =
// w[j·k + i].
func (p *packedMatrix) packCols(pool *cpuPool, wt []float32, n, k int) {
	p.resize(k, n)
	w := p.w
	pool.run(p.panels(), 1, func(lo, hi int) {
		for q := lo; q < hi; q++ {
			j0 := q * w
			cols := min(w, n-j0)
			dst := p.data[q*k*w : (q+1)*k*w]
			if cols < w {
				clear(dst)
			}
			for j := range cols {
				src := wt[(j0+j)*k : (j0+j+1)*k]
				for i, v := range src {
					dst[i*w+j] = v
				}
			}
		}
	})
}

// transpose writes the transpose of a [rows, cols] into dst [cols, rows], in
// tiles so that both sides stay in cache.
func transpose(pool *cpuPool, dst, a []float32, rows, cols int) {
	const tile = 32
	pool.run((cols+tile-1)/tile, 1, func(lo, hi int) {
		for c0 := lo * tile; c0 < min(hi*tile, cols); c0 += tile {
			c1 := min(c0+tile, cols)
			for r0 := 0; r0 < rows; r0 += tile {
				r1 := min(r0+tile, rows)
				for r := r0; r < r1; r++ {
					src := a[r*cols : r*cols+c1]
					for c := c0; c < c1; c++ {
						dst[c*rows+r] = src[c]
					}
				}
			}
		}
	})
}

// gemm computes C (+)= A·B for A [m, k] in rows lda apart, B packed [k, n]
// and C [m, n] in rows ldc apart; with add it accumulates into C. The work is
// split into tiles of C, each computed whole by one goroutine in a fixed
// order, so the result does not depend on the scheduling.
func gemm(pool *cpuPool, c []float32, ldc int, a []float32, lda, m int, b *packedMatrix, add bool) {
	k, n := b.k, b.n
	if m == 0 || n == 0 {
		return
	}
	kern := trainKernel
	jobRows := gemmJobRows / kern.rows * kern.rows
	jobPanels := max(1, gemmJobCols/b.w)
	rowJobs := (m + jobRows - 1) / jobRows
	colJobs := (b.panels() + jobPanels - 1) / jobPanels
	work := func(lo, hi int) {
		var tile [gemmMaxRows * gemmMaxCols]float32
		var apad [gemmMaxRows * gemmKC]float32
		for job := lo; job < hi; job++ {
			r0 := job / colJobs * jobRows
			r1 := min(r0+jobRows, m)
			p0 := job % colJobs * jobPanels
			p1 := min(p0+jobPanels, b.panels())
			if !add {
				for r := r0; r < r1; r++ {
					clear(c[r*ldc+p0*b.w : r*ldc+min(p1*b.w, n)])
				}
			}
			for k0 := 0; k0 < k; k0 += gemmKC {
				kl := min(gemmKC, k-k0)
				for q := p0; q < p1; q++ {
					panel := b.data[(q*k+k0)*b.w : (q*k+k0+kl)*b.w]
					j0 := q * b.w
					cols := min(b.w, n-j0)
					for i := r0; i < r1; i += kern.rows {
						rows := min(kern.rows, r1-i)
						if rows == kern.rows && cols == b.w {
							kern.run(panel, a[i*lda+k0:], lda, kl, c[i*ldc+j0:], ldc)
							continue
						}
						// An edge block: rows past m read zeros, columns
						// past n are dropped.
						x, xs := a[i*lda+k0:], lda
						if rows < kern.rows {
							x, xs = apad[:kern.rows*kl], kl
							clear(x)
							for r := range rows {
								copy(x[r*kl:(r+1)*kl], a[(i+r)*lda+k0:(i+r)*lda+k0+kl])
							}
						}
						t := tile[:kern.rows*b.w]
						clear(t)
						kern.run(panel, x, xs, kl, t, b.w)
						for r := range rows {
							cr := c[(i+r)*ldc+j0 : (i+r)*ldc+j0+cols]
							for j, v := range t[r*b.w : r*b.w+cols] {
								cr[j] += v
							}
						}
					}
				}
			}
		}
	}
	jobs := rowJobs * colJobs
	if m*n*k < parallelMACs {
		work(0, jobs)
		return
	}
	pool.run(jobs, 1, work)
}
