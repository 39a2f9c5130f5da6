//go:build long

package learner

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/parleyhq/parley/simulator"
)

// TestLongCycleOnBootstrap runs one AT-GRPO cycle with the product's
// defaults on the first-start models of `parley dev` (a bootstrap
// directory: registry/ and bootstrap/corpus.jsonl, as `make loop-promote`
// leaves in LOOP_DIR) and compares the candidate with its parent on 400
// held-out openings of ground-truth players and with the user agent,
// paired. It measures what a cycle does for the first-start NPC without
// the gateway and the A/B:
//
//	PARLEY_CYCLE_BOOT=var/loop-promote [PARLEY_CYCLE_STORE=DIR] [PARLEY_CYCLE_STEPS=20] \
//	  [PARLEY_CYCLE_LR=6e-4] [PARLEY_CYCLE_BETA=0.2] [PARLEY_CYCLE_SEED=1] \
//	  go test -tags long -run TestLongCycleOnBootstrap -timeout 60m -v ./learner/
func TestLongCycleOnBootstrap(t *testing.T) {
	boot := os.Getenv("PARLEY_CYCLE_BOOT")
	if boot == "" {
		t.Skip("PARLEY_CYCLE_BOOT names no bootstrap directory")
	}
	run := t.TempDir()
	reg := filepath.Join(run, "registry")
	if err := os.CopyFS(reg, os.DirFS(filepath.Join(boot, "registry"))); err != nil {
		t.Fatal(err)
	}
	// The sessions: a learner's store (PARLEY_CYCLE_STORE, e.g. a
	// loop-promote run's learner/sessions, the NPC's own sessions), or the
	// bootstrap corpus's dialogues with scripted NPCs.
	storeDir := filepath.Join(run, "store")
	if src := os.Getenv("PARLEY_CYCLE_STORE"); src != "" {
		if err := os.CopyFS(storeDir, os.DirFS(src)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := OpenStore(storeDir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.Len() == 0 {
		f, err := os.Open(filepath.Join(boot, "bootstrap", "corpus.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		ds, err := simulator.ReadCorpus(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Append(ds); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultCycleConfig()
	cfg.CurveEvery = 1 << 20 // the paired evaluations are what this run is for
	cfg.Players, cfg.PlayersSeed = simulator.DefaultPopulationConfig(), 1
	cfg.Players.Size = 500
	for _, o := range []struct {
		env string
		set func(float64)
	}{
		{"PARLEY_CYCLE_STEPS", func(v float64) { cfg.RL.Steps = int(v) }},
		{"PARLEY_CYCLE_LR", func(v float64) { cfg.RL.Update.Train.LearningRate = v }},
		{"PARLEY_CYCLE_BETA", func(v float64) { cfg.RL.Update.Beta = v }},
		{"PARLEY_CYCLE_SEED", func(v float64) { cfg.Seed = uint64(v) }},
	} {
		if s := os.Getenv(o.env); s != "" {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatalf("%s: %v", o.env, err)
			}
			o.set(v)
		}
	}
	c, err := NewCycle(cfg, st, reg, filepath.Join(run, "cycle"), slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res == nil || res.UADelta == nil || res.GTDelta == nil {
		t.Fatalf("the cycle evaluated nothing: %+v", res)
	}
	t.Logf("%d sessions; steps %d, lr %g, β %g, seed %d: with the user agent Δ Avg.L %+.3f [%+.3f, %+.3f], Δ Exp.L %+.3f [%+.3f, %+.3f] (%d dialogues)",
		st.Len(), cfg.RL.Steps, cfg.RL.Update.Train.LearningRate, cfg.RL.Update.Beta, cfg.Seed, res.UADelta.DeltaAvgL, res.UADelta.CILow, res.UADelta.CIHigh,
		res.UADelta.DeltaExpL, res.UADelta.ExpCILow, res.UADelta.ExpCIHigh, res.UADelta.Dialogues)
	t.Logf("with the players Δ Avg.L %+.3f [%+.3f, %+.3f], Δ Exp.L %+.3f [%+.3f, %+.3f] (%d dialogues, %d players); parent Avg.L %.3f, Exp.L %.3f",
		res.GTDelta.DeltaAvgL, res.GTDelta.CILow, res.GTDelta.CIHigh, res.GTDelta.DeltaExpL, res.GTDelta.ExpCILow, res.GTDelta.ExpCIHigh,
		res.GTDelta.Dialogues, res.GTDelta.Players, res.ParentEval.GTAvgL, res.ParentEval.GTExpL)
}
