package simulator

import (
	"math"
	"slices"

	"gonum.org/v1/gonum/mathext"
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
	p = mathext.RegIncBeta(df/2, 0.5, df/(df+t*t))
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
