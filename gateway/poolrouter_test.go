package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/parleyhq/parley/gateway/modelpool"
	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
)

// nopFetcher fetches nothing: the test factory builds its models itself.
type nopFetcher struct{}

func (nopFetcher) Fetch(context.Context, string, string, string) (schema.Manifest, error) {
	return schema.Manifest{}, nil
}

func TestPoolRouterPinsVersionAndArm(t *testing.T) {
	tok := testTokenizer(t)
	f := modelpool.Factory[*inference.Engine]{
		Load: func(_ context.Context, version, _ string) (*inference.Engine, error) {
			seed := int64(len(version))
			m, err := inference.NewModel(inference.ModelConfig{VocabSize: tok.VocabSize(), Dim: 32, Layers: 1, Heads: 2,
				FFNDim: 64, MaxSeq: 256, RopeBase: 10000, NormEps: 1e-5}, inference.DefaultBackendConfig(), seed)
			if err != nil {
				return nil, err
			}
			e, err := inference.NewEngine(m, tok, inference.DefaultEngineConfig(), nil)
			if err != nil {
				return nil, err
			}
			go func() { _ = e.Run(context.Background()) }()
			return e, nil
		},
		Close: func(e *inference.Engine) error { return e.Close() },
	}
	cfg := modelpool.DefaultConfig()
	cfg.WorkDir = t.TempDir()
	pool, err := modelpool.New(cfg, nopFetcher{}, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	e := newEnv(t, nil, func(_ *Config, d *Deps) { d.Router = PoolRouter(pool) })
	assertError(t, e.do("GET", "/readyz", "", nil), http.StatusServiceUnavailable, "unavailable")

	serve := func(s schema.RolloutState) {
		t.Helper()
		pool.Apply(s)
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		if err := pool.Wait(wctx, func(st modelpool.Status) bool { return st.Serving.Generation == s.Generation }); err != nil {
			t.Fatalf("pool did not serve generation %d: %v", s.Generation, err)
		}
	}
	serve(schema.RolloutState{Deployment: "companion", Stable: "v1", State: schema.PhaseSteady, Generation: 1})
	if r := e.do("GET", "/readyz", "", nil); r.status != http.StatusOK {
		t.Fatalf("readyz with v1 served = %d; want 200", r.status)
	}
	old := e.createSession(e.key, "player-old")
	if old.PolicyVersion != "v1" || old.Arm != schema.ArmStable {
		t.Errorf("session before the canary = %s/%s; want v1/stable", old.PolicyVersion, old.Arm)
	}
	serve(schema.RolloutState{Deployment: "companion", Stable: "v1", Canary: "v22", CanaryWeight: 100,
		ExperimentID: "exp-1", State: schema.PhaseCanary, Generation: 2})
	canary := e.createSession(e.key, "player-new")
	if canary.PolicyVersion != "v22" || canary.Arm != schema.ArmCanary {
		t.Errorf("session during a 100%% canary = %s/%s; want v22/canary", canary.PolicyVersion, canary.Arm)
	}
	e.say(e.key, old.SessionID, "still on the first version?")
	e.say(e.key, canary.SessionID, "hello canary")
	for _, ev := range e.events.ofType(schema.TurnEvent) {
		want := map[string]string{old.SessionID: "v1", canary.SessionID: "v22"}[ev.SessionID]
		if ev.PolicyVersion != want {
			t.Errorf("turn of %s on %s; want %s", ev.SessionID, ev.PolicyVersion, want)
		}
		if ev.SessionID == canary.SessionID && (ev.ExperimentID != "exp-1" || ev.Arm != schema.ArmCanary) {
			t.Errorf("canary turn: experiment %q arm %q; want exp-1 canary", ev.ExperimentID, ev.Arm)
		}
	}

	// A paused experiment holds its players on stable, logged as held with
	// the experiment's salt and the generation that assigned them.
	serve(schema.RolloutState{Deployment: "companion", Stable: "v1", Canary: "v22", CanaryWeight: 50,
		ExperimentID: "exp-2", Salt: "5a17", Split: 50, State: schema.PhasePaused, Generation: 3})
	held := e.createSession(e.key, "player-held")
	if held.PolicyVersion != "v1" || held.Arm != schema.ArmHeld {
		t.Errorf("session during a paused canary = %s/%s; want v1/held", held.PolicyVersion, held.Arm)
	}
	e.say(e.key, held.SessionID, "hello")
	for _, ev := range e.events.ofType(schema.TurnEvent) {
		if ev.SessionID == held.SessionID && (ev.ExperimentID != "exp-2" || ev.Salt != "5a17" || ev.Generation != 3 || ev.Arm != schema.ArmHeld) {
			t.Errorf("held turn: experiment %q salt %q generation %d arm %q; want exp-2 5a17 3 held", ev.ExperimentID, ev.Salt, ev.Generation, ev.Arm)
		}
	}
}
