package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

func testClient(t *testing.T, r *testenv.Redis) *Client {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Prefix = r.Prefix
	cfg.PollInterval = 50 * time.Millisecond
	cfg.FleetTTL = 5 * time.Second
	c, err := New(r.Client, cfg, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// errInvalid stands for any error without a sentinel in TestNext.
var errInvalid = errors.New("invalid request")

func TestNext(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const salt = "0123456789abcdef"
	steady := schema.RolloutState{Deployment: "d", Stable: "v1", State: schema.PhaseSteady, Generation: 4}
	canary := schema.RolloutState{Deployment: "d", Stable: "v1", Canary: "v2", CanaryWeight: 10,
		ExperimentID: "exp", Salt: "s0", Split: 50, State: schema.PhaseCanary, Generation: 5}
	paused := canary
	paused.State = schema.PhasePaused
	rolledBack := canary
	rolledBack.State, rolledBack.CanaryWeight = schema.PhaseRollingBack, 0
	stepped := canary
	stepped.Steps, stepped.Step, stepped.CanaryWeight, stepped.MinStepPlayers = []int{5, 20, 50}, 1, 20, 100
	lastStep := stepped
	lastStep.Step, lastStep.CanaryWeight = 2, 50

	newExp := func(version string, weight, split int, id string) schema.RolloutState {
		return schema.RolloutState{Deployment: "d", Stable: "v1", Canary: version, CanaryWeight: weight,
			ExperimentID: id, Salt: salt, Split: split, State: schema.PhaseCanary}
	}
	with := func(s schema.RolloutState, f func(*schema.RolloutState)) schema.RolloutState {
		s.Steps = slices.Clone(s.Steps)
		f(&s)
		return s
	}
	tests := []struct {
		name    string
		from    schema.RolloutState
		req     Request
		want    schema.RolloutState // Generation, UpdatedBy and UpdatedAt are checked separately
		wantErr error
	}{
		{"canary from steady", steady, Request{Action: ActionCanary, Version: "v2", Weight: 10},
			newExp("v2", 10, 50, "d-v2-g5-01234567"), nil},
		{"canary with experiment id", steady, Request{Action: ActionCanary, Version: "v2", Weight: 10, ExperimentID: "e7"},
			newExp("v2", 10, 50, "e7"), nil},
		{"canary above half", steady, Request{Action: ActionCanary, Version: "v2", Weight: 80},
			newExp("v2", 80, 80, "d-v2-g5-01234567"), nil},
		{"canary with steps", steady, Request{Action: ActionCanary, Version: "v2", Steps: []int{5, 20, 50}, MinStepPlayers: 100},
			with(newExp("v2", 5, 50, "d-v2-g5-01234567"), func(s *schema.RolloutState) { s.Steps, s.MinStepPlayers = []int{5, 20, 50}, 100 }), nil},
		{"steps past half", steady, Request{Action: ActionCanary, Version: "v2", Steps: []int{10, 75}},
			with(newExp("v2", 10, 75, "d-v2-g5-01234567"), func(s *schema.RolloutState) { s.Steps = []int{10, 75} }), nil},
		{"steps falling", steady, Request{Action: ActionCanary, Version: "v2", Steps: []int{20, 5}}, steady, errInvalid},
		{"ramp keeps experiment", canary, Request{Action: ActionCanary, Version: "v2", Weight: 50},
			with(canary, func(s *schema.RolloutState) { s.CanaryWeight = 50 }), nil},
		{"ramp of paused resumes", paused, Request{Action: ActionCanary, Version: "v2", Weight: 20},
			with(canary, func(s *schema.RolloutState) { s.CanaryWeight = 20 }), nil},
		{"lower weight, new experiment", canary, Request{Action: ActionCanary, Version: "v2", Weight: 5},
			newExp("v2", 5, 50, "d-v2-g6-01234567"), nil},
		{"ramp past the split, new experiment", canary, Request{Action: ActionCanary, Version: "v2", Weight: 60},
			newExp("v2", 60, 60, "d-v2-g6-01234567"), nil},
		{"ramp onto a step", stepped, Request{Action: ActionCanary, Version: "v2", Weight: 50},
			with(lastStep, func(*schema.RolloutState) {}), nil},
		{"ramp off the steps", stepped, Request{Action: ActionCanary, Version: "v2", Weight: 30},
			with(canary, func(s *schema.RolloutState) { s.CanaryWeight = 30 }), nil},
		{"new canary version, new experiment", canary, Request{Action: ActionCanary, Version: "v3", Weight: 5},
			newExp("v3", 5, 50, "d-v3-g6-01234567"), nil},
		{"canary after rollback", rolledBack, Request{Action: ActionCanary, Version: "v3", Weight: 5},
			newExp("v3", 5, 50, "d-v3-g6-01234567"), nil},
		{"canary of stable", steady, Request{Action: ActionCanary, Version: "v1", Weight: 10}, steady, ErrTransition},
		{"canary weight 0", steady, Request{Action: ActionCanary, Version: "v2", Weight: 0}, steady, errInvalid},
		{"advance", stepped, Request{Action: ActionAdvance}, lastStep, nil},
		{"advance past the last step", lastStep, Request{Action: ActionAdvance}, lastStep, ErrTransition},
		{"advance without steps", canary, Request{Action: ActionAdvance}, canary, ErrTransition},
		{"advance paused", with(stepped, func(s *schema.RolloutState) { s.State = schema.PhasePaused }), Request{Action: ActionAdvance},
			with(stepped, func(s *schema.RolloutState) { s.State = schema.PhasePaused }), ErrTransition},
		{"promote", stepped, Request{Action: ActionPromote},
			schema.RolloutState{Deployment: "d", Stable: "v2", State: schema.PhaseSteady}, nil},
		{"promote paused", paused, Request{Action: ActionPromote},
			schema.RolloutState{Deployment: "d", Stable: "v2", State: schema.PhaseSteady}, nil},
		{"promote steady", steady, Request{Action: ActionPromote}, steady, ErrTransition},
		{"promote after rollback", rolledBack, Request{Action: ActionPromote}, rolledBack, ErrTransition},
		{"rollback", canary, Request{Action: ActionRollback},
			schema.RolloutState{Deployment: "d", Stable: "v1", Canary: "v2", ExperimentID: "exp", Salt: "s0", Split: 50, State: schema.PhaseRollingBack}, nil},
		{"rollback steady", steady, Request{Action: ActionRollback}, steady, ErrTransition},
		{"pause", canary, Request{Action: ActionPause, Reason: "sample ratio mismatch"},
			with(paused, func(s *schema.RolloutState) { s.PauseReason = "sample ratio mismatch" }), nil},
		{"pause paused", paused, Request{Action: ActionPause}, paused, ErrTransition},
		{"resume", with(paused, func(s *schema.RolloutState) { s.PauseReason = "srm" }), Request{Action: ActionResume}, canary, nil},
		{"resume canary", canary, Request{Action: ActionResume}, canary, ErrTransition},
		{"unknown action", canary, Request{Action: "explode"}, canary, ErrTransition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.By, tt.req.Salt = "alice", salt
			got, err := Next(tt.from, tt.req, at)
			if tt.wantErr == errInvalid && err != nil {
				err = errInvalid
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Next error = %v; want %v", err, tt.wantErr)
			}
			if err != nil {
				if !reflect.DeepEqual(got, tt.from) {
					t.Errorf("Next after error = %+v; want the unchanged %+v", got, tt.from)
				}
				return
			}
			if got.Generation != tt.from.Generation+1 || got.UpdatedBy != "alice" || !got.UpdatedAt.Equal(at) {
				t.Errorf("Next generation, by, at = %d, %q, %v; want %d, alice, %v", got.Generation, got.UpdatedBy, got.UpdatedAt, tt.from.Generation+1, at)
			}
			// A new experiment or a later step begins at the new generation.
			wantStepGen := tt.from.StepGeneration
			if tt.want.ExperimentID != "" && tt.want.ExperimentID != tt.from.ExperimentID || tt.want.Step > tt.from.Step {
				wantStepGen = got.Generation
			}
			if got.StepGeneration != wantStepGen {
				t.Errorf("Next step_generation = %d; want %d", got.StepGeneration, wantStepGen)
			}
			got.Generation, got.StepGeneration, got.UpdatedBy, got.UpdatedAt = 0, 0, "", time.Time{}
			want := tt.want
			want.Generation, want.UpdatedBy, want.UpdatedAt = 0, "", time.Time{}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Next = %+v; want %+v", got, want)
			}
		})
	}
	if _, err := Next(canary, Request{Action: ActionPromote}, at); err == nil {
		t.Error("Next without By succeeded; want an error")
	}
	a, _ := Next(steady, Request{Action: ActionCanary, Version: "v2", Weight: 10, By: "a"}, at)
	b, _ := Next(steady, Request{Action: ActionCanary, Version: "v2", Weight: 10, By: "a"}, at)
	if len(a.Salt) != 16 || a.Salt == b.Salt || a.ExperimentID == b.ExperimentID {
		t.Errorf("two canaries from the same generation: salts %q, %q, experiments %q, %q; want random salts and distinct ids",
			a.Salt, b.Salt, a.ExperimentID, b.ExperimentID)
	}
}

func TestInitGetHistory(t *testing.T) {
	ctx := context.Background()
	r := testenv.StartRedis(t)
	c := testClient(t, r)
	if _, err := c.Get(ctx, "npc"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get before Init error = %v; want ErrNotFound", err)
	}
	sub := r.Client.Subscribe(ctx, c.EventsChannel("npc"))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // subscription confirmed
		t.Fatal(err)
	}

	if _, err := c.Init(ctx, "npc", "v1", "bootstrap"); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if cur, err := c.Init(ctx, "npc", "v9", "someone"); !errors.Is(err, ErrExists) || cur.Stable != "v1" {
		t.Errorf("second Init = %+v, %v; want stable v1, ErrExists", cur, err)
	}
	steps := []Request{
		{Action: ActionCanary, Version: "v2", Weight: 10, By: "alice"},
		{Action: ActionPause, By: "bob", Reason: "lunch"},
		{Action: ActionResume, By: "bob"},
		{Action: ActionCanary, Version: "v2", Weight: 50, By: "alice"},
		{Action: ActionPromote, By: "carol", Reason: "avg.l up"},
	}
	for _, s := range steps {
		if _, err := c.Apply(ctx, "npc", s); err != nil {
			t.Fatalf("Apply(%s): %v", s.Action, err)
		}
	}
	got, err := c.Get(ctx, "npc")
	if err != nil {
		t.Fatal(err)
	}
	if got.Stable != "v2" || got.State != schema.PhaseSteady || got.Generation != 6 || got.UpdatedBy != "carol" {
		t.Errorf("Get after promote = %+v; want steady v2 at generation 6 by carol", got)
	}

	hist, err := c.History(ctx, "npc", 100)
	if err != nil {
		t.Fatal(err)
	}
	wantActions := []string{"init", "canary", "pause", "resume", "canary", "promote"}
	wantBy := []string{"bootstrap", "alice", "bob", "bob", "alice", "carol"}
	if len(hist) != len(wantActions) {
		t.Fatalf("History has %d changes; want %d", len(hist), len(wantActions))
	}
	for i, ch := range hist {
		if ch.Action != wantActions[i] || ch.By != wantBy[i] || ch.To.Generation != int64(i+1) || ch.From.Generation != int64(i) || ch.At.IsZero() {
			t.Errorf("History[%d] = %s by %s, %d→%d; want %s by %s, %d→%d",
				i, ch.Action, ch.By, ch.From.Generation, ch.To.Generation, wantActions[i], wantBy[i], i, i+1)
		}
	}
	if hist[2].Reason != "lunch" || hist[5].From.Canary != "v2" || hist[5].To.Stable != "v2" {
		t.Errorf("History keeps reason %q and promote from canary %q to stable %q; want lunch, v2, v2",
			hist[2].Reason, hist[5].From.Canary, hist[5].To.Stable)
	}

	// Every change was also announced, in order.
	for i := range wantActions {
		m, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`"action":%q`, wantActions[i]); !strings.Contains(m.Payload, want) {
			t.Errorf("announcement %d = %s; want it to contain %s", i, m.Payload, want)
		}
	}
}

func TestConcurrentChangesOneWins(t *testing.T) {
	ctx := context.Background()
	r := testenv.StartRedis(t)
	c := testClient(t, r)
	if _, err := c.Init(ctx, "npc", "v1", "bootstrap"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Canary(ctx, "npc", "v2", 10, "alice"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  func(i int, gen int64) Request
		ok   []error // errors the losers may get
	}{
		{"promotes", func(i int, _ int64) Request {
			return Request{Action: ActionPromote, By: fmt.Sprintf("op%d", i)}
		}, []error{ErrConflict, ErrTransition}},
		{"canaries at one generation", func(i int, gen int64) Request {
			return Request{Action: ActionCanary, Version: "v3", Weight: i + 1, By: fmt.Sprintf("op%d", i), Generation: &gen}
		}, []error{ErrConflict}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const n = 16
			cur, err := c.Get(ctx, "npc")
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			start := make(chan struct{})
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					<-start
					_, errs[i] = c.Apply(ctx, "npc", tt.req(i, cur.Generation))
				})
			}
			close(start)
			wg.Wait()
			wins := 0
			for i, err := range errs {
				if err == nil {
					wins++
					continue
				}
				if !errors.Is(err, tt.ok[0]) && (len(tt.ok) < 2 || !errors.Is(err, tt.ok[1])) {
					t.Errorf("change %d error = %v; want one of %v", i, err, tt.ok)
				}
			}
			if wins != 1 {
				t.Errorf("%d of %d concurrent changes won; want exactly 1", wins, n)
			}
			hist, err := c.History(ctx, "npc", 100)
			if err != nil {
				t.Fatal(err)
			}
			for i, ch := range hist {
				if ch.To.Generation != int64(i+1) {
					t.Errorf("History[%d] generation %d; want %d (one change per generation)", i, ch.To.Generation, i+1)
				}
			}
		})
	}
}

// watchLog collects what Watch delivers.
type watchLog struct {
	mu     sync.Mutex
	states []schema.RolloutState
	ch     chan schema.RolloutState
}

func (w *watchLog) fn(s schema.RolloutState) {
	w.mu.Lock()
	w.states = append(w.states, s)
	w.mu.Unlock()
	w.ch <- s
}

func (w *watchLog) await(t *testing.T, generation int64) schema.RolloutState {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case s := <-w.ch:
			if s.Generation >= generation {
				return s
			}
		case <-timeout:
			t.Fatalf("watcher did not deliver generation %d within 10s", generation)
		}
	}
}

func TestWatchKeepsLastStateWhileRedisIsDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := testenv.StartRedis(t)
	c := testClient(t, r)
	if _, err := c.Init(ctx, "npc", "v1", "bootstrap"); err != nil {
		t.Fatal(err)
	}
	w := &watchLog{ch: make(chan schema.RolloutState, 100)}
	done := make(chan error)
	go func() { done <- c.Watch(ctx, "npc", "gw-1", w.fn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch returned %v; want nil", err)
		}
	})

	w.await(t, 1)
	if _, err := c.Canary(ctx, "npc", "v2", 20, "alice"); err != nil {
		t.Fatal(err)
	}
	if s := w.await(t, 2); s.Canary != "v2" || s.CanaryWeight != 20 {
		t.Fatalf("watched canary = %+v; want v2 at 20", s)
	}

	r.Stop()
	// Twenty poll intervals without Redis: nothing may be delivered, so the
	// gateway goes on serving generation 2.
	time.Sleep(20 * c.cfg.PollInterval)
	select {
	case s := <-w.ch:
		t.Fatalf("watcher delivered %+v while Redis was down; want nothing", s)
	default:
	}

	r.Start() // empty: the server keeps nothing on disk
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := c.Get(ctx, "npc")
		if err == nil && s.Generation == 2 && s.Canary == "v2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state after Redis restart = %+v, %v; want generation 2 restored by the watcher", s, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := c.Promote(ctx, "npc", "alice", "looks good"); err != nil {
		t.Fatal(err)
	}
	if s := w.await(t, 3); s.Stable != "v2" || s.State != schema.PhaseSteady {
		t.Errorf("watched after recovery = %+v; want steady v2", s)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := 1; i < len(w.states); i++ {
		if w.states[i].Generation <= w.states[i-1].Generation {
			t.Errorf("watcher delivered generation %d after %d; want increasing", w.states[i].Generation, w.states[i-1].Generation)
		}
	}
}

func TestWatchPollsWhenAnnouncementIsLost(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := testenv.StartRedis(t)
	c := testClient(t, r)
	if _, err := c.Init(ctx, "npc", "v1", "bootstrap"); err != nil {
		t.Fatal(err)
	}
	w := &watchLog{ch: make(chan schema.RolloutState, 100)}
	go c.Watch(ctx, "npc", "gw-1", w.fn)
	w.await(t, 1)
	// Change the hash behind the watcher's back, with no announcement.
	if err := r.Client.HSet(ctx, c.StateKey("npc"), "generation", "7", "stable", "v7").Err(); err != nil {
		t.Fatal(err)
	}
	if s := w.await(t, 7); s.Stable != "v7" {
		t.Errorf("polled state = %+v; want stable v7", s)
	}
}

func TestAssignStickyAndSplitsByWeight(t *testing.T) {
	const players = 20000
	for _, salt := range []string{"exp-a", "exp-b"} {
		for _, weight := range []int{10, 50} {
			t.Run(fmt.Sprintf("%s/weight=%d", salt, weight), func(t *testing.T) {
				canary := 0
				for i := range players {
					id := fmt.Sprintf("player-%d", i)
					arm := Assign(id, salt, weight)
					if again := Assign(id, salt, weight); again != arm {
						t.Fatalf("Assign(%s) = %s then %s; want sticky", id, arm, again)
					}
					if arm == schema.ArmCanary {
						canary++
					}
				}
				// Chi-square goodness of fit, 1 degree of freedom:
				// p = erfc(sqrt(χ²/2)).
				ec := float64(players*weight) / 100
				es := float64(players) - ec
				chi2 := sq(float64(canary)-ec)/ec + sq(float64(players-canary)-es)/es
				p := math.Erfc(math.Sqrt(chi2 / 2))
				t.Logf("weight %d: %d of %d on canary, chi2 %.3f, p %.3f", weight, canary, players, chi2, p)
				if p <= 0.001 {
					t.Errorf("split at weight %d: %d of %d canary, chi2 %.2f, p %.5f; want p > 0.001", weight, canary, players, chi2, p)
				}
			})
		}
	}
	// Raising the weight only moves players onto canary; a new salt reshuffles.
	moved, reshuffled := 0, 0
	for i := range players {
		id := fmt.Sprintf("player-%d", i)
		if Assign(id, "exp-a", 10) == schema.ArmCanary && Assign(id, "exp-a", 50) != schema.ArmCanary {
			moved++
		}
		if Assign(id, "exp-a", 50) != Assign(id, "exp-b", 50) {
			reshuffled++
		}
	}
	if moved != 0 {
		t.Errorf("%d players left canary when the weight rose from 10 to 50; want 0", moved)
	}
	if reshuffled < players/4 {
		t.Errorf("%d of %d players changed arm with a new salt; want about half", reshuffled, players)
	}
	for _, tt := range []struct {
		weight int
		want   string
	}{{0, schema.ArmStable}, {100, schema.ArmCanary}} {
		for i := range 1000 {
			if got := Assign(fmt.Sprint(i), "s", tt.weight); got != tt.want {
				t.Fatalf("Assign(weight %d) = %s; want %s", tt.weight, got, tt.want)
			}
		}
	}
}

func sq(x float64) float64 { return x * x }

func TestRoute(t *testing.T) {
	s := schema.RolloutState{Deployment: "d", Stable: "v1", Canary: "v2", CanaryWeight: 100, ExperimentID: "e", State: schema.PhaseCanary}
	for _, tt := range []struct {
		phase            schema.RolloutPhase
		wantArm, wantVer string
	}{
		{schema.PhaseCanary, schema.ArmCanary, "v2"},
		{schema.PhasePaused, schema.ArmHeld, "v1"},
		{schema.PhaseRollingBack, schema.ArmStable, "v1"},
	} {
		s.State = tt.phase
		if tt.phase == schema.PhaseRollingBack {
			s.CanaryWeight = 0
		}
		if arm, v := Route(s, "p1"); arm != tt.wantArm || v != tt.wantVer {
			t.Errorf("Route(%s) = %s, %s; want %s, %s", tt.phase, arm, v, tt.wantArm, tt.wantVer)
		}
	}
}

// exposures counts the arms Expose gives n players under s ("" for those
// outside the experiment).
func exposures(s schema.RolloutState, n int) map[string]int {
	out := map[string]int{}
	for i := range n {
		e := Expose(s, fmt.Sprintf("player-%d", i))
		arm := e.Arm
		if e.ExperimentID == "" {
			arm = ""
		}
		out[arm]++
	}
	return out
}

func TestExposeSplitsByWeight(t *testing.T) {
	const players = 20000
	for _, tt := range []struct{ weight, split int }{{5, 50}, {20, 50}, {50, 50}, {80, 80}} {
		t.Run(fmt.Sprintf("weight=%d", tt.weight), func(t *testing.T) {
			s := schema.RolloutState{Deployment: "d", Stable: "v1", Canary: "v2", CanaryWeight: tt.weight,
				ExperimentID: "e", Salt: "9f86d081884c7d65", Split: tt.split, State: schema.PhaseCanary, Generation: 3}
			got := exposures(s, players)
			// Chi-square goodness of fit over canary, stable in the
			// experiment and outside it: p = exp(-χ²/2) at 2 degrees of
			// freedom (one fewer when the experiment covers everyone).
			coverage := float64(tt.weight) / float64(tt.split)
			want := map[string]float64{
				schema.ArmCanary: float64(players*tt.weight) / 100,
				schema.ArmStable: players * coverage * float64(100-tt.split) / 100,
				"":               players * (1 - coverage),
			}
			chi2 := 0.0
			for arm, e := range want {
				if e == 0 {
					if got[arm] != 0 {
						t.Errorf("%d players in %q; want none", got[arm], arm)
					}
					continue
				}
				chi2 += sq(float64(got[arm])-e) / e
			}
			p := math.Exp(-chi2 / 2)
			t.Logf("weight %d: %v, chi2 %.3f, p %.3f", tt.weight, got, chi2, p)
			if p <= 0.001 {
				t.Errorf("weight %d: %v, chi2 %.2f, p %.5f; want p > 0.001 against %v", tt.weight, got, chi2, p, want)
			}
		})
	}
}

func TestRampMovesNobodyBetweenArms(t *testing.T) {
	const players = 20000
	from := schema.RolloutState{Deployment: "d", Stable: "v1", State: schema.PhaseSteady, Generation: 1}
	st, err := Next(from, Request{Action: ActionCanary, Version: "v2", Steps: []int{5, 20, 50}, By: "t"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	arms := map[string]string{} // player → the arm of their first exposure in the experiment
	covered := 0
	for step := range 3 {
		if step > 0 {
			next, err := Next(st, Request{Action: ActionAdvance, By: "t"}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if next.ExperimentID != st.ExperimentID || next.Salt != st.Salt {
				t.Fatalf("advance to %d%% changed the experiment %s/%s to %s/%s", next.CanaryWeight, st.ExperimentID, st.Salt, next.ExperimentID, next.Salt)
			}
			st = next
		}
		n := 0
		for i := range players {
			id := fmt.Sprintf("player-%d", i)
			e := Expose(st, id)
			if e.ExperimentID == "" {
				if _, was := arms[id]; was {
					t.Fatalf("at %d%% %s left the experiment", st.CanaryWeight, id)
				}
				continue
			}
			n++
			if e.Salt != st.Salt || e.Generation != st.Generation {
				t.Fatalf("exposure %+v; want salt %s generation %d", e, st.Salt, st.Generation)
			}
			if was, ok := arms[id]; ok && was != e.Arm {
				t.Fatalf("at %d%% %s moved from %s to %s", st.CanaryWeight, id, was, e.Arm)
			}
			arms[id] = e.Arm
		}
		if n <= covered {
			t.Errorf("at %d%% the experiment covers %d players, at the step before %d; want more", st.CanaryWeight, n, covered)
		}
		covered = n
		t.Logf("step %d: weight %d%%, %d players in the experiment", st.Step, st.CanaryWeight, n)
	}
	paused, err := Next(st, Request{Action: ActionPause, By: "t", Reason: "srm"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := exposures(paused, players); got[schema.ArmCanary] != 0 || got[schema.ArmStable] != 0 || got[schema.ArmHeld] != covered {
		t.Errorf("paused: %v; want all %d covered players held, none in an arm", got, covered)
	}
}

func TestFleet(t *testing.T) {
	ctx := context.Background()
	r := testenv.StartRedis(t)
	c := testClient(t, r)
	for _, in := range []Instance{
		{Deployment: "npc", Instance: "gw-b", Generation: 3, Stable: "v1", Canary: "v2", Loaded: []string{"v1", "v2"}, Sessions: 4},
		{Deployment: "npc", Instance: "gw-a", Generation: 3, Stable: "v1", Loaded: []string{"v1"}, Loading: "v2"},
		{Deployment: "npc:eu", Instance: "gw-c", Generation: 1, Stable: "v1"},
	} {
		if err := c.Heartbeat(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.Fleet(ctx, "npc")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Instance != "gw-a" || got[1].Instance != "gw-b" {
		t.Fatalf("Fleet(npc) = %+v; want gw-a, gw-b", got)
	}
	if b := got[1]; b.Canary != "v2" || len(b.Loaded) != 2 || b.Sessions != 4 || b.Generation != 3 || b.UpdatedAt.IsZero() {
		t.Errorf("Fleet gw-b = %+v; want canary v2, loaded [v1 v2], 4 sessions, generation 3", b)
	}
	if got[0].Loading != "v2" {
		t.Errorf("Fleet gw-a loading = %q; want v2", got[0].Loading)
	}
	if ttl := r.Client.PTTL(ctx, c.FleetKey("npc", "gw-a")).Val(); ttl <= 0 || ttl > c.cfg.FleetTTL {
		t.Errorf("fleet entry TTL = %v; want in (0, %v]", ttl, c.cfg.FleetTTL)
	}
	if err := c.Leave(ctx, "npc", "gw-a"); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Fleet(ctx, "npc"); len(got) != 1 {
		t.Errorf("Fleet after Leave = %d instances; want 1", len(got))
	}
}
