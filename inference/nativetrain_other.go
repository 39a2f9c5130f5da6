//go:build !amd64 || purego

package inference

// expAffine sets dst[i] = e^(a·src[i] + b), as expf, and returns Σ dst;
// dst may be src.
func expAffine(dst, src []float32, a, b float32) float32 { return expAffineGo(dst, src, a, b) }
