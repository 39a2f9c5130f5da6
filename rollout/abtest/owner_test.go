package abtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/rollout"
	"github.com/parleyhq/parley/schema"
)

// ownerEnv starts a stepped canary of v2 over v1 and an Owner on an empty
// collector.
func ownerEnv(t *testing.T) (*rollout.Client, *Collector, *Owner, schema.RolloutState) {
	t.Helper()
	ctx := context.Background()
	rc, log := startRollout(t)
	if _, err := rc.Init(ctx, "npc", "v1", "test"); err != nil {
		t.Fatal(err)
	}
	ch, err := rc.Apply(ctx, "npc", rollout.Request{Action: rollout.ActionCanary, Version: "v2", Steps: []int{5, 20, 50}, MinStepPlayers: 3, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := OwnerConfig{Watchdog: DefaultWatchdogConfig(),
		Follow:     FollowConfig{Brokers: []string{"unused:9092"}, Topic: "t", GroupID: "g", CheckpointEvery: time.Second},
		Checkpoint: filepath.Join(t.TempDir(), "abtest.json"), TimelineStep: time.Minute, TimelinePoints: 10}
	col := NewCollector()
	o, err := NewOwner(cfg, rc, col, log)
	if err != nil {
		t.Fatal(err)
	}
	return rc, col, o, ch.To
}

// expose adds one ended session for each of n players routed by st, on
// arm (when not "") instead of the one they hash to.
func expose(col *Collector, st schema.RolloutState, from, n int, arm string) {
	for i := from; i < from+n; i++ {
		e := rollout.Expose(st, fmt.Sprintf("player-%d", i))
		if e.ExperimentID == "" {
			continue
		}
		if arm != "" {
			e.Arm = arm
		}
		s := Session{SessionID: fmt.Sprintf("s-%d", i), PlayerID: fmt.Sprintf("player-%d", i), ExperimentID: e.ExperimentID,
			Arm: e.Arm, Version: e.Version, Salt: e.Salt, Generation: e.Generation,
			Started: t0, Ended: t0.Add(time.Minute), Turns: 3, Reason: schema.EndPlayerEnded}
		col.mu.Lock()
		col.sessions[s.SessionID] = &s
		col.mu.Unlock()
	}
}

func TestOwnerHoldsOnAFailedAudit(t *testing.T) {
	ctx := context.Background()
	rc, col, o, st := ownerEnv(t)
	expose(col, st, 0, 400, "")
	expose(col, st, 400, 400, schema.ArmCanary) // a gateway that sends everyone covered to the canary
	pub, err := o.Analyze(ctx, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Audit.Failed() || pub.Action != ActionHold {
		t.Fatalf("analysis = audit %+v, action %q; want a failed audit and a hold", pub.Audit, pub.Action)
	}
	got, err := rc.Get(ctx, "npc")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != schema.PhasePaused || !strings.Contains(got.PauseReason, "assignment audit failed") {
		t.Errorf("rollout after a failed audit: %s, reason %q; want paused with the audit's reason", got.State, got.PauseReason)
	}
	var read Published
	if err := rc.ReadReport(ctx, "npc", &read); err != nil {
		t.Fatal(err)
	}
	if read.ExperimentID != st.ExperimentID || read.Action != ActionHold || read.Audit.Wrong != pub.Audit.Wrong {
		t.Errorf("published report = %s %s %+v; want %s hold %+v", read.ExperimentID, read.Action, read.Audit, st.ExperimentID, pub.Audit)
	}
}

func TestOwnerHoldsOnASampleRatioMismatch(t *testing.T) {
	ctx := context.Background()
	rc, col, o, st := ownerEnv(t)
	// Only the stable arm's players come through: the canary's are lost.
	for i := range 4000 {
		if e := rollout.Expose(st, fmt.Sprintf("player-%d", i)); e.Arm == schema.ArmStable || i%10 == 0 {
			expose(col, st, i, 1, "")
		}
	}
	pub, err := o.Analyze(ctx, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Report.SRM.Failed || pub.Report.SRM.Expected != 0.5 || pub.Action != ActionHold {
		t.Fatalf("analysis = SRM %+v, action %q; want a failed SRM against 0.5 and a hold", pub.Report.SRM, pub.Action)
	}
	if got, _ := rc.Get(ctx, "npc"); got.State != schema.PhasePaused || !strings.Contains(got.PauseReason, "sample ratio mismatch") {
		t.Errorf("rollout after SRM: %s, reason %q; want paused for the sample ratio mismatch", got.State, got.PauseReason)
	}
}

func TestOwnerPromotionAdvancesASteppedCanary(t *testing.T) {
	ctx := context.Background()
	rc, col, o, st := ownerEnv(t)
	s := stepper{o}
	if _, err := s.PromoteAt(ctx, "npc", st.Generation, "test", "better"); !errors.Is(err, rollout.ErrTransition) {
		t.Fatalf("promotion with no player in the step = %v; want ErrTransition (step not done)", err)
	}
	expose(col, st, 0, 400, "")
	ch, err := s.PromoteAt(ctx, "npc", st.Generation, "test", "better")
	if err != nil {
		t.Fatal(err)
	}
	if ch.Action != string(rollout.ActionAdvance) || ch.To.CanaryWeight != 20 || ch.To.Step != 1 {
		t.Errorf("promotion at step 1 = %s to %d%% (step %d); want an advance to 20%% (step 1)", ch.Action, ch.To.CanaryWeight, ch.To.Step)
	}
	last, err := rc.Apply(ctx, "npc", rollout.Request{Action: rollout.ActionAdvance, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if ch, err = s.PromoteAt(ctx, "npc", last.To.Generation, "test", "better"); err != nil || ch.Action != string(rollout.ActionPromote) {
		t.Errorf("promotion at the last step = %s, %v; want promote", ch.Action, err)
	}
}

func TestStepHolds(t *testing.T) {
	st := schema.RolloutState{Steps: []int{5, 20}, CanaryWeight: 5, MinStepPlayers: 10}
	o := &Owner{cfg: OwnerConfig{Watchdog: DefaultWatchdogConfig()}}
	o.cfg.Watchdog.Guardrails.AutoPromote = true
	judged := []Check{{Name: "error_rate", Judged: true}, {Name: "early_termination_rate", Judged: true}}
	enough := map[string]int{schema.ArmStable: 10, schema.ArmCanary: 12}
	for _, tt := range []struct {
		name    string
		mod     func(*Owner, *schema.RolloutState, *Published)
		advance bool
	}{
		{"holds", func(*Owner, *schema.RolloutState, *Published) {}, true},
		{"auto-promote off", func(o *Owner, _ *schema.RolloutState, _ *Published) { o.cfg.Watchdog.Guardrails.AutoPromote = false }, false},
		{"last step", func(_ *Owner, s *schema.RolloutState, _ *Published) { s.Step = 1 }, false},
		{"too few players", func(_ *Owner, _ *schema.RolloutState, p *Published) {
			p.StepPlayers = map[string]int{schema.ArmStable: 10, schema.ArmCanary: 9}
		}, false},
		{"guardrail not judged", func(_ *Owner, _ *schema.RolloutState, p *Published) {
			p.Decision.Checks = []Check{{Name: "error_rate", Judged: true}, {Name: "early_termination_rate"}}
		}, false},
		{"guardrail breached", func(_ *Owner, _ *schema.RolloutState, p *Published) {
			p.Decision.Checks = []Check{{Name: "error_rate", Judged: true, Breached: true}}
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			oo, s := *o, st
			pub := Published{Decision: Decision{Checks: judged}, StepPlayers: enough}
			tt.mod(&oo, &s, &pub)
			if got := oo.stepHolds(s, pub); got != tt.advance {
				t.Errorf("stepHolds = %v; want %v", got, tt.advance)
			}
		})
	}
}

func TestOwnerRunFollowsAnalysesAndCheckpoints(t *testing.T) {
	rc, _, _, st := ownerEnv(t)
	k := testenv.StartKafka(t)
	topic := k.Topic("sessions")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var msgs []kafka.Message
	for i := range 200 {
		e := rollout.Expose(st, fmt.Sprintf("player-%d", i))
		if e.ExperimentID == "" {
			continue
		}
		ev := schema.SessionEvent{Schema: schema.SessionEventSchema, EventID: fmt.Sprintf("00000000-0000-7000-8000-%012d", i),
			Type: schema.SessionEnded, SessionID: fmt.Sprintf("s%d", i), PlayerID: fmt.Sprintf("player-%d", i), NPCID: "mira",
			Deployment: "npc", PolicyVersion: e.Version, ExperimentID: e.ExperimentID, Arm: e.Arm, Salt: e.Salt,
			Generation: e.Generation, TS: time.Now().UTC(), Turns: 3, Reason: schema.EndPlayerEnded}
		raw, _ := json.Marshal(ev)
		msgs = append(msgs, kafka.Message{Key: []byte(ev.SessionID), Value: raw})
	}
	w := &kafka.Writer{Addr: kafka.TCP(k.Addrs...), Topic: topic, Balancer: &kafka.Hash{}, AllowAutoTopicCreation: true}
	for w.WriteMessages(ctx, msgs...) != nil && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond) // topic creation is asynchronous
	}
	w.Close()

	cfg := OwnerConfig{Watchdog: DefaultWatchdogConfig(),
		Follow:     FollowConfig{Brokers: k.Addrs, Topic: topic, GroupID: k.Prefix + "abtest", CheckpointEvery: 100 * time.Millisecond},
		Checkpoint: filepath.Join(t.TempDir(), "abtest.json"), TimelineStep: time.Minute, TimelinePoints: 10}
	cfg.Watchdog.Interval = 100 * time.Millisecond
	o, err := NewOwner(cfg, rc, NewCollector(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- o.Run(rctx) }()
	var pub Published
	for pub.Audit.Checked < len(msgs) {
		if ctx.Err() != nil {
			t.Fatalf("published analysis audited %d sessions after 60s; want %d", pub.Audit.Checked, len(msgs))
		}
		time.Sleep(100 * time.Millisecond)
		_ = rc.ReadReport(ctx, "npc", &pub)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel = %v; want nil", err)
	}
	if pub.ExperimentID != st.ExperimentID || pub.Audit.Failed() || pub.Guardrails.AutoPromote {
		t.Errorf("published %s, audit %+v, auto-promote %v; want %s, a clean audit, off", pub.ExperimentID, pub.Audit, pub.Guardrails.AutoPromote, st.ExperimentID)
	}
	// A new owner restores the checkpoint: it has every session before it reads a record.
	again, err := NewOwner(cfg, rc, NewCollector(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.restore(); err != nil {
		t.Fatal(err)
	}
	if n := len(again.col.Sessions(st.ExperimentID)); n != len(msgs) {
		t.Errorf("restored checkpoint holds %d sessions; want %d", n, len(msgs))
	}
}
