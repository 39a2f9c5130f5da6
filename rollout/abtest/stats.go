package abtest

import (
	"math"
	"slices"
)

// moments accumulates a sample's count, mean and sum of squared deviations
// (Welford), so that running estimates cost O(1) per observation.
type moments struct {
	n    int
	mean float64
	m2   float64
}

func (m *moments) add(x float64) {
	m.n++
	d := x - m.mean
	m.mean += d / float64(m.n)
	m.m2 += d * (x - m.mean)
}

// variance is the unbiased sample variance (n−1 in the denominator).
func (m moments) variance() float64 {
	if m.n < 2 {
		return 0
	}
	return m.m2 / float64(m.n-1)
}

// studentTCDF is P(T ≤ t) for Student's t with df degrees of freedom
// (df may be fractional, as Welch's is): with x = df/(df+t²),
// P(|T| > |t|) = I_x(df/2, 1/2).
func studentTCDF(t, df float64) float64 {
	tail := 0.5 * regIncBeta(df/2, 0.5, df/(df+t*t))
	if t > 0 {
		return 1 - tail
	}
	return tail
}

// studentTQuantile returns t with P(T ≤ t) = p, by bisection on studentTCDF.
func studentTQuantile(p, df float64) float64 {
	lo, hi := -1e3, 1e3
	for range 200 {
		mid := (lo + hi) / 2
		if studentTCDF(mid, df) < p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// regIncBeta is the regularized incomplete beta function I_x(a, b), by the
// continued fraction of Numerical Recipes (§6.4), using the symmetry
// I_x(a,b) = 1 − I_{1−x}(b,a) where the fraction converges slowly.
func regIncBeta(a, b, x float64) float64 {
	switch {
	case x <= 0:
		return 0
	case x >= 1:
		return 1
	}
	la, _ := math.Lgamma(a)
	lb, _ := math.Lgamma(b)
	lab, _ := math.Lgamma(a + b)
	front := math.Exp(lab - la - lb + a*math.Log(x) + b*math.Log1p(-x))
	if x < (a+1)/(a+b+2) {
		return front * betaCF(a, b, x) / a
	}
	return 1 - front*betaCF(b, a, 1-x)/b
}

func betaCF(a, b, x float64) float64 {
	const tiny = 1e-300
	qab, qap, qam := a+b, a+1, a-1
	c, d := 1.0, 1-qab*x/qap
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= 500; m++ {
		fm := float64(m)
		aa := fm * (b - fm) * x / ((qam + 2*fm) * (a + 2*fm))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		h *= d * c
		aa = -(a + fm) * (qab + fm) * x / ((a + 2*fm) * (qap + 2*fm))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < 1e-15 {
			break
		}
	}
	return h
}

// Percentile is the q-th percentile (0–100) of xs, interpolated: linear
// between the closest ranks (numpy's default, Hyndman–Fan type 7), so the
// median of 1..10 is 5.5. It is Parley's one percentile definition, used by
// the A/B guardrails and every bench. xs is sorted in place; an empty sample
// gives 0.
func Percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	h := (float64(len(xs)) - 1) * q / 100
	lo := math.Floor(h)
	i := int(lo)
	if i+1 >= len(xs) {
		return xs[len(xs)-1]
	}
	return xs[i] + (h-lo)*(xs[i+1]-xs[i])
}

// msprtLogLambda is the log of the mixture likelihood ratio of the mSPRT for
// H0: θ = 0, where θ is a difference in means estimated by diff with
// variance v, mixed over θ ~ N(0, τ²):
//
//	Λ = √(v / (v + τ²)) · exp(τ² · diff² / (2 · v · (v + τ²)))
//
// With v = 2σ²/n this is the two-sample statistic of Johari, Pekelis and
// Walsh, "Always Valid Inference" (2017), eq. (11). The log keeps a large
// effect finite.
func msprtLogLambda(diff, v, tau2 float64) float64 {
	return 0.5*math.Log(v/(v+tau2)) + tau2*diff*diff/(2*v*(v+tau2))
}

// msprtHalfWidth is the half-width of the always-valid (1−α) confidence
// interval at one look: the set of θ with Λ(diff − θ) < 1/α is
// diff ± √(v(v+τ²)/τ² · (2·ln(1/α) + ln((v+τ²)/v))).
func msprtHalfWidth(v, tau2, alpha float64) float64 {
	return math.Sqrt(v * (v + tau2) / tau2 * (2*math.Log(1/alpha) + math.Log((v+tau2)/v)))
}
