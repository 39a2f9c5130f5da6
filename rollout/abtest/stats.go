package abtest

import (
	"math"
	"slices"
)

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

// studentTQuantile returns t with P(T ≤ t) = p: Newton's method on
// studentTCDF with the t density as slope, kept inside a bracket that
// bisection narrows whenever a Newton step would leave it (a few CDF
// evaluations instead of bisection's hundreds: the analysis runs it at
// every look).
func studentTQuantile(p, df float64) float64 {
	lo, hi := -1e3, 1e3
	lg1, _ := math.Lgamma((df + 1) / 2)
	lg2, _ := math.Lgamma(df / 2)
	logNorm := lg1 - lg2 - 0.5*math.Log(df*math.Pi)
	// Start from the Cornish–Fisher expansion around the normal quantile.
	z := math.Sqrt2 * math.Erfinv(2*p-1)
	t := z + (z*z*z+z)/(4*df) + (5*z*z*z*z*z+16*z*z*z+3*z)/(96*df*df)
	if !(t > lo && t < hi) {
		t = 0
	}
	for range 200 {
		f := studentTCDF(t, df) - p
		if f < 0 {
			lo = t
		} else {
			hi = t
		}
		pdf := math.Exp(logNorm - (df+1)/2*math.Log1p(t*t/df))
		next := t - f/pdf
		if !(next > lo && next < hi) || pdf == 0 {
			next = (lo + hi) / 2
		}
		if math.Abs(next-t) <= 1e-13*math.Max(1, math.Abs(t)) || hi-lo <= 1e-13 {
			return next
		}
		t = next
	}
	return t
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
	// step folds the next coefficient aa into c and d (Lentz's method) and
	// returns the factor by which it moves h.
	step := func(aa float64) float64 {
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		return d * c
	}
	for m := 1; m <= 500; m++ {
		fm := float64(m)
		h *= step(fm * (b - fm) * x / ((qam + 2*fm) * (a + 2*fm)))
		del := step(-(a + fm) * (qab + fm) * x / ((a + 2*fm) * (qap + 2*fm)))
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

// Ratio is the sufficient statistic of a ratio metric ΣY/ΣX over players,
// the unit of randomisation (gbstats' RatioStatistic): player i adds a
// denominator x_i (ended sessions, exchanges), a numerator y_i (turns,
// errors, refusals) and a pre-exposure covariate c_i for CUPED (0 when the
// player has none). Sessions of one player are correlated; players are
// not, so every variance is taken over players. The sums make it
// updatable in O(1) when a player's totals change (Remove the old, Add the
// new) and JSON-serialisable.
type Ratio struct {
	N  int     `json:"n"`
	X  float64 `json:"x"`
	Y  float64 `json:"y"`
	XX float64 `json:"xx"`
	YY float64 `json:"yy"`
	XY float64 `json:"xy"`
	C  float64 `json:"c"`
	CC float64 `json:"cc"`
	CX float64 `json:"cx"`
	CY float64 `json:"cy"`
}

// Add counts a player with denominator x, numerator y and covariate c; a
// player with x = 0 has no observation of the metric and is not counted.
func (r *Ratio) Add(x, y, c float64) { r.add(x, y, c, 1) }

// Remove takes back an Add of the same values.
func (r *Ratio) Remove(x, y, c float64) { r.add(x, y, c, -1) }

func (r *Ratio) add(x, y, c, sign float64) {
	if x == 0 {
		return
	}
	r.N += int(sign)
	r.X += sign * x
	r.Y += sign * y
	r.XX += sign * x * x
	r.YY += sign * y * y
	r.XY += sign * x * y
	r.C += sign * c
	r.CC += sign * c * c
	r.CX += sign * c * x
	r.CY += sign * c * y
}

// Mean is ΣY/ΣX (0 before any observation).
func (r Ratio) Mean() float64 {
	if r.X == 0 {
		return 0
	}
	return r.Y / r.X
}

// cov is the sample covariance over players of two per-player quantities
// given their sums and the sum of their products.
func (r Ratio) cov(sa, sb, sab float64) float64 {
	n := float64(r.N)
	return (sab - sa*sb/n) / (n - 1)
}

// linear returns the sample variance of the player's linearised
// contribution l_i = (y_i − R·x_i)/x̄ (R = ΣY/ΣX) and its covariance with
// the covariate; Var(l)/n is the delta-method variance of ΣY/ΣX (Deng,
// Knoblich and Lu, "Applying the Delta Method in Metric Analytics", 2018):
//
//	Var(ΣY/ΣX) ≈ (s²_y − 2R·s_xy + R²·s²_x) / (n·x̄²).
func (r Ratio) linear() (vl, clc float64) {
	if r.N < 2 || r.X == 0 {
		return 0, 0
	}
	n, m := float64(r.N), r.Mean()
	xbar := r.X / n
	vl = (r.cov(r.Y, r.Y, r.YY) - 2*m*r.cov(r.X, r.Y, r.XY) + m*m*r.cov(r.X, r.X, r.XX)) / (xbar * xbar)
	clc = (r.cov(r.C, r.Y, r.CY) - m*r.cov(r.C, r.X, r.CX)) / xbar
	return math.Max(vl, 0), clc
}

// Var is the delta-method variance of Mean over players; 0 with fewer
// than two players.
func (r Ratio) Var() float64 {
	vl, _ := r.linear()
	if r.N < 2 {
		return 0
	}
	return vl / float64(r.N)
}

// covariateVar is the sample variance of the covariate over players.
func (r Ratio) covariateVar() float64 {
	if r.N < 2 {
		return 0
	}
	return math.Max(r.cov(r.C, r.C, r.CC), 0)
}

// CUPEDTheta is the CUPED coefficient θ = Cov(l, c)/Var(c) (Deng, Xu,
// Kohavi and Walker, 2013) of the linearised metric l on the pre-exposure
// covariate c, pooled over both arms (within-arm sums of cross-products
// over within-arm sums of squares); 0 when the covariate does not vary.
func CUPEDTheta(a, b Ratio) float64 {
	var num, den float64
	for _, r := range []Ratio{a, b} {
		if r.N < 2 {
			continue
		}
		_, clc := r.linear()
		num += float64(r.N-1) * clc
		den += float64(r.N-1) * r.covariateVar()
	}
	if den <= 0 {
		return 0
	}
	return num / den
}

// adjusted is the CUPED-adjusted mean and its variance: the mean minus
// θ·(c̄ − pooledC) and Var(l − θc)/n.
func (r Ratio) adjusted(theta, pooledC float64) (mean, variance float64) {
	if r.N < 2 {
		return r.Mean(), 0
	}
	vl, clc := r.linear()
	n := float64(r.N)
	mean = r.Mean() - theta*(r.C/n-pooledC)
	variance = math.Max(vl-2*theta*clc+theta*theta*r.covariateVar(), 0) / n
	return mean, variance
}

// SRM is the sample-ratio-mismatch check (Kohavi et al., "Trustworthy
// Online Controlled Experiments", ch. 21) of the distinct players per arm
// against the configured canary share: Pearson's χ² with one degree of
// freedom, and, because it is checked at every look, an always-valid
// p-value from a beta-binomial mixture likelihood ratio (the two-arm case
// of Lindon and Malek, "Anytime-Valid Inference for Multinomial Count
// Data", 2022). It fails when the χ² p is below SRMAlpha and the
// always-valid one below SRMSequentialAlpha: a χ² at 0.001 re-checked every
// 30 s fails an A/A experiment a few times in a hundred, and the mixture
// bounds that by 0.01 however often it is read, while costing little power
// (an always-valid test at 0.001 alone would miss small mismatches).
type SRM struct {
	Stable int `json:"stable_players"`
	Canary int `json:"canary_players"`
	// Expected is the configured canary share of the experiment's players;
	// Checked is false when it is unknown or no player has come.
	Expected float64 `json:"expected_canary_share"`
	Checked  bool    `json:"checked"`
	ChiSq    float64 `json:"chi_sq"`
	P        float64 `json:"p"`
	// SequentialP is the always-valid p-value, 1 / the mixture ratio.
	SequentialP float64 `json:"sequential_p"`
	Failed      bool    `json:"failed"`
}

// SRMAlpha and SRMSequentialAlpha are the levels of the χ² and of the
// always-valid p-value at which a sample ratio mismatch fails.
const (
	SRMAlpha           = 0.001
	SRMSequentialAlpha = 0.01
)

// srmConcentrations are the beta priors' a + b around the expected share,
// mixed with equal weights (a mixture of test martingales is one): a
// prior SD of the share of √(π(1−π)/(a+b)), from gross mismatches on few
// players to a few parts in a thousand on millions.
var srmConcentrations = []float64{1e1, 1e2, 1e3, 1e4, 1e5}

// SRMTest compares stable and canary player counts with the expected
// canary share (in (0, 1)).
func SRMTest(stable, canary int, canaryShare float64) SRM {
	s := SRM{Stable: stable, Canary: canary, Expected: canaryShare, P: 1, SequentialP: 1}
	n := float64(stable + canary)
	if canaryShare <= 0 || canaryShare >= 1 || n == 0 {
		return s
	}
	nc, ns := float64(canary), float64(stable)
	ec, es := n*canaryShare, n*(1-canaryShare)
	s.Checked = true
	s.ChiSq = (nc-ec)*(nc-ec)/ec + (ns-es)*(ns-es)/es
	s.P = math.Erfc(math.Sqrt(s.ChiSq / 2)) // P(χ²₁ > x) = P(|Z| > √x)
	// Mixture ratio: ∫ θ^c (1−θ)^s dBeta(θ; a, b) / (π^c (1−π)^s),
	// averaged over the concentrations.
	null := nc*math.Log(canaryShare) + ns*math.Log1p(-canaryShare)
	var bf float64
	for _, k := range srmConcentrations {
		a, b := k*canaryShare, k*(1-canaryShare)
		bf += math.Exp(logBeta(a+nc, b+ns)-logBeta(a, b)-null) / float64(len(srmConcentrations))
	}
	s.SequentialP = math.Min(1, 1/bf)
	s.Failed = s.P < SRMAlpha && s.SequentialP < SRMSequentialAlpha
	return s
}

func logBeta(a, b float64) float64 {
	la, _ := math.Lgamma(a)
	lb, _ := math.Lgamma(b)
	lab, _ := math.Lgamma(a + b)
	return la + lb - lab
}

// Sequential is the running state of one always-valid mixture sequential
// probability ratio test (mSPRT) of H0: no difference, and its verdict. The
// analysis owner stores it between looks (State), so a restart or a late
// event never rewrites a reported result: at each look with difference d
// and variance v,
//
//	Λ = √(v/(v+τ²)) · exp(τ²·d² / (2·v·(v+τ²)))
//
// the always-valid p-value is the running minimum of min(1, 1/Λ) and the
// always-valid (1−α) CI the running intersection of
// d ± √(v(v+τ²)/τ² · (2·ln(1/α) + ln((v+τ²)/v))). τ, the mixing standard
// deviation, is fixed at the first look and kept (Johari, Pekelis and
// Walsh, "Always Valid Inference", 2017).
type Sequential struct {
	Looks int `json:"looks"`
	// Tau is the mixing standard deviation, in metric units, frozen at the
	// first look.
	Tau       float64 `json:"tau"`
	LogLambda float64 `json:"log_lambda"`
	P         float64 `json:"p"`
	Lo        float64 `json:"lo"`
	Hi        float64 `json:"hi"`
	Alpha     float64 `json:"alpha"`
	// Empty is true once the running intersection has become empty (the
	// looks disagree, such as when the effect drifts): the test then never
	// says Better.
	Empty bool `json:"empty"`
	// Better (Worse) is true when P ≤ Alpha and the CI lies above (below) 0.
	Better bool `json:"better"`
	Worse  bool `json:"worse"`
}

// Look folds one look at difference d with variance v into s. tau is used
// only at the first look, which freezes it; a look without variance or
// before τ is known is not taken.
func (s Sequential) Look(d, v, tau, alpha float64) Sequential {
	if s.Looks == 0 {
		if v <= 0 || tau <= 0 {
			return s
		}
		s = Sequential{Tau: tau, P: 1, Lo: math.Inf(-1), Hi: math.Inf(1), Alpha: alpha}
	}
	if v <= 0 {
		return s
	}
	t2 := s.Tau * s.Tau
	s.Looks++
	s.LogLambda = msprtLogLambda(d, v, t2)
	s.P = math.Min(s.P, math.Exp(-s.LogLambda))
	hw := msprtHalfWidth(v, t2, s.Alpha)
	s.Lo, s.Hi = math.Max(s.Lo, d-hw), math.Min(s.Hi, d+hw)
	s.Empty = s.Empty || s.Lo > s.Hi
	s.Better = s.P <= s.Alpha && s.Lo > 0 && !s.Empty
	s.Worse = s.P <= s.Alpha && s.Hi < 0
	return s
}
