package learner

import (
	"errors"
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestMetricsByHand(t *testing.T) {
	texts := []string{"The cat sat.", "the CAT"}
	tests := []struct {
		name      string
		got, want float64
	}{
		{"PPL of 4 tokens at nll ln 2", Perplexity(4*math.Ln2, 4), 2},
		{"Dist-1", Distinct(texts, 1), 3.0 / 5},
		{"Dist-2 (no bigram across texts)", Distinct(texts, 2), 2.0 / 3},
		{"Dist-1 of nothing", Distinct(nil, 1), 0},
		{"average words", AvgWords([]string{"Hi, there!", "ok 🙂"}), 1.5},
		{"Avg.L", AvgL([]int{1, 2, 6}), 3},
		{"Avg.r", AvgR([][]float64{{0.5, 0.5}, {1}}), 1},
		{"log-loss", BinaryLogLoss([]float64{0.5, 0.9}, []bool{true, false}), (math.Ln2 - math.Log(0.1)) / 2},
		{"expected length, prior after the predictions", ExpectedLength([]float64{0.5}, []float64{0.9, 0.5}, 3), 1.75},
		{"expected length, last prior carried on", ExpectedLength(nil, []float64{0, 0.5}, 4), 2.75},
		{"expected length, certain end after 2", ExpectedLength([]float64{0, 1, 0}, nil, 10), 2},
		{"expected length, no prediction, no prior", ExpectedLength(nil, nil, 4), 4},
	}
	for _, tc := range tests {
		if !near(tc.got, tc.want) {
			t.Errorf("%s = %g; want %g", tc.name, tc.got, tc.want)
		}
	}
	if got := Perplexity(1, 0); !math.IsInf(got, 1) {
		t.Errorf("Perplexity with no tokens = %g; want +Inf", got)
	}
}

func TestPearson(t *testing.T) {
	tests := []struct {
		name string
		x, y []float64
		want float64
		err  error
	}{
		{"proportional", []float64{1, 2, 3}, []float64{2, 4, 6}, 1, nil},
		{"reversed", []float64{1, 2, 3}, []float64{3, 2, 1}, -1, nil},
		{"by hand", []float64{1, 2, 3, 4}, []float64{1, 3, 2, 4}, 0.8, nil},
		{"constant", []float64{1, 2, 3}, []float64{5, 5, 5}, 0, ErrUndefined},
		{"one pair", []float64{1}, []float64{1}, 0, ErrUndefined},
		{"lengths differ", []float64{1, 2}, []float64{1, 2, 3}, 0, ErrUndefined},
	}
	for _, tc := range tests {
		got, err := Pearson(tc.x, tc.y)
		if !errors.Is(err, tc.err) || (err == nil && !near(got, tc.want)) {
			t.Errorf("%s: Pearson = %g, %v; want %g, %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}
