package abtest

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/rollout"
	"github.com/parleyhq/parley/schema"
)

var _ Controller = (*rollout.Client)(nil)

// startRollout returns a rollout client on a fresh Redis and the logger,
// writing to the test's output, that it and the code under test share.
func startRollout(t *testing.T) (*rollout.Client, *slog.Logger) {
	t.Helper()
	r := testenv.StartRedis(t)
	rcfg := rollout.DefaultConfig()
	rcfg.Prefix = r.Prefix
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	rc, err := rollout.New(r.Client, rcfg, log)
	if err != nil {
		t.Fatal(err)
	}
	return rc, log
}

func TestWatchdogActsOnTheRollout(t *testing.T) {
	ctx := context.Background()
	rc, log := startRollout(t)
	now := t0.Add(time.Hour)
	better := func(arm string, i int) int {
		if arm == schema.ArmCanary {
			return 7 + i%5
		}
		return 4 + i%5
	}
	erroring := func(arm string, i int, s *Session) {
		if arm == schema.ArmCanary && i%5 == 0 {
			s.Reason = schema.EndError
		}
	}
	tests := []struct {
		name        string
		mod         func(string, int, *Session)
		autoPromote bool
		wantVerdict Verdict
		wantState   schema.RolloutPhase
		wantStable  string
	}{
		{"guardrail breach rolls back", erroring, true, Rollback, schema.PhaseRollingBack, "v1"},
		{"better canary is promoted", nil, true, Promote, schema.PhaseSteady, "v2"},
		{"promotion off holds", nil, false, Hold, schema.PhaseCanary, "v1"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deployment := "npc" + string(rune('a'+i))
			if _, err := rc.Init(ctx, deployment, "v1", "test"); err != nil {
				t.Fatal(err)
			}
			ch, err := rc.Canary(ctx, deployment, "v2", 50, "alice")
			if err != nil {
				t.Fatal(err)
			}
			exp := ch.To.ExperimentID
			sessions := func(id string) []Session {
				if id != exp {
					t.Errorf("watchdog asked for experiment %q; want %q", id, exp)
				}
				return population(300, now.Add(-5*time.Minute), better, tt.mod)
			}
			cfg := DefaultWatchdogConfig()
			cfg.Deployment = deployment
			cfg.Guardrails.AutoPromote = tt.autoPromote
			cfg.Guardrails.MinPromotePlayers = 100
			w, err := NewWatchdog(cfg, rc, sessions, log)
			if err != nil {
				t.Fatal(err)
			}
			_, d, err := w.Check(ctx, now)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if d.Verdict != tt.wantVerdict {
				t.Errorf("Check verdict = %s (%s); want %s", d.Verdict, d.Reason, tt.wantVerdict)
			}
			st, err := rc.Get(ctx, deployment)
			if err != nil {
				t.Fatal(err)
			}
			if st.State != tt.wantState || st.Stable != tt.wantStable {
				t.Errorf("rollout after Check = %s, stable %s; want %s, stable %s", st.State, st.Stable, tt.wantState, tt.wantStable)
			}
			if tt.wantVerdict == Hold {
				return
			}
			hist, err := rc.History(ctx, deployment, 1)
			if err != nil || len(hist) != 1 {
				t.Fatalf("History = %v, %v", hist, err)
			}
			if h := hist[0]; h.By != cfg.By || h.Action != string(tt.wantVerdict) || h.Reason == "" {
				t.Errorf("last change = %s by %s (%q); want %s by %s with a reason", h.Action, h.By, h.Reason, tt.wantVerdict, cfg.By)
			}
			if tt.wantVerdict == Rollback && !strings.Contains(hist[0].Reason, "error_rate") {
				t.Errorf("rollback reason %q does not name error_rate", hist[0].Reason)
			}
			// Once the canary is gone, the watchdog leaves the rollout alone.
			if _, d, err := w.Check(ctx, now); err != nil || d.Verdict != Hold {
				t.Errorf("second Check = %s, %v; want hold", d.Verdict, err)
			}
		})
	}
}
