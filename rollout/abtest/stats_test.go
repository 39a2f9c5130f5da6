package abtest

import (
	"math"
	"testing"
)

// TestPercentile checks the interpolated definition (numpy's default) at
// the points the benches report, on 1..10 given out of order.
func TestPercentile(t *testing.T) {
	for _, c := range []struct {
		q, want float64
	}{{0, 1}, {10, 1.9}, {50, 5.5}, {95, 9.55}, {99, 9.91}, {100, 10}} {
		xs := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
		if got := Percentile(xs, c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Percentile(1..10, %v) = %v; want %v", c.q, got, c.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil, 50) = %v; want 0", got)
	}
	if got := Percentile([]float64{7}, 99); got != 7 {
		t.Errorf("Percentile([7], 99) = %v; want 7", got)
	}
}
