package abtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/parleyhq/parley/schema"
)

func TestAuditAssignment(t *testing.T) {
	// byParity stands for rollout.Assign: even players on canary.
	byParity := func(player, _ string) string {
		if (player[len(player)-1]-'0')%2 == 0 {
			return schema.ArmCanary
		}
		return schema.ArmStable
	}
	var sessions []Session
	for i := range 10 {
		sessions = append(sessions, Session{SessionID: fmt.Sprintf("s%d", i), PlayerID: fmt.Sprintf("p%d", i),
			Arm: byParity(fmt.Sprintf("p%d", i), ""), Salt: "5a17"})
	}
	sessions = append(sessions,
		Session{SessionID: "held", PlayerID: "p1", Arm: schema.ArmHeld, Salt: "5a17"},     // in no arm: not checked
		Session{SessionID: "legacy", PlayerID: "p1", Arm: schema.ArmCanary},               // no salt: not checked
		Session{SessionID: "earlier", PlayerID: "p1", Arm: schema.ArmCanary, Salt: "0ld"}) // another experiment's
	if a := AuditAssignment(sessions, "5a17", byParity); a.Failed() || a.Checked != 10 {
		t.Errorf("audit of a clean experiment = %+v; want 10 checked, none wrong", a)
	}
	sessions[3].Arm = schema.ArmCanary
	a := AuditAssignment(sessions, "5a17", byParity)
	if !a.Failed() || a.Wrong != 1 || a.Example != "session s3 of player p3 logged canary, hashes to stable" {
		t.Errorf("audit with one session on the wrong arm = %+v; want 1 wrong, naming s3", a)
	}
}

func TestSnapshotRestore(t *testing.T) {
	ts := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var evs []schema.SessionEvent
	for i := range 3 {
		evs = append(evs, schema.SessionEvent{Schema: schema.SessionEventSchema, EventID: fmt.Sprintf("00000000-0000-7000-8000-%012d", i),
			Type: schema.TurnEvent, SessionID: "s1", PlayerID: "p1", NPCID: "mira", Deployment: "npc", PolicyVersion: "v2",
			ExperimentID: "e1", Arm: schema.ArmCanary, Salt: "5a17", Generation: 4, TS: ts.Add(time.Duration(i) * time.Second), Turn: i + 1})
	}
	c := NewCollector()
	for _, ev := range evs {
		c.Add(ev)
	}
	c.SetReward("s1", 1.5)
	d := NewCollector()
	d.Restore(c.Snapshot())
	if got, want := fmt.Sprint(d.Sessions("")), fmt.Sprint(c.Sessions("")); got != want {
		t.Errorf("restored sessions = %s; want %s", got, want)
	}
	for _, ev := range evs {
		if d.Add(ev) {
			t.Errorf("restored collector took event %s again; want it absorbed", ev.EventID)
		}
	}
}
