package bench

import (
	"context"
	"testing"
)

// TestRunABSmall runs a few seeds of every scenario: the harness works and
// the rates are shares.
func TestRunABSmall(t *testing.T) {
	cfg := DefaultABConfig()
	cfg.Seeds = 2
	rep, err := RunAB(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep)
	for name, v := range map[string]float64{"aa": rep.AAFalsePositiveRate, "coverage": rep.CICoverage, "power": rep.Power,
		"false rollback": rep.GuardrailFalseRollbackRate, "detection": rep.GuardrailDetectionRate} {
		if v < 0 || v > 1 {
			t.Errorf("%s = %v; want a share in [0, 1]", name, v)
		}
	}
	if rep.CUPEDVarianceRatio < 0.4 || rep.CUPEDVarianceRatio > 0.9 {
		t.Errorf("CUPED variance ratio = %v; want about 0.64", rep.CUPEDVarianceRatio)
	}
}
