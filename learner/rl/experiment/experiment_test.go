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
		t.Skip("trains two models and nine variants")
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
