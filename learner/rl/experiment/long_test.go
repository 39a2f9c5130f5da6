//go:build long

package experiment

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"strings"
	"testing"
)

var (
	flagProfile = flag.String("profile", "small", "experiment profile: paper, small or tiny")
	flagSeeds   = flag.Int("seeds", 3, "RL seeds per variant")
	flagOut     = flag.String("out", "", "output directory (default: a temporary one)")
	flagOnly    = flag.String("only", "", "comma-separated variant names to run (default: all)")
	flagTrainOn = flag.String("train-on", TrainOnUserAgent, "RL environment: user-agent or players")
)

// TestExperimentProfile runs a whole experiment profile and keeps its
// report:
//
//	go test -tags long -timeout 3h -run TestExperimentProfile ./learner/rl/experiment \
//	    -args -profile small -seeds 3 -out /tmp/parley-experiment
func TestExperimentProfile(t *testing.T) {
	out := *flagOut
	if out == "" {
		out = t.TempDir()
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var only []string
	if *flagOnly != "" {
		only = strings.Split(*flagOnly, ",")
	}
	res, err := Run(context.Background(), Config{Profile: *flagProfile, Seeds: *flagSeeds, OutDir: out, Only: only, TrainOn: *flagTrainOn}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s profile, %d seeds: %.0f s; report in %s\n%s", *flagProfile, *flagSeeds, res.Seconds, out, Markdown(res))
}

// TestATGRPORaisesAvgR trains AT-GRPO for a few steps of the tiny profile
// with three seeds against the same (fixed) user agent and checks that
// Avg.r on held-out openings with that user agent rose on average over the
// seeds. Evaluations before and after use the same sampling seeds, so they
// differ only by the trained weights:
//
//	go test -tags long -timeout 1h -run TestATGRPORaisesAvgR ./learner/rl/experiment -v
func TestATGRPORaisesAvgR(t *testing.T) { atgrpoRaisesAvgR(t, TrainOnUserAgent) }

// TestATGRPORaisesAvgRWithPlayers is the same with the ground-truth players
// as the RL environment (an oracle user agent): it checks the RL machinery
// apart from the user agent's fidelity.
func TestATGRPORaisesAvgRWithPlayers(t *testing.T) { atgrpoRaisesAvgR(t, TrainOnPlayers) }

func atgrpoRaisesAvgR(t *testing.T, trainOn string) {
	p := TinyProfile()
	p.Players, p.DialoguesPerPlayer, p.MaxTurns = 40, 4, 6
	p.SFTSteps, p.UserAgentSFTSteps = 150, 150
	p.RL.Steps, p.RL.Batch, p.RL.Workers = 12, 4, 4
	p.RL.Update.Train.LearningRate = 1e-3
	p.EvalPrompts, p.CurvePrompts, p.CurveEvery, p.EvalDepth = 32, 32, 4, 4
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	res, err := Run(context.Background(), Config{Profile: "tiny", Override: &p, Seeds: 3, OutDir: t.TempDir(), Only: []string{"AT-GRPO"}, TrainOn: trainOn}, logger)
	if err != nil {
		t.Fatal(err)
	}
	gain := 0.0
	for _, r := range res.Rows {
		first, last := r.Curve[0], r.Curve[len(r.Curve)-1]
		t.Logf("seed %d: Avg.r %.3f → %.3f, Avg.L %.2f → %.2f (user agent, α=1, %d held-out openings); curve %+v",
			r.Seed, first.AvgR, last.AvgR, first.AvgL, last.AvgL, p.CurvePrompts, r.Curve)
		gain += last.AvgR - first.AvgR
	}
	gain /= float64(len(res.Rows))
	for _, pr := range res.Probes {
		t.Logf("probe %-12s user agent p %.3f, players p %.3f", pr.Quality, pr.UserAgent, pr.Players)
	}
	if gain <= 0 {
		t.Errorf("mean Avg.r gain over %d seeds = %+.3f; want positive", len(res.Rows), gain)
	}
	t.Logf("mean Avg.r gain over %d seeds: %+.3f", len(res.Rows), gain)
}

// TestRewriteReport re-renders the report of a finished run from its
// results.json:
//
//	go test -tags long -run TestRewriteReport ./learner/rl/experiment -args -out DIR
func TestRewriteReport(t *testing.T) {
	if *flagOut == "" {
		t.Skip("no -out directory")
	}
	res, err := LoadResults(*flagOut)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteReport(*flagOut, res); err != nil {
		t.Fatal(err)
	}
}
