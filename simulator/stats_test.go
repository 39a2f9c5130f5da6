package simulator

import (
	"math"
	"slices"
)

// meanVar returns the mean and the unbiased variance of xs.
func meanVar(xs []float64) (float64, float64) {
	m := 0.0
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	v := 0.0
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	return m, v / float64(len(xs)-1)
}

// welch returns Welch's t statistic of mean(a) − mean(b), its degrees of
// freedom and the two-sided p-value from Student's t distribution.
func welch(a, b []float64) (t, df, p float64) {
	ma, va := meanVar(a)
	mb, vb := meanVar(b)
	sa, sb := va/float64(len(a)), vb/float64(len(b))
	t = (ma - mb) / math.Sqrt(sa+sb)
	df = (sa + sb) * (sa + sb) / (sa*sa/float64(len(a)-1) + sb*sb/float64(len(b)-1))
	p = regIncBeta(df/2, 0.5, df/(df+t*t))
	return t, df, p
}

// mannWhitney returns the U statistic of a against b and the two-sided
// p-value of its normal approximation with tie correction.
func mannWhitney(a, b []float64) (u, z, p float64) {
	type obs struct {
		v    float64
		inA  bool
		rank float64
	}
	all := make([]obs, 0, len(a)+len(b))
	for _, x := range a {
		all = append(all, obs{v: x, inA: true})
	}
	for _, x := range b {
		all = append(all, obs{v: x})
	}
	slices.SortFunc(all, func(x, y obs) int { return cmpFloat(x.v, y.v) })
	n := float64(len(all))
	tieSum := 0.0
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		r := float64(i+j+1) / 2 // mean of ranks i+1..j
		for k := i; k < j; k++ {
			all[k].rank = r
		}
		t := float64(j - i)
		tieSum += t*t*t - t
		i = j
	}
	ra := 0.0
	for _, o := range all {
		if o.inA {
			ra += o.rank
		}
	}
	na, nb := float64(len(a)), float64(len(b))
	u = ra - na*(na+1)/2
	mu := na * nb / 2
	sigma := math.Sqrt(na * nb / 12 * ((n + 1) - tieSum/(n*(n-1))))
	z = (u - mu) / sigma
	p = math.Erfc(math.Abs(z) / math.Sqrt2)
	return u, z, p
}

func cmpFloat(x, y float64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// regIncBeta is the regularized incomplete beta function I_x(a, b), by the
// continued fraction of Numerical Recipes (betacf).
func regIncBeta(a, b, x float64) float64 {
	if x <= 0 {
		return 0
	}
	if x >= 1 {
		return 1
	}
	la, _ := math.Lgamma(a + b)
	lb, _ := math.Lgamma(a)
	lc, _ := math.Lgamma(b)
	front := math.Exp(la - lb - lc + a*math.Log(x) + b*math.Log(1-x))
	if x > (a+1)/(a+b+2) {
		return 1 - front*betaCF(b, a, 1-x)/b
	}
	return front * betaCF(a, b, x) / a
}

func betaCF(a, b, x float64) float64 {
	const eps, tiny = 1e-15, 1e-300
	c, d := 1.0, 1-(a+b)*x/(a+1)
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= 300; m++ {
		fm := float64(m)
		aa := fm * (b - fm) * x / ((a + 2*fm - 1) * (a + 2*fm))
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
		aa = -(a + fm) * (a + b + fm) * x / ((a + 2*fm) * (a + 2*fm + 1))
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
		if math.Abs(del-1) < eps {
			break
		}
	}
	return h
}
