package experiment

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/learner/rl"
	"github.com/parleyhq/parley/schema"
)

// loopProfile is the tiny profile cut to seconds: a few SFT steps, one RL
// step of AT-GRPO, a small referee, and a loop of two rounds.
func loopProfile() Profile {
	p := TinyProfile()
	p.Name = "loop-test"
	p.SFTSteps, p.UserAgentSFTSteps = 4, 4
	p.RL.Steps = 1
	p.Methods, p.Ablations, p.Fidelity = []rl.Algorithm{rl.ATGRPO}, false, false
	p.EvalPrompts, p.CurvePrompts = 4, 2
	p.Referee = rl.RefereeConfig{Groups: 4, Siblings: 3, MaxContext: 1, Dialogues: 4, Depth: p.EvalDepth, Resamples: 50, Parallel: 2, Seed: 1}
	p.Loop = &Loop{Rounds: 2, DialoguesPerPlayer: 1, RefreshSteps: 2, RefreshLR: 1e-3}
	return p
}

func TestLoopTwice(t *testing.T) {
	dir := t.TempDir()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p := loopProfile()
	res, err := Run(context.Background(), Config{Seeds: 1, OutDir: dir, Override: &p}, logger)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rounds) != 2 {
		t.Fatalf("%d rounds; want 2", len(res.Rounds))
	}
	r1, r2 := res.Rounds[0], res.Rounds[1]
	if r1.Round != 1 || r2.Round != 2 || r1.Variant != VariantATGRPO || r2.Variant != VariantATGRPO {
		t.Errorf("rounds %d %s and %d %s; want 1 and 2 of %s", r1.Round, r1.Variant, r2.Round, r2.Variant, VariantATGRPO)
	}

	// Round 2 starts from round 1's policy, which RL moved away from SFT.
	if r1.PolicyEnd == "" || r2.PolicyStart != r1.PolicyEnd {
		t.Errorf("round 2 starts from weights %q, round 1 ended with %q; want the same", r2.PolicyStart, r1.PolicyEnd)
	}
	if r1.PolicyStart == r1.PolicyEnd || r2.PolicyStart == r2.PolicyEnd {
		t.Errorf("policy digests %q → %q, %q → %q; want RL to change the weights", r1.PolicyStart, r1.PolicyEnd, r2.PolicyStart, r2.PolicyEnd)
	}

	// The refreshed user agent was fine-tuned from the bootstrap one on the
	// bootstrap's dialogues plus the round-1 policy's own.
	f := r2.Refresh
	if r1.Refresh != nil || f == nil {
		t.Fatalf("refreshes %+v and %+v; want none in round 1, one in round 2", r1.Refresh, f)
	}
	c, err := newCorpus(p) // the bootstrap's corpus again: the same seed gives the same dialogues
	if err != nil {
		t.Fatal(err)
	}
	training := 0
	for _, pl := range c.pop.Players() {
		if !pl.HeldOut {
			training++
		}
	}
	if f.Parent != bootstrapUserAgent || r2.UserAgent != "round2-seed1" || f.Policy != "round1-seed1" {
		t.Errorf("refresh of %q into %q with policy %q; want bootstrap → round2-seed1 with round1-seed1", f.Parent, r2.UserAgent, f.Policy)
	}
	if f.OldDialogues != len(c.train) || f.NewDialogues != training*p.Loop.DialoguesPerPlayer ||
		f.TrainDialogues+f.HeldOutDialogues != f.OldDialogues+f.NewDialogues {
		t.Errorf("refresh on %d old + %d new dialogues, TrainSFT saw %d + %d; want %d + %d, all of them",
			f.OldDialogues, f.NewDialogues, f.TrainDialogues, f.HeldOutDialogues, len(c.train), training)
	}
	scripted := map[string]bool{}
	for _, d := range c.train {
		for _, x := range d.Exchanges {
			scripted[x.NPC] = true
		}
	}
	played := readDialogues(t, filepath.Join(dir, f.Dialogues))
	own := 0
	for _, d := range played {
		if d.PolicyVersion != f.Policy || len(d.Exchanges) == 0 {
			t.Fatalf("dialogue %s of policy %q with %d exchanges; want %q's", d.SessionID, d.PolicyVersion, len(d.Exchanges), f.Policy)
		}
		for _, x := range d.Exchanges {
			if x.NPC != "" && !scripted[x.NPC] {
				own++
			}
		}
	}
	if len(played) != f.NewDialogues || own == 0 {
		t.Errorf("%d dialogues with %d NPC turns of the policy's own; want %d with some", len(played), own, f.NewDialogues)
	}
	ua, _, man, err := inference.LoadCheckpoint(filepath.Join(dir, "models", "user-agent", r2.UserAgent), inference.DefaultBackendConfig())
	if err != nil || ua == nil || man.Parent != bootstrapUserAgent {
		t.Errorf("refreshed user agent: %v, parent %q; want one fine-tuned from %q", err, man.Parent, bootstrapUserAgent)
	}

	// Every round is evaluated and gated, and results.json carries both.
	for _, r := range res.Rounds {
		if r.Referee == nil || r.Players.Dialogues != p.EvalPrompts || r.UserAgentDelta.Dialogues != p.EvalPrompts || r.PPLRatio <= 0 {
			t.Errorf("round %d: gate %v, %d and %d paired dialogues, PPL ratio %g; want a gate, %d each, a ratio",
				r.Round, r.Referee, r.Players.Dialogues, r.UserAgentDelta.Dialogues, r.PPLRatio, p.EvalPrompts)
		}
	}
	if r2.RefereeBefore == nil || r2.Row == nil {
		t.Errorf("round 2: previous agent's gate %v, row %v; want both", r2.RefereeBefore, r2.Row)
	}
	back, err := LoadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Rounds) != 2 || back.Rounds[1].AvgL != r2.AvgL || back.Rounds[1].Players.DeltaAvgL != r2.Players.DeltaAvgL {
		t.Errorf("results.json holds %d rounds; want both, as run", len(back.Rounds))
	}
	md, _ := os.ReadFile(filepath.Join(dir, ResultsMarkdown))
	t.Logf("loop in %.0f s:\n%s", res.Seconds, md)

	// With more seeds the report pools each round over them.
	for _, r := range res.Rows {
		r.Seed = 2
		res.Rows = append(res.Rows, r)
	}
	for _, r := range res.Rounds[:2] {
		r.Seed = 2
		res.Rounds = append(res.Rounds, r)
	}
	res.Seeds = 2
	pooled := regexp.MustCompile(`(?m)^\| [12] \| 2 \| [0-9]`) // round, seeds, Avg.L
	if got := Markdown(res); !strings.Contains(got, "Every seed together") || len(pooled.FindAllString(got, -1)) != 2 {
		t.Errorf("two seeds' report has no pooled rounds:\n%s", got)
	}
}

// TestLoopControlKeepsUserAgent runs the loop's control: round 2 starts
// from round 1's policy against the same, bootstrap, user agent.
func TestLoopControlKeepsUserAgent(t *testing.T) {
	dir := t.TempDir()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p := loopProfile()
	res, err := Run(context.Background(), Config{Seeds: 1, OutDir: dir, Override: &p, KeepUserAgent: true}, logger)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rounds) != 2 || !res.Profile.Loop.KeepUserAgent {
		t.Fatalf("%d rounds, loop %+v; want 2 of the control", len(res.Rounds), res.Profile.Loop)
	}
	r1, r2 := res.Rounds[0], res.Rounds[1]
	if r2.UserAgent != bootstrapUserAgent || r2.Refresh != nil || r2.RefereeBefore != nil || r2.Referee == nil {
		t.Errorf("round 2 against %q, refresh %+v, previous gate %v, gate %v; want the bootstrap agent, no refresh, a gate",
			r2.UserAgent, r2.Refresh, r2.RefereeBefore, r2.Referee)
	}
	if r2.PolicyStart != r1.PolicyEnd {
		t.Errorf("round 2 starts from weights %q, round 1 ended with %q; want the same", r2.PolicyStart, r1.PolicyEnd)
	}
}

func readDialogues(t *testing.T, path string) []schema.Dialogue {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []schema.Dialogue
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var d schema.Dialogue
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRoundsOption checks that --rounds 1 (the default) leaves the profile
// without a loop and more rounds add DefaultLoop.
func TestRoundsOption(t *testing.T) {
	for _, rounds := range []int{0, 1} {
		p, err := Config{Profile: "small", Seeds: 1, OutDir: "x", Rounds: rounds}.profile()
		if err != nil || p.Loop != nil || p.rounds() != 1 {
			t.Errorf("rounds %d: loop %+v, %v; want none", rounds, p.Loop, err)
		}
	}
	p, err := Config{Profile: "small", Seeds: 1, OutDir: "x", Rounds: 2}.profile()
	if err != nil || p.Loop == nil || *p.Loop != DefaultLoop(SmallProfile(), 2) {
		t.Errorf("rounds 2: loop %+v, %v; want DefaultLoop", p.Loop, err)
	}
	if err := (Config{Profile: "small", Seeds: 1, OutDir: "x", Rounds: 2, TrainOn: TrainOnPlayers}).Validate(); err == nil {
		t.Error("a loop with RL on the players passed Validate")
	}
	if _, err := loopVariant(p, Variants(p)[1:]); err == nil {
		t.Error("a loop without SFT only found a variant")
	}
	if name, err := loopVariant(p, Variants(p)); err != nil || name != VariantATGRPO {
		t.Errorf("loop variant %q, %v; want %s", name, err, VariantATGRPO)
	}
}
