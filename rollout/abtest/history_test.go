package abtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/parleyhq/parley/rollout"
	"github.com/parleyhq/parley/schema"
)

// played folds one whole session into col: its start at start and its
// end after turns exchanges a minute later, in experiment (with its arm
// and salt) or in none.
func played(col *Collector, session, player string, e rollout.Exposure, start time.Time, turns int) {
	base := schema.SessionEvent{Schema: schema.SessionEventSchema, SessionID: session, PlayerID: player, NPCID: "mira",
		Deployment: "npc", PolicyVersion: e.Version, ExperimentID: e.ExperimentID, Arm: e.Arm, Salt: e.Salt, Generation: e.Generation}
	started, ended := base, base
	started.EventID, started.Type, started.TS = session+"-start", schema.SessionStarted, start
	ended.EventID, ended.Type, ended.TS, ended.Turns, ended.Reason = session+"-end", schema.SessionEnded, start.Add(time.Minute), turns, schema.EndPlayerEnded
	col.Add(started)
	col.Add(ended)
}

func TestOwnerPassesPreExposureLengths(t *testing.T) {
	ctx := context.Background()
	_, col, o, st := ownerEnv(t)
	none := rollout.Exposure{Version: "v1"}
	want := map[string]float64{}
	for i := range 1000 {
		player := fmt.Sprintf("player-%d", i)
		e := rollout.Expose(st, player)
		if e.ExperimentID == "" {
			continue
		}
		if i%4 != 0 { // every fourth player comes with no history
			played(col, player+"-a", player, none, t0.Add(-3*time.Hour), 2+i%5)
			played(col, player+"-b", player, none, t0.Add(-2*time.Hour), 4+i%3)
			want[player] = float64(2+i%5+4+i%3) / 2
		}
		played(col, player+"-x", player, e, t0, 3+i%5+i%2)
		// After the exposure: not pre-exposure, though outside the experiment.
		played(col, player+"-after", player, none, t0.Add(time.Hour), 20)
		if i%4 == 1 { // ended before the exposure, read after it
			played(col, player+"-late", player, none, t0.Add(-time.Hour), 2+i%5+4+i%3)
			want[player] = float64(2+i%5+4+i%3) * 2 / 3
		}
	}
	got := col.Pre(st.ExperimentID)
	if len(got) != len(want) {
		t.Errorf("players with a pre-exposure length = %d; want %d", len(got), len(want))
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("pre-exposure length of %s = %v; want %v", p, got[p], w)
		}
	}

	now := t0.Add(2 * time.Hour)
	pub, err := o.Analyze(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	with, err := Update(State{}, st.ExperimentID, col.Sessions(st.ExperimentID), want, o.cfg.Watchdog.Analysis, now)
	if err != nil {
		t.Fatal(err)
	}
	if pub.Report.AvgL.VarianceReduction == 0 {
		t.Errorf("owner's Avg.L = %+v; want it CUPED-adjusted", pub.Report.AvgL)
	}
	near(t, "owner's Avg.L difference", pub.Report.AvgL.Diff, with.AvgL.Diff)
	near(t, "owner's CUPED θ", pub.Report.AvgL.CUPEDTheta, with.AvgL.CUPEDTheta)
	near(t, "owner's variance reduction", pub.Report.AvgL.VarianceReduction, with.AvgL.VarianceReduction)
}

func TestFoldLeavesPlayersWithoutPreUnadjusted(t *testing.T) {
	sessions, pre := tinySessions(true)
	delete(pre, "p1")
	delete(pre, "p5")
	mean := (4 + 7 + 1 + 5 + 8) / 5.0
	tally := Fold(sessions, pre, 0)
	if got := tally.Stable.Turns.C + tally.Canary.Turns.C; got != 4+mean+7+1+5+mean+8 {
		t.Errorf("Σ covariate = %v; want the known ones plus their mean %v for each unknown", got, mean)
	}
}

func TestCollectorForgetsEventIDsOfEndedSessions(t *testing.T) {
	col := NewCollector()
	none := rollout.Exposure{Version: "v1"}
	played(col, "old", "p1", none, t0, 3)
	open := schema.SessionEvent{Schema: schema.SessionEventSchema, EventID: "open-start", Type: schema.SessionStarted,
		SessionID: "open", PlayerID: "p2", NPCID: "mira", Deployment: "npc", PolicyVersion: "v1", TS: t0}
	col.Add(open)
	played(col, "recent", "p3", none, t0.Add(ForgetAfter+time.Minute), 4)

	snap := col.Snapshot()
	if _, kept := snap.Events["old"]; kept || len(snap.Events["open"]) != 1 || len(snap.Events["recent"]) != 2 {
		t.Errorf("event ids kept = %v; want those of the open and the recently ended session only", snap.Events)
	}
	for _, c := range []*Collector{col, restored(snap)} {
		redelivered := schema.SessionEvent{Schema: schema.SessionEventSchema, EventID: "old-end", Type: schema.SessionEnded,
			SessionID: "old", PlayerID: "p1", NPCID: "mira", Deployment: "npc", PolicyVersion: "v1", TS: t0.Add(time.Minute), Turns: 9}
		if c.Add(redelivered) || c.Add(open) {
			t.Error("a redelivered event was taken; want it dropped")
		}
		recentEnd := redelivered
		recentEnd.EventID, recentEnd.SessionID = "recent-end", "recent"
		if c.Add(recentEnd) {
			t.Error("a redelivered end of a recent session was taken; want it dropped")
		}
		for _, s := range c.Sessions("") {
			if s.Turns == 9 {
				t.Errorf("session %s took a redelivered end: %+v", s.SessionID, s)
			}
		}
	}
}

func restored(snap Snapshot) *Collector {
	c := NewCollector()
	c.Restore(snap)
	return c
}

func TestStepPlayersSurvivePauseAndResume(t *testing.T) {
	ctx := context.Background()
	rc, col, o, st := ownerEnv(t)
	expose(col, st, 0, 400, "")
	for _, a := range []rollout.Action{rollout.ActionPause, rollout.ActionResume} {
		if _, err := rc.Apply(ctx, "npc", rollout.Request{Action: a, Reason: "look", By: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	resumed, err := rc.Get(ctx, "npc")
	if err != nil {
		t.Fatal(err)
	}
	if n := stepPlayers(col.Sessions(st.ExperimentID), resumed); n[schema.ArmStable] < 3 || n[schema.ArmCanary] < 3 {
		t.Fatalf("step players after a pause and resume = %v; want those of the step, at least 3 each", n)
	}
	ch, err := stepper{o}.PromoteAt(ctx, "npc", resumed.Generation, "test", "better")
	if err != nil || ch.To.Step != 1 || ch.To.StepGeneration != ch.To.Generation {
		t.Fatalf("promotion after a pause and resume = step %d from generation %d, %v; want an advance to step 1 starting now",
			ch.To.Step, ch.To.StepGeneration, err)
	}
	if n := stepPlayers(col.Sessions(st.ExperimentID), ch.To); len(n) != 0 {
		t.Errorf("players in the new step = %v; want none yet", n)
	}
}
