package learner

import (
	"context"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/inference"
)

// TestLengthMatchMeetsTheLoggedLength calibrates a refreshed user agent on
// sessions served by the fixture's npc v1 and matches its length: the
// offset moves by the shift it reports, over the corpus's turn limit (4)
// rather than the configured depth (6), and a second match of the matched
// agent finds far less to move. Sessions served by a version the registry
// lacks leave the offset as fitted.
func TestLengthMatchMeetsTheLoggedLength(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two models: skipped in -short")
	}
	ctx := context.Background()
	ds := generatedCorpus(t, 24, 4, 4, 5)
	for i := range ds {
		ds[i].PolicyVersion = "v1"
	}
	rc := DefaultRefreshConfig()
	rc.SFT = refereeFixture(t, ds)
	rc.MinCalibrationDecisions = 10
	rc.NPC.Policy.Sampling.MaxTokens, rc.NPC.UserAgent.Sampling.MaxTokens = 8, 4
	rc.LengthMatch = LengthMatchConfig{Dialogues: 100, Depth: 6}
	r := &refresher{cfg: rc, registry: rc.SFT.Registry, dataDir: rc.SFT.DataDir, logger: slog.New(slog.DiscardHandler), now: time.Now}
	m, tok, _, err := inference.LoadCheckpoint(filepath.Join(rc.SFT.Registry, rc.SFT.Model, "v1"), rc.SFT.Backend)
	if err != nil {
		t.Fatal(err)
	}
	cal, _, err := r.calibrate(ctx, m, tok, ds)
	if err != nil || !cal.Fitted {
		t.Fatalf("calibrate: fitted %v, %v", cal != nil && cal.Fitted, err)
	}
	fitted := cal.Offset
	why, err := r.matchLength(ctx, m, tok, cal, ds)
	if err != nil {
		t.Fatal(err)
	}
	first := cal.LengthShift
	t.Logf("first match: %s", why)
	if !strings.Contains(why, "length matched") || !strings.Contains(why, "up to 4 exchanges") || first == 0 || cal.Offset != fitted+first {
		t.Fatalf("first match %q: offset %v → %v, shift %v; want a match up to the turn limit that moves the offset by its shift", why, fitted, cal.Offset, first)
	}
	why, err = r.matchLength(ctx, m, tok, cal, ds)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second match: %s", why)
	if math.Abs(cal.LengthShift) > math.Abs(first)/2 {
		t.Errorf("a second match shifts by %+.3f after a first of %+.3f; want the matched agent to need far less", cal.LengthShift, first)
	}

	for i := range ds {
		ds[i].PolicyVersion = "scripted"
	}
	before := cal.Calibration
	if why, err = r.matchLength(ctx, m, tok, cal, ds); err != nil || !strings.Contains(why, "not in the registry") || cal.Calibration != before {
		t.Errorf("sessions of a version not in the registry: %q, %v, calibration %+v → %+v; want it left as fitted", why, err, before, cal.Calibration)
	}
}

// TestRefreshConfigChecksTheLengthMatch: the length match needs a depth
// and an NPC to play; turned off, with the referee off too, it needs
// neither.
func TestRefreshConfigChecksTheLengthMatch(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*RefreshConfig)
		ok   bool
	}{
		{"default", func(*RefreshConfig) {}, true},
		{"no depth", func(c *RefreshConfig) { c.LengthMatch.Depth = 0 }, false},
		{"negative dialogues", func(c *RefreshConfig) { c.LengthMatch.Dialogues = -1 }, false},
		{"no npc model", func(c *RefreshConfig) { c.NPC.Model = "" }, false},
		{"no npc model, match and referee off", func(c *RefreshConfig) {
			c.NPC.Model, c.LengthMatch.Dialogues, c.Referee.Players.Size = "", 0, 0
		}, true},
	} {
		cfg := DefaultRefreshConfig()
		c.edit(&cfg)
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v; want ok %v", c.name, err, c.ok)
		}
	}
}
