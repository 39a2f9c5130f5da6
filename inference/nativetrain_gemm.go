package inference

import "sync"

// The native trainer's matrix products. A linear layer y = x·Wᵀ (W [out, in]
// as in PyTorch) needs three products per step:
//
//	forward   Y  = X·Wᵀ    A = X [n, in],     B = Wᵀ [in, out]
//	backward  dX = dY·W    A = dY [n, out],   B = W [out, in]
//	weights   dW += dYᵀ·X  A = dYᵀ [out, n],  B = X [n, in]
//
// All three are one routine, gemm: C (+)= A·B, in the layout of BLIS. B is
// packed once into panels of the micro-kernel's width; each parallel job
// packs its block of A (read in rows, or in columns for dYᵀ, so no transpose
// is ever materialised) into micro-panels of the kernel's height for one
// block of k, then runs the micro-kernel over its tile of C with both
// operands streaming from cache.

// microKernel computes a block of rows×cols outputs, c[r][j] += Σ_l
// A[r][l]·b[l·cols + j] for l < k, with b a packed [k][cols] panel of B and
// C's rows ldc apart. run reads A as columns, A[r][l] = a[l·lda + r] (a
// packed micro-panel, lda = rows, or a transposed operand read in place);
// runRows reads it as rows, A[r][l] = a[r·lda + l].
type microKernel struct {
	name         string
	rows, cols   int
	run, runRows func(k int, a []float32, lda int, b, c []float32, ldc int)
}

// trainKernels lists the micro-kernels this CPU can run, fastest first:
// nativetrain_amd64.go adds AVX2 and AVX-512 ones where the CPU has them.
// trainKernel, the one the native trainer multiplies with, is the first.
var (
	trainKernels = []microKernel{{name: "go", rows: 6, cols: 16, run: gemm6x16ColsGo, runRows: gemm6x16RowsGo}}
	trainKernel  = trainKernels[0]
)

// gemm6x16ColsGo is the 6×16 micro-kernel in plain Go, A read as columns.
func gemm6x16ColsGo(k int, a []float32, lda int, b, c []float32, ldc int) {
	var acc [6][16]float32
	b = b[:k*16]
	for l := range k {
		bl := (*[16]float32)(b[l*16 : l*16+16])
		for r, av := range a[l*lda : l*lda+6] {
			row := &acc[r]
			for j, bv := range bl {
				row[j] += av * bv
			}
		}
	}
	for r := range acc {
		cr := c[r*ldc : r*ldc+16]
		for j, v := range acc[r] {
			cr[j] += v
		}
	}
}

// gemm6x16RowsGo is the 6×16 micro-kernel in plain Go, A read as rows: the
// decoder's gemm6x16Go.
func gemm6x16RowsGo(k int, a []float32, lda int, b, c []float32, ldc int) {
	gemm6x16Go(b, a, lda, k, c, ldc)
}

const (
	gemmKC      = 256 // depth of a block of k kept in cache across micro-kernels
	gemmJobRows = 96  // rows of C in one parallel job (rounded to the kernel's)
	// gemmJobs is the least number of parallel jobs a product is split
	// into: by rows first, as each job packs its rows of A once for all
	// its columns, and by columns when there are few rows.
	gemmJobs = 8
	// gemmMaxRows and gemmMaxCols bound the micro-kernels' blocks, for
	// scratch tiles on the stack.
	gemmMaxRows = 16
	gemmMaxCols = 32
)

// gemmScratch holds the packed last rows of A and an edge tile of C of
// running jobs.
var gemmScratch = sync.Pool{New: func() any {
	s := make([]float32, gemmMaxRows*gemmKC+gemmMaxRows*gemmMaxCols)
	return &s
}}

// packedMatrix is a right-hand operand B [k, n] laid out for a micro-kernel
// of width w: panels of w columns, [⌈n/w⌉][stride][w] with stride = k
// (more in a view of some of B's rows), zero past column n.
type packedMatrix struct {
	data            []float32
	k, n, w, stride int
}

func (p *packedMatrix) panels() int { return (p.n + p.w - 1) / p.w }

// resize makes p a [k, n] matrix in panels of trainKernel's width, reusing
// its buffer when it is large enough.
func (p *packedMatrix) resize(k, n int) {
	p.k, p.n, p.w, p.stride = k, n, trainKernel.cols, k
	grow(&p.data, p.panels()*k*p.w)
}

// rows is a view of rows [k0, k1) of p, sharing its data.
func (p *packedMatrix) rows(k0, k1 int) packedMatrix {
	v := *p
	v.data, v.k = p.data[k0*p.w:], k1-k0
	return v
}

// cols is a view of p's first n columns, sharing its data.
func (p *packedMatrix) cols(n int) packedMatrix {
	v := *p
	v.n = n
	return v
}

// packRows packs B [k, n] read in rows: B[i][j] = b[i·ldb + j].
func (p *packedMatrix) packRows(pool *cpuPool, b []float32, k, n, ldb int) {
	p.resize(k, n)
	w := p.w
	pool.run(p.panels(), max(1, (1<<14)/(k*w)), func(lo, hi int) {
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

// packCols packs B = Wᵀ [k, n] for W [n, k] read in rows ldw apart:
// B[i][j] = wt[j·ldw + i].
func (p *packedMatrix) packCols(pool *cpuPool, wt []float32, n, k, ldw int) {
	p.resize(k, n)
	w := p.w
	pool.run(p.panels(), max(1, (1<<14)/(k*w)), func(lo, hi int) {
		for q := lo; q < hi; q++ {
			j0 := q * w
			cols := min(w, n-j0)
			dst := p.data[q*k*w : (q+1)*k*w]
			if cols < w {
				clear(dst)
			}
			for j := range cols {
				src := wt[(j0+j)*ldw : (j0+j)*ldw+k]
				for i, v := range src {
					dst[i*w+j] = v
				}
			}
		}
	})
}

// leftOperand is the left-hand operand A [m, k] of gemm: A[i][l] =
// data[i·ld + l], or data[l·ld + i] when trans.
type leftOperand struct {
	data  []float32
	ld    int
	trans bool
}

// packBlock packs rows [i0, i0+rows) and columns [k0, k0+kl) of A into
// micro-panels of mr rows, [⌈rows/mr⌉][kl][mr], zero past the last row:
// the layout of microKernel.run.
func (a leftOperand) packBlock(dst []float32, i0, rows, k0, kl, mr int) {
	for ib := 0; ib < rows; ib += mr {
		r := min(mr, rows-ib)
		d := dst[ib*kl : ib*kl+kl*mr]
		if r < mr {
			clear(d)
		}
		if a.trans {
			for l := range kl {
				at := (k0+l)*a.ld + i0 + ib
				copy(d[l*mr:l*mr+r], a.data[at:at+r])
			}
			continue
		}
		for rr := range r {
			at := (i0+ib+rr)*a.ld + k0
			src := a.data[at : at+kl]
			dr := d[rr:]
			for l, v := range src {
				dr[l*mr] = v
			}
		}
	}
}

// gemm computes C (+)= A·B for A [m, k], B packed [k, n] and C [m, n] in rows
// ldc apart; with add it accumulates into C. The work is split into tiles
// of C, each computed whole by one goroutine in a fixed order, so the
// result does not depend on the scheduling. A nil pool runs it all in the
// caller.
func gemm(pool *cpuPool, c []float32, ldc int, a leftOperand, m int, b *packedMatrix, add bool) {
	k, n := b.k, b.n
	if m == 0 || n == 0 {
		return
	}
	kern := trainKernel
	mr, nr := kern.rows, kern.cols
	jobRows := max(1, gemmJobRows/mr) * mr
	rowJobs := (m + jobRows - 1) / jobRows
	colJobs := min(b.panels(), (gemmJobs+rowJobs-1)/rowJobs)
	jobPanels := (b.panels() + colJobs - 1) / colJobs
	colJobs = (b.panels() + jobPanels - 1) / jobPanels
	work := func(lo, hi int) {
		buf := gemmScratch.Get().(*[]float32)
		defer gemmScratch.Put(buf)
		tile := (*buf)[gemmMaxRows*gemmKC:]
		for job := lo; job < hi; job++ {
			r0 := job / colJobs * jobRows
			rows := min(jobRows, m-r0)
			p0 := job % colJobs * jobPanels
			p1 := min(p0+jobPanels, b.panels())
			if !add {
				for r := r0; r < r0+rows; r++ {
					clear(c[r*ldc+p0*nr : r*ldc+min(p1*nr, n)])
				}
			}
			if k == 0 {
				continue
			}
			for k0 := 0; k0 < k; k0 += gemmKC {
				kl := min(gemmKC, k-k0)
				// Whole blocks of mr rows are read in place; the last rows,
				// if fewer, are packed (zero-padded) into a micro-panel.
				full := rows / mr * mr
				var edge []float32
				if full < rows {
					edge = (*buf)[:mr*kl]
					a.packBlock(edge, r0+full, rows-full, k0, kl, mr)
				}
				for q := p0; q < p1; q++ {
					panel := b.data[(q*b.stride+k0)*nr : (q*b.stride+k0+kl)*nr]
					j0 := q * nr
					cols := min(nr, n-j0)
					for ib := 0; ib < rows; ib += mr {
						run, micro, lda := kern.run, edge, mr
						switch {
						case ib == full:
						case a.trans:
							micro, lda = a.data[k0*a.ld+r0+ib:], a.ld
						default:
							run, micro, lda = kern.runRows, a.data[(r0+ib)*a.ld+k0:], a.ld
						}
						if ib < full && cols == nr {
							run(kl, micro, lda, panel, c[(r0+ib)*ldc+j0:], ldc)
							continue
						}
						// An edge block: into a tile, keeping what is in C.
						r := min(mr, rows-ib)
						t := tile[:mr*nr]
						clear(t)
						run(kl, micro, lda, panel, t, nr)
						for rr := range r {
							cr := c[(r0+ib+rr)*ldc+j0 : (r0+ib+rr)*ldc+j0+cols]
							for j, v := range t[rr*nr : rr*nr+cols] {
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
