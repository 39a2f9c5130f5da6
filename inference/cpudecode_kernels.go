package inference

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// KernelGemmFLOPS times the native trainer's packed gemm (the micro-kernel
// this CPU runs, on all cores) on an n×n by n×n float32 product and returns
// the best FLOP/s of reps runs and the micro-kernel's name: a Go-native
// estimate of the machine's matmul ceiling where OpenBLAS is not at hand.
func KernelGemmFLOPS(n, reps int) (float64, string) {
	pool := newCPUPool(runtime.GOMAXPROCS(0) - 1)
	defer pool.close()
	a, b, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	for i := range a {
		a[i], b[i] = float32(i%7)-3, float32(i%5)-2
	}
	var p packedMatrix
	p.packRows(pool, b, n, n, n)
	gemm(pool, c, n, leftOperand{data: a, ld: n}, n, &p, false) // warm up
	best := 0.0
	for range max(reps, 1) {
		start := time.Now()
		gemm(pool, c, n, leftOperand{data: a, ld: n}, n, &p, false)
		best = max(best, 2*float64(n)*float64(n)*float64(n)/time.Since(start).Seconds())
	}
	return best, trainKernel.name
}

// cpuPool is a fixed set of helper goroutines that share the chunks of one
// parallel loop at a time with the calling goroutine. Chunks are claimed
// from an atomic counter, so a helper that is slow to wake (other processes
// on the machine) costs nothing: the caller takes its chunks and never waits
// for a helper that has not started. Helpers park between jobs rather than
// spin: on a machine with more runnable threads than cores a spinning
// helper took the time slices its caller needed (batch-32 steps up to 2-3x
// slower in some runs with 200µs of polling, at load 12 on 2 cores).
type cpuPool struct {
	helpers int
	jobs    chan *cpuJob
	quit    chan struct{}
	wg      sync.WaitGroup
}

// cpuJob is one parallel loop over [0, n) in chunks of grain.
type cpuJob struct {
	n, grain int
	fn       func(lo, hi int)
	next     atomic.Int64 // start of the next unclaimed chunk
	left     atomic.Int64 // chunks not yet finished
	fin      chan struct{}
}

// newCPUPool starts helpers goroutines; with none, loops run in the caller.
func newCPUPool(helpers int) *cpuPool {
	helpers = max(helpers, 0)
	p := &cpuPool{helpers: helpers, jobs: make(chan *cpuJob, helpers), quit: make(chan struct{})}
	for range helpers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for {
				select {
				case j := <-p.jobs:
					j.work()
				case <-p.quit:
					return
				}
			}
		}()
	}
	return p
}

// close stops the helpers.
func (p *cpuPool) close() {
	close(p.quit)
	p.wg.Wait()
}

// run calls fn over [0, n) in chunks of grain, in parallel, and returns when
// every chunk is done. A nil pool runs fn in the caller.
func (p *cpuPool) run(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	chunks := (n + grain - 1) / grain
	if p == nil || chunks == 1 || p.helpers == 0 {
		fn(0, n)
		return
	}
	j := &cpuJob{n: n, grain: grain, fn: fn, fin: make(chan struct{})}
	j.left.Store(int64(chunks))
	for range min(chunks-1, p.helpers) {
		select {
		case p.jobs <- j:
		default: // helpers still busy with stale jobs: do it here
		}
	}
	j.work()
	<-j.fin
}

// work claims and runs chunks until none is left.
func (j *cpuJob) work() {
	for {
		lo := int(j.next.Add(int64(j.grain))) - j.grain
		if lo >= j.n {
			return
		}
		j.fn(lo, min(lo+j.grain, j.n))
		if j.left.Add(-1) == 0 {
			close(j.fin)
		}
	}
}

// cpuMatrix is a weight [out, in] in row layout, for dot products with
// few input rows, and, when out is a multiple of the panel width, also
// packed in panels of width outputs, [out/width][in][width], for kernels
// that broadcast each input and read whole panel rows: 32 wide where the
// CPU has the AVX-512 kernels (gemv32 for a few rows, the native trainer's
// 12×32 micro-kernel for blocks of twelve), else 16 wide for the AVX2
// 6×16 kernel (gemm6x16) that six rows or more keep busy.
//
// A matrix of a bfloat16 checkpoint may instead be held as bf16, the
// checkpoint's own rows, and multiplied by mulBF16; w and panels are then
// nil.
type cpuMatrix struct {
	w, panels      []float32
	bf16           []bf16Block
	in, out, width int
	wide           microKernel // the 12×32 micro-kernel when width is 32
}

// decodeWide lets the decoder use the 32-wide AVX-512 kernels where the
// CPU and build have them; tests turn it off to check the AVX2 path.
var decodeWide = true

// wideKernel returns the native trainer's micro-kernel for 32-wide panels
// (AVX-512 12×32) if this CPU and build have one and decodeWide allows it.
func wideKernel() (microKernel, bool) {
	for _, k := range trainKernels {
		if k.cols == 32 && decodeWide {
			return k, true
		}
	}
	return microKernel{}, false
}

// DecodeKernels names the instruction set of the CPU decoder's kernels on
// this machine and build: "avx512", "avx2" or "go".
func DecodeKernels() string {
	switch _, wide := wideKernel(); {
	case wide:
		return "avx512"
	case hasAVX2FMA:
		return "avx2"
	}
	return "go"
}

func newCPUMatrix(w []float32, out, in int) cpuMatrix {
	m := cpuMatrix{w: w, in: in, out: out}
	if k, ok := wideKernel(); ok && out%32 == 0 {
		m.width, m.wide = 32, k
	} else if out%16 == 0 {
		m.width = 16
	}
	if m.width == 0 {
		return m
	}
	pw := m.width
	m.panels = make([]float32, len(w))
	for o := range out {
		p, j := o/pw, o%pw
		for k := range in {
			m.panels[(p*in+k)*pw+j] = w[o*in+k]
		}
	}
	return m
}

// mulRange computes y[b, o] (+)= Σ_i x[b, i]·m[o, i] for b < n and o in
// [o0, o1), which must be multiples of the panel width when m has panels.
// 32-wide panels go through mulWide. With 16-wide panels and six rows or
// more, whole groups of six go through the panels and the last few rows
// with the five before them, into a scratch tile; fewer rows go through
// dot products.
func (m *cpuMatrix) mulRange(y, x []float32, n, o0, o1 int, add bool) {
	in, out := m.in, m.out
	if m.bf16 != nil {
		m.mulBF16(y, x, n, o0, o1, add)
		return
	}
	if m.width == 32 {
		m.mulWide(y, x, n, o0, o1, add)
		return
	}
	if m.panels == nil || n < 6 {
		matmulRows(y, x, m.w, n, in, out, o0, o1, add)
		return
	}
	rows := n / 6 * 6
	if !add {
		for b := range rows {
			clear(y[b*out+o0 : b*out+o1])
		}
	}
	var tile [6 * 16]float32
	for p := o0 / 16; p < o1/16; p++ {
		wp := m.panels[p*in*16 : (p+1)*in*16]
		for b := 0; b < rows; b += 6 {
			gemm6x16(wp, x[b*in:], in, in, y[b*out+p*16:], out)
		}
		if rows == n {
			continue
		}
		clear(tile[:])
		gemm6x16(wp, x[(n-6)*in:], in, in, tile[:], 16)
		for b := rows; b < n; b++ {
			yb := y[b*out+p*16 : b*out+p*16+16]
			tb := tile[(b-n+6)*16 : (b-n+7)*16]
			if !add {
				copy(yb, tb)
				continue
			}
			for i, v := range tb {
				yb[i] += v
			}
		}
	}
}

// mulWide is mulRange on 32-wide panels: a single row streams the panels
// once through gemv32; more rows go panel by panel, blocks of twelve
// through the 12×32 micro-kernel, of eight through gemm8x32Rows and the
// rest through gemv32 while the panel is in cache, so each weight is read
// from memory once per call.
func (m *cpuMatrix) mulWide(y, x []float32, n, o0, o1 int, add bool) {
	in, out := m.in, m.out
	if !add {
		for b := range n {
			clear(y[b*out+o0 : b*out+o1])
		}
	}
	p0, p1 := o0/32, o1/32
	if n == 1 {
		gemv32(m.panels[p0*in*32:p1*in*32], x[:in], in, p1-p0, y[o0:o1])
		return
	}
	for p := p0; p < p1; p++ {
		wp := m.panels[p*in*32 : (p+1)*in*32]
		for b := 0; b < n; {
			switch rest := n - b; {
			case rest >= 8 && (rest < m.wide.rows || rest >= 16 && rest < 20):
				// Eight rows where twelve would leave more of them to
				// gemv32 (16 = 8 + 8, not 12 + four single rows).
				gemm8x32Rows(in, x[b*in:], in, wp, y[b*out+p*32:], out)
				b += 8
			case rest >= m.wide.rows:
				m.wide.runRows(in, x[b*in:], in, wp, y[b*out+p*32:], out)
				b += m.wide.rows
			default:
				gemv32(wp, x[b*in:(b+1)*in], in, 1, y[b*out+p*32:b*out+p*32+32])
				b++
			}
		}
	}
}

// gemmRows32Go adds to c[r][0:32] the products Σ_l a[r·lda+l]·b[l][0:32]
// for r < rows, b a packed [k][32] panel.
func gemmRows32Go(rows, k int, a []float32, lda int, b, c []float32, ldc int) {
	for r := range rows {
		cr := c[r*ldc : r*ldc+32]
		for l, x := range a[r*lda : r*lda+k] {
			axpy(cr, x, b[l*32:l*32+32])
		}
	}
}

// gemv32Go is gemv32 in plain Go.
func gemv32Go(w, x []float32, in, panels int, y []float32) {
	for p := range panels {
		yp := y[p*32 : p*32+32]
		for k, a := range x[:in] {
			axpy(yp, a, w[(p*in+k)*32:(p*in+k)*32+32])
		}
	}
}

// gemm6x16Go is gemm6x16 in plain Go.
func gemm6x16Go(w, x []float32, xstride, in int, y []float32, ystride int) {
	for b := range 6 {
		yb := y[b*ystride : b*ystride+16]
		for k, a := range x[b*xstride : b*xstride+in] {
			axpy(yb, a, w[k*16:k*16+16])
		}
	}
}

// matmulRows computes y[b, o] (+)= Σ_i x[b, i]·w[o, i] for b < n and
// o in [o0, o1): x is [n, in], w is [out, in] (PyTorch's linear layout, rows
// read contiguously), y is [n, out]. With add it accumulates into y (a
// residual connection). The batch is processed in blocks for each group of
// four weight rows, so each weight is read from memory once per call
// whatever n is: that is what makes a larger decode batch nearly free.
func matmulRows(y, x, w []float32, n, in, out, o0, o1 int, add bool) {
	const bBlock = 32 // rows of x kept hot in cache across weight rows
	for b0 := 0; b0 < n; b0 += bBlock {
		b1 := min(b0+bBlock, n)
		o := o0
		for ; o+4 <= o1; o += 4 {
			w0 := w[o*in : o*in+in]
			w1 := w[(o+1)*in : (o+1)*in+in]
			w2 := w[(o+2)*in : (o+2)*in+in]
			w3 := w[(o+3)*in : (o+3)*in+in]
			b := b0
			for ; b+2 <= b1; b += 2 {
				s00, s01, s02, s03, s10, s11, s12, s13 := dot4x2(w0, w1, w2, w3, x[b*in:b*in+in], x[(b+1)*in:(b+1)*in+in])
				store4(y[b*out+o:b*out+o+4], s00, s01, s02, s03, add)
				store4(y[(b+1)*out+o:(b+1)*out+o+4], s10, s11, s12, s13, add)
			}
			if b < b1 {
				s0, s1, s2, s3 := dot4x1(w0, w1, w2, w3, x[b*in:b*in+in])
				store4(y[b*out+o:b*out+o+4], s0, s1, s2, s3, add)
			}
		}
		for ; o < o1; o++ {
			wo := w[o*in : o*in+in]
			for b := b0; b < b1; b++ {
				s := dot(wo, x[b*in:b*in+in])
				if add {
					y[b*out+o] += s
				} else {
					y[b*out+o] = s
				}
			}
		}
	}
}

func store4(y []float32, s0, s1, s2, s3 float32, add bool) {
	y = y[:4]
	if add {
		y[0] += s0
		y[1] += s1
		y[2] += s2
		y[3] += s3
		return
	}
	y[0], y[1], y[2], y[3] = s0, s1, s2, s3
}

// dot4x2Go returns the dot products of four weight rows with two inputs of
// the same length: eight independent accumulators keep the FP units busy.
func dot4x2Go(w0, w1, w2, w3, x0, x1 []float32) (s00, s01, s02, s03, s10, s11, s12, s13 float32) {
	n := len(x0)
	w0, w1, w2, w3, x1 = w0[:n], w1[:n], w2[:n], w3[:n], x1[:n]
	for i, a := range x0 {
		b := x1[i]
		v0, v1, v2, v3 := w0[i], w1[i], w2[i], w3[i]
		s00 += v0 * a
		s01 += v1 * a
		s02 += v2 * a
		s03 += v3 * a
		s10 += v0 * b
		s11 += v1 * b
		s12 += v2 * b
		s13 += v3 * b
	}
	return
}

// dot4x1Go is dot4x2Go for a single input.
func dot4x1Go(w0, w1, w2, w3, x []float32) (s0, s1, s2, s3 float32) {
	n := len(x)
	w0, w1, w2, w3 = w0[:n], w1[:n], w2[:n], w3[:n]
	for i, a := range x {
		s0 += w0[i] * a
		s1 += w1[i] * a
		s2 += w2[i] * a
		s3 += w3[i] * a
	}
	return
}

// dot returns Σ a[i]·b[i] with four accumulators.
func dot(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < n; i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// qkScoresGo sets scores[t] = q·k_t for t < len(scores), kt the keys in
// transposed tiles [⌈T/kvTile⌉][len(q)][kvTile] (keyAt): a whole tile per
// axpy32, the positions of a last partial tile one by one. The tiles of
// next, nil or the keys read next, at the same places are fetched into
// the cache meanwhile (axpy32Ahead).
func qkScoresGo(scores, q, kt, next []float32) {
	hd, T := len(q), len(scores)
	t0 := T / kvTile * kvTile
	for t := 0; t < t0; t += kvTile {
		axpy32Ahead(scores[t:t+kvTile], q, kt[t*hd:], kvTile, after(next, t*hd))
	}
	for t := t0; t < T; t++ {
		var s float32
		for i, x := range q {
			s += x * kt[t0*hd+i*kvTile+t-t0]
		}
		scores[t] = s
	}
}

// axpy32Go sets out[0:32] = Σ_d a[d]·b[d·stride : d·stride+32] over
// d < len(a).
func axpy32Go(out, a, b []float32, stride int) {
	out = out[:32]
	clear(out)
	for d, x := range a {
		axpy(out, x, b[d*stride:d*stride+32])
	}
}

// axpy does y += a·x.
func axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

// rmsNormRow writes x / √(mean(x²) + eps) · w to dst, as Model.rmsNorm.
func rmsNormRow(dst, x, w []float32, eps float32) {
	x, w = x[:len(dst)], w[:len(dst)]
	var ss float32
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / float32(math.Sqrt(float64(ss/float32(len(x))+eps)))
	for i, v := range x {
		dst[i] = v * inv * w[i]
	}
}

// expf is e^x in float32 within about one ulp, as Cephes' expf: x = k·ln2 +
// r with |r| ≤ ln2/2, e^r by a degree-7 polynomial, 2^k by the exponent
// bits. It takes about 5 ns where math.Exp takes 8, which shows at the rate
// softmax and SiLU call it.
func expf(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2Hi = 0.693359375
		ln2Lo = -2.12194440e-4
	)
	switch {
	case x != x || x > 88:
		return float32(math.Exp(float64(x)))
	case x < -87.33:
		return 0 // e^x is below the smallest normal float32
	}
	k := float32(math.Floor(float64(x*log2e + 0.5)))
	r := x - k*ln2Hi - k*ln2Lo
	p := ((((1.9875691500e-4*r+1.3981999507e-3)*r+8.3334519073e-3)*r+4.1665795894e-2)*r+1.6666665459e-1)*r + 5.0000001201e-1
	y := p*r*r + r + 1
	return y * math.Float32frombits(uint32(int32(k)+127)<<23)
}
