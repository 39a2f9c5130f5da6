package rl

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/parleyhq/parley/inference"
)

// TestNativeUpdateMatchesGoMLX runs the same RL updates on two copies of a
// tiny model, one with the native trainer and one with GoMLX's graph: the
// losses and KL estimates agree, and every response token's log-prob moves
// the same way by about as much. Two minibatches per update and a large
// learning rate put later ratios away from 1, some beyond the clip.
func TestNativeUpdateMatchesGoMLX(t *testing.T) {
	samples := twoGroupSamples()
	for _, seqLevel := range []bool{false, true} {
		name := map[bool]string{false: "token ratio", true: "sequence ratio"}[seqLevel]
		t.Run(name, func(t *testing.T) {
			updaters := map[string]*Updater{}
			for _, kind := range []string{inference.TrainerNative, inference.TrainerGoMLX} {
				cfg := DefaultUpdateConfig()
				cfg.Train.LearningRate = 1e-2
				cfg.Beta = 0.1
				cfg.SequenceLevel = seqLevel
				cfg.MiniBatch = 2
				cfg.Trainer = kind
				u, err := NewUpdater(tinyModel(t, 3), cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(u.Close)
				updaters[kind] = u
			}
			nat, gom := updaters[inference.TrainerNative], updaters[inference.TrainerGoMLX]
			before, err := gom.LogProbs(samples)
			if err != nil {
				t.Fatal(err)
			}
			if nb, err := nat.LogProbs(samples); err != nil || !close2D(nb, before, 1e-5) {
				t.Fatalf("log-probs before training: native %v, gomlx %v (err %v)", nb, before, err)
			}
			rngN, rngG := rand.New(rand.NewPCG(1, 1)), rand.New(rand.NewPCG(1, 1))
			for k := range 3 {
				sn, err := nat.Update(context.Background(), samples, rngN)
				if err != nil {
					t.Fatal(err)
				}
				sg, err := gom.Update(context.Background(), samples, rngG)
				if err != nil {
					t.Fatal(err)
				}
				if !near(sn.Loss, sg.Loss, 2e-3) || !near(sn.KL, sg.KL, 2e-3) || sn.Tokens != sg.Tokens || sn.GradSteps != sg.GradSteps {
					t.Errorf("update %d: native %+v, gomlx %+v; want the same loss and KL", k, sn, sg)
				}
			}
			afterN, err := nat.LogProbs(samples)
			if err != nil {
				t.Fatal(err)
			}
			afterG, err := gom.LogProbs(samples)
			if err != nil {
				t.Fatal(err)
			}
			for i := range samples {
				for j := range before[i] {
					dn, dg := afterN[i][j]-before[i][j], afterG[i][j]-before[i][j]
					if (dn > 0) != (dg > 0) || math.Abs(float64(dn-dg)) > 0.1*math.Abs(float64(dg))+1e-3 {
						t.Errorf("sample %d token %d: log-prob moved %+.5f native, %+.5f gomlx", i, j, dn, dg)
					}
				}
			}
		})
	}
}

func TestNativeTrainerRefusedOnXLA(t *testing.T) {
	_, err := inference.ResolveTrainer(inference.TrainerNative, inference.BackendConfig{Name: "xla", PluginPath: "/x.so"})
	if err == nil {
		t.Error("native trainer accepted on the xla backend")
	}
	if got, err := inference.ResolveTrainer("", inference.BackendConfig{Name: "xla"}); got != inference.TrainerGoMLX || err != nil {
		t.Errorf("default trainer on xla = %q, %v; want gomlx", got, err)
	}
	cfg := DefaultUpdateConfig()
	cfg.Trainer = "torch"
	if cfg.Validate() == nil {
		t.Error("update config accepted trainer \"torch\"")
	}
}

// near reports whether a and b agree within tol, relative to the larger
// magnitude or absolute near 0.
func near(a, b, tol float64) bool {
	return math.Abs(a-b) <= tol*max(1, math.Abs(a), math.Abs(b))
}

func close2D(a, b [][]float32, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if !near(float64(a[i][j]), float64(b[i][j]), tol) {
				return false
			}
		}
	}
	return true
}
