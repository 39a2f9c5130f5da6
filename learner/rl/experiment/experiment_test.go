package experiment

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

func TestTinyExperimentWritesEveryTable(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two models and ten variants")
	}
	dir := t.TempDir()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	res, err := Run(context.Background(), Config{Profile: "tiny", Seeds: 1, OutDir: dir}, logger)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(res.Rows), len(Variants(TinyProfile())); got != want {
		t.Errorf("%d rows; want one per variant, %d", got, want)
	}
	for _, f := range []string{ResultsMarkdown, ResultsCSV, ResultsJSON, FigureAvgR, FigureAvgL} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s: %v (size %d); want a non-empty file", f, err, st.Size())
		}
	}
	for _, r := range res.Rows {
		if r.AvgL < 1 || r.AvgL > float64(TinyProfile().EvalDepth) || r.PPL <= 1 {
			t.Errorf("%s: Avg.L %g, PPL %g; want Avg.L in [1, L] and PPL > 1", r.Variant, r.AvgL, r.PPL)
		}
		if r.Variant != "SFT only" && (r.NodesPerTree < 1 || r.SecPerStep <= 0) {
			t.Errorf("%s: %g nodes per tree, %g s/step; want positive", r.Variant, r.NodesPerTree, r.SecPerStep)
		}
	}
	a := res.Acceptance
	if a == nil || a.Referee == nil || len(a.RLvsSFT) == 0 || a.Fidelity == nil || a.ATGRPOvsGRPO == nil {
		t.Fatalf("acceptance %+v; want the referee gate, every method against SFT, the fidelity and AT-GRPO − GRPO", a)
	}
	if a.Referee.Groups != TinyProfile().Referee.Groups || a.Referee.Dialogues == 0 {
		t.Errorf("referee gate %+v; want %d groups and its dialogues", a.Referee, TinyProfile().Referee.Groups)
	}
	for name, m := range a.RLvsSFT {
		if m.Seeds != 1 || m.Dialogues != TinyProfile().EvalPrompts || m.PPLRatio <= 0 {
			t.Errorf("%s against SFT: %+v; want one seed of %d paired dialogues and a PPL ratio", name, m, TinyProfile().EvalPrompts)
		}
	}
	back, err := LoadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Rows) != len(res.Rows) || back.Rows[1].AvgR != res.Rows[1].AvgR {
		t.Errorf("LoadResults: %d rows (Avg.r %g); want %d (Avg.r %g)", len(back.Rows), back.Rows[1].AvgR, len(res.Rows), res.Rows[1].AvgR)
	}
	md, _ := os.ReadFile(filepath.Join(dir, ResultsMarkdown))
	t.Logf("tiny experiment in %.0f s:\n%s", res.Seconds, md)
}

// TestProfilesTrainAndEvaluateAlike checks every named profile: valid, RL
// at the evaluation's L and the update scoring at the sampling temperature.
func TestProfilesTrainAndEvaluateAlike(t *testing.T) {
	for _, name := range Profiles() {
		p, err := ProfileByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	p := MediumProfile()
	if p.RL.Tree.W != 8 || p.RL.Tree.Depth != 6 || p.RL.Batch != 8 || p.RL.Steps < 30 || p.EvalPrompts < 400 {
		t.Errorf("medium: W %d, L %d, %d trees per step, %d steps, %d openings; want 8, 6, 8, ≥ 30, ≥ 400",
			p.RL.Tree.W, p.RL.Tree.Depth, p.RL.Batch, p.RL.Steps, p.EvalPrompts)
	}
	bad := SmallProfile()
	bad.EvalDepth = 4
	if err := bad.Validate(); err == nil {
		t.Error("a profile training at L=6 and evaluating at L=4 passed Validate")
	}
}
