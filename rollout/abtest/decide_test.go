package abtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/schema"
)

// population makes n sessions per arm ending one second apart from start,
// with turns from turns(arm, i) and per-arm tweaks applied by mod.
func population(n int, start time.Time, turns func(arm string, i int) int, mod func(arm string, i int, s *Session)) []Session {
	var out []Session
	for i := range n {
		for _, arm := range []string{schema.ArmStable, schema.ArmCanary} {
			end := start.Add(time.Duration(2*i) * time.Second)
			s := Session{
				SessionID: fmt.Sprintf("%s-%d", arm, i), PlayerID: fmt.Sprintf("p-%s-%d", arm, i),
				ExperimentID: "e1", Arm: arm, Version: arm, Started: end.Add(-time.Second), Ended: end,
				Turns: turns(arm, i), Reason: schema.EndPlayerEnded,
			}
			for k := range s.Turns {
				s.Exchanges = append(s.Exchanges, Exchange{At: end, LatencyMS: int64(100 + (i+k)%50), Safety: schema.SafetyNone})
			}
			if mod != nil {
				mod(arm, i, &s)
			}
			out = append(out, s)
		}
	}
	return out
}

func TestDecide(t *testing.T) {
	now := t0.Add(time.Hour)
	inWindow := now.Add(-10 * time.Minute)
	same := func(arm string, i int) int { return 4 + i%5 }
	better := func(arm string, i int) int {
		if arm == schema.ArmCanary {
			return 7 + i%5
		}
		return 4 + i%5
	}
	onCanary := func(f func(i int, s *Session)) func(string, int, *Session) {
		return func(arm string, i int, s *Session) {
			if arm == schema.ArmCanary {
				f(i, s)
			}
		}
	}
	// slowed makes the exchanges of canary session i three times slower
	// where when(i).
	slowed := func(when func(i int) bool) func(string, int, *Session) {
		return onCanary(func(i int, s *Session) {
			if when(i) {
				for k := range s.Exchanges {
					s.Exchanges[k].LatencyMS *= 3
				}
			}
		})
	}
	// fast divides every exchange's latency by five (20–29 ms) and the
	// canary's then multiplies by canaryTimes.
	fast := func(canaryTimes int64) func(string, int, *Session) {
		return func(arm string, i int, s *Session) {
			for k := range s.Exchanges {
				s.Exchanges[k].LatencyMS /= 5
				if arm == schema.ArmCanary {
					s.Exchanges[k].LatencyMS *= canaryTimes
				}
			}
		}
	}
	// A burst: two minutes of the ten (sessions end two seconds apart).
	inBurst := func(i int) bool { return i >= 100 && i < 160 }
	guard := DefaultGuardrailConfig()
	promoting := guard
	promoting.AutoPromote = true
	promoting.MinPromotePlayers = 100

	tests := []struct {
		name     string
		sessions []Session
		cfg      GuardrailConfig
		want     Verdict
		breached string
	}{
		{"healthy, promotion off", population(300, inWindow, better, nil), guard, Hold, ""},
		{"healthy and better, promotion on", population(300, inWindow, better, nil), promoting, Promote, ""},
		{"healthy, no difference", population(300, inWindow, same, nil), promoting, Hold, ""},
		{"better but too few sessions", population(60, inWindow, better, nil), promoting, Hold, ""},
		{"error rate", population(300, inWindow, better, onCanary(func(i int, s *Session) {
			if i%5 == 0 {
				s.Reason = schema.EndError
			}
		})), promoting, Rollback, "error_rate"},
		{"p95 latency", population(300, inWindow, same, slowed(func(int) bool { return true })), guard, Rollback, "slow_exchange_rate"},
		// Two minutes of ten in which every canary exchange is slow, as when
		// a burst of players queues on the canary's engine: a fifth of the
		// canary's players, but 12 of its 60 blocks of time, too few to show
		// that the canary is slower beyond the allowance.
		{"a burst of slow exchanges", population(300, inWindow, same, slowed(inBurst)), guard, Hold, ""},
		// The same burst on a canary that is better: not proven slower, but
		// slower than the allowance allows, so not promoted either.
		{"better, with a burst of slow exchanges", population(300, inWindow, better, slowed(inBurst)), promoting, Hold, ""},
		// Three times stable's latency, but faster than players notice
		// (SlowFloorMS); five times is past it.
		{"three times as slow, under the floor", population(300, inWindow, same, fast(3)), guard, Hold, ""},
		{"five times as slow, past the floor", population(300, inWindow, same, fast(5)), guard, Rollback, "slow_exchange_rate"},
		{"a quarter of the canary's exchanges slow all along", population(300, inWindow, same, slowed(func(i int) bool { return i%4 == 0 })), guard, Rollback, "slow_exchange_rate"},
		{"early termination", population(300, inWindow, same, onCanary(func(i int, s *Session) {
			if i%4 == 0 {
				s.Turns, s.Exchanges = 1, s.Exchanges[:1]
			}
		})), guard, Rollback, "early_termination_rate"},
		{"safety refusals", population(300, inWindow, same, onCanary(func(i int, s *Session) {
			if i%3 == 0 {
				s.Exchanges[0].Safety = schema.SafetyRefused
			}
		})), guard, Rollback, "safety_refusal_rate"},
		{"breach on too few players", population(20, inWindow, same, onCanary(func(i int, s *Session) {
			s.Reason = schema.EndError
		})), guard, Hold, ""},
		{"worse Avg.L rolls back", population(300, inWindow, func(arm string, i int) int {
			return better(map[string]string{schema.ArmStable: schema.ArmCanary, schema.ArmCanary: schema.ArmStable}[arm], i)
		}, nil), guard, Rollback, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.CanaryShare = 0.5
			r, err := Analyze("e1", tt.sessions, cfg, now)
			if err != nil {
				t.Fatal(err)
			}
			d := Decide(r, tt.cfg)
			if d.Verdict != tt.want {
				t.Fatalf("Decide = %s (%s); want %s", d.Verdict, d.Reason, tt.want)
			}
			for _, c := range d.Checks {
				if want := c.Name == tt.breached; c.Breached != want {
					t.Errorf("check %s breached = %v (canary %.4g, limit %.4g, judged %v); want %v",
						c.Name, c.Breached, c.Canary, c.Limit, c.Judged, want)
				}
			}
			if tt.breached != "" && !strings.Contains(d.Reason, tt.breached) {
				t.Errorf("Decide reason %q does not name %s", d.Reason, tt.breached)
			}
		})
	}
}

func TestCollector(t *testing.T) {
	c := NewCollector()
	n := 0
	ev := func(typ schema.EventType, session, arm string, at time.Time, f func(*schema.SessionEvent)) schema.SessionEvent {
		n++
		e := schema.SessionEvent{
			Schema: schema.SessionEventSchema, EventID: fmt.Sprintf("00000000-0000-7000-8000-%012d", n), Type: typ,
			SessionID: session, PlayerID: "p-" + session, NPCID: "smith", Deployment: "npc",
			PolicyVersion: map[string]string{"stable": "v1", "canary": "v2"}[arm], ExperimentID: "e1", Arm: arm, TS: at,
		}
		if f != nil {
			f(&e)
		}
		return e
	}
	turn := func(k int, ms int64, safety schema.Safety) func(*schema.SessionEvent) {
		return func(e *schema.SessionEvent) { e.Turn, e.LatencyMS, e.Safety = k, ms, safety }
	}
	end := func(turns int, reason schema.EndReason) func(*schema.SessionEvent) {
		return func(e *schema.SessionEvent) { e.Turns, e.Reason = turns, reason }
	}
	events := []schema.SessionEvent{
		ev(schema.SessionStarted, "a", "stable", t0, nil),
		ev(schema.TurnEvent, "a", "stable", t0.Add(time.Second), turn(1, 120, schema.SafetyNone)),
		ev(schema.TurnEvent, "a", "stable", t0.Add(2*time.Second), turn(2, 140, schema.SafetyRefused)),
		ev(schema.SessionEnded, "a", "stable", t0.Add(3*time.Second), end(2, schema.EndPlayerEnded)),
		ev(schema.SessionStarted, "b", "canary", t0, nil),
		ev(schema.TurnEvent, "b", "canary", t0.Add(time.Second), turn(1, 90, schema.SafetyNone)),
		ev(schema.SessionStarted, "x", "canary", t0, func(e *schema.SessionEvent) { e.ExperimentID = "other" }),
	}
	for _, e := range events {
		if err := e.Validate(); err != nil {
			t.Fatalf("fixture event: %v", err)
		}
		if !c.Add(e) {
			t.Errorf("Add(%s) = false; want true for a new event", e.EventID)
		}
	}
	if c.Add(events[1]) {
		t.Error("Add(duplicate) = true; want false")
	}
	c.SetReward("a", 1.5)

	got := c.Sessions("e1")
	if len(got) != 2 {
		t.Fatalf("Sessions(e1) = %d sessions; want 2", len(got))
	}
	a, b := got[0], got[1]
	if a.SessionID != "a" || !a.Done() || a.Turns != 2 || a.Reason != schema.EndPlayerEnded || len(a.Exchanges) != 2 ||
		!a.HasReward || a.Reward != 1.5 || a.Version != "v1" {
		t.Errorf("session a = %+v; want ended after 2 turns with 2 exchanges, reward 1.5, v1", a)
	}
	if b.SessionID != "b" || b.Done() || b.Turns != 1 || b.Arm != "canary" {
		t.Errorf("session b = %+v; want open canary session with 1 turn", b)
	}
	r, err := Analyze("e1", got, DefaultConfig(), t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if r.Stable.All.SafetyRefusalRate != 0.5 || r.Canary.Open != 1 || r.Stable.AvgL.Mean != 2 {
		t.Errorf("report refusal rate %v, canary open %d, stable Avg.L %v; want 0.5, 1, 2",
			r.Stable.All.SafetyRefusalRate, r.Canary.Open, r.Stable.AvgL.Mean)
	}
}
