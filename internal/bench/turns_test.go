package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestRunTurnsTiny runs the conversations bench on a tiny model: every
// exchange is timed on both engines, the keeping engine copies most of
// its prompts from the turns before (the whole-prompt engine none), and the
// table has a row per player count.
func TestRunTurnsTiny(t *testing.T) {
	cfg := DefaultTurnsConfig()
	cfg.Model.VocabSize, cfg.Model.Dim, cfg.Model.Layers, cfg.Model.Heads, cfg.Model.FFNDim = 512, 32, 2, 2, 64
	cfg.Model.MaxSeq = 256
	cfg.Players, cfg.Turns, cfg.Think, cfg.Rounds, cfg.CardTokens = []int{1, 3}, 4, 0, 2, 60
	var out bytes.Buffer
	rep, err := RunTurns(context.Background(), cfg, &out)
	if err != nil {
		t.Fatalf("RunTurns: %v", err)
	}
	if len(rep.Points) != 2 || len(rep.Rounds) != 2 {
		t.Fatalf("%d points over %d rounds; want 2 over 2", len(rep.Points), len(rep.Rounds))
	}
	for _, round := range rep.Rounds {
		for _, p := range round {
			if want := p.Players * cfg.Turns; p.Whole.Latency.N != want || p.Kept.Latency.N != want {
				t.Errorf("%d players: %d and %d exchanges timed; want %d each", p.Players, p.Whole.Latency.N, p.Kept.Latency.N, want)
			}
			// From the second turn on, all of a prompt but the new line
			// and the unfed last reply token comes from the turn before.
			if p.Whole.ReusedShare != 0 || p.Kept.ReusedShare < 0.5 {
				t.Errorf("%d players: reused shares whole %.2f, kept %.2f; want 0 and most", p.Players, p.Whole.ReusedShare, p.Kept.ReusedShare)
			}
		}
	}
	if p := rep.Points[1]; !(p.P50Ratio > 0 && p.P95Ratio > 0) {
		t.Errorf("point %+v: want positive ratios", p)
	}
	if !strings.Contains(out.String(), "kept÷whole") {
		t.Errorf("table lacks the ratios:\n%s", out.String())
	}
}
