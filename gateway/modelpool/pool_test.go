package modelpool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/inference/registry"
	"github.com/parleyhq/parley/schema"
)

// fixture is a registry holding tiny real checkpoints v1, v2 and v3, which
// differ only in their random weights.
type fixture struct {
	store *registry.Local
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	tok, err := inference.TrainTokenizer([]string{
		"Welcome, traveller! The inn has warm bread and cold ale.",
		"I have not seen the dragon since the winter. Ask the guard.",
	}, 300)
	if err != nil {
		t.Fatal(err)
	}
	cfg := inference.DefaultModelConfig()
	cfg.VocabSize, cfg.Dim, cfg.Layers, cfg.Heads, cfg.FFNDim, cfg.MaxSeq = tok.VocabSize(), 32, 1, 2, 64, 64
	store, err := registry.NewLocal(filepath.Join(t.TempDir(), "registry"))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range []string{"v1", "v2", "v3"} {
		m, err := inference.NewModel(cfg, inference.DefaultBackendConfig(), int64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), v)
		man := schema.Manifest{Model: "npc", Version: v, Algorithm: "sft", CreatedAt: time.Date(2026, 11, 30, 12, i, 0, 0, time.UTC)}
		if err := inference.SaveCheckpoint(dir, m, tok, man); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Publish(context.Background(), "npc", v, dir); err != nil {
			t.Fatal(err)
		}
	}
	return &fixture{store: store}
}

// corrupt flips one byte of a stored version's weights.
func (f *fixture) corrupt(t *testing.T, version string) {
	t.Helper()
	p := filepath.Join(f.store.Dir("npc", version), inference.WeightsFile)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0x40
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// rawFetcher copies a version without checking it, so that only the
// factory's own verification (inference.LoadCheckpoint) stands between a
// corrupt file and the pool.
type rawFetcher struct{ root string }

func (r rawFetcher) Fetch(ctx context.Context, model, version, dst string) (schema.Manifest, error) {
	if err := os.CopyFS(dst, os.DirFS(filepath.Join(r.root, model, version))); err != nil {
		return schema.Manifest{}, err
	}
	return schema.Manifest{}, nil
}

func startPool(t *testing.T, store Fetcher, maxResident int) *Pool[*inference.Engine] {
	t.Helper()
	cfg := DefaultConfig()
	cfg.MaxResident = maxResident
	cfg.WorkDir = filepath.Join(t.TempDir(), "work")
	ecfg := inference.DefaultEngineConfig()
	ecfg.MaxBatch, ecfg.QueueSize = 4, 16
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	p, err := New(cfg, store, InferenceFactory(inference.DefaultBackendConfig(), ecfg, 4, log), log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v; want nil", err)
		}
		p.Close()
	})
	return p
}

// state returns a rollout state at generation gen.
func state(gen int64, phase schema.RolloutPhase, stable, canary string, weight int) schema.RolloutState {
	return schema.RolloutState{Deployment: "npc", Stable: stable, Canary: canary, CanaryWeight: weight,
		ExperimentID: "e", State: phase, Generation: gen, UpdatedBy: "test", UpdatedAt: time.Now()}
}

func await(t *testing.T, p *Pool[*inference.Engine], what string, cond func(Status) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A refused version also ends the wait, so that a broken load fails
	// the test at once.
	err := p.Wait(ctx, func(s Status) bool { return cond(s) || len(s.Failed) > 0 })
	if st := p.Status(); err != nil || !cond(st) {
		t.Fatalf("waiting for %s: %v; status %+v", what, err, st)
	}
}

func serving(g int64) func(Status) bool {
	return func(s Status) bool { return s.Serving.Generation == g }
}

// generate runs a short greedy generation on e.
func generate(ctx context.Context, e *inference.Engine) error {
	s, err := e.Generate(ctx, inference.Request{Prompt: []int{1, 2, 3}, MaxTokens: 4, Stop: []int{}})
	if err != nil {
		return err
	}
	_, err = s.Wait()
	return err
}

// fingerprint identifies the weights behind e by a few next-token logits.
func fingerprint(t *testing.T, e *inference.Engine) string {
	t.Helper()
	logits, err := e.Model().LastLogits([][]int{{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(logits[0][:4])
}

func TestCorruptCandidateIsRefused(t *testing.T) {
	tests := []struct {
		name    string
		fetcher func(f *fixture) Fetcher
		wantErr error
	}{
		{"registry verifies", func(f *fixture) Fetcher { return f.store }, registry.ErrChecksum},
		{"checkpoint loader verifies", func(f *fixture) Fetcher { return rawFetcher{f.store.Root()} }, inference.ErrChecksum},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t)
			p := startPool(t, tt.fetcher(f), 3)
			steady := state(1, schema.PhaseSteady, "v1", "", 0)
			p.Apply(steady)
			await(t, p, "v1", serving(steady.Generation))

			f.corrupt(t, "v2")
			p.Apply(state(2, schema.PhaseCanary, "v1", "v2", 50))
			await(t, p, "v2 refused", func(s Status) bool { return s.Failed["v2"] != "" })

			if got := p.Serving(); got.Generation != steady.Generation || got.Stable != "v1" || got.Canary != "" {
				t.Errorf("Serving after a corrupt canary = %+v; want generation %d, stable v1, no canary", got, steady.Generation)
			}
			if st := p.Status(); !slices.Equal(st.Loaded, []string{"v1"}) || len(st.Loading) != 0 {
				t.Errorf("Status loaded %v, loading %v; want [v1], none", st.Loaded, st.Loading)
			}
			in := p.Status().Instance("npc", "gw-1")
			if in.Generation != steady.Generation || in.Stable != "v1" || !slices.Equal(in.Loaded, []string{"v1"}) ||
				!strings.HasPrefix(in.LastError, "v2: ") {
				t.Errorf("fleet entry = %+v; want generation %d, stable v1, loaded [v1], last error about v2", in, steady.Generation)
			}
			_, _, err := p.Acquire(ctx, "v2")
			if !errors.Is(err, ErrRefused) || !errors.Is(err, tt.wantErr) {
				t.Errorf("Acquire(v2) error = %v; want ErrRefused wrapping %v", err, tt.wantErr)
			}
			e, release, err := p.Acquire(ctx, "v1")
			if err != nil {
				t.Fatalf("Acquire(v1): %v", err)
			}
			defer release()
			if err := generate(ctx, e); err != nil {
				t.Errorf("generate on stable v1 after the refusal: %v", err)
			}
		})
	}
}

func TestSessionKeepsVersionAfterPromote(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	p := startPool(t, f.store, 3)
	s1 := state(1, schema.PhaseSteady, "v1", "", 0)
	p.Apply(s1)
	await(t, p, "v1", serving(s1.Generation))

	v1, endSession, err := p.Acquire(ctx, "v1") // a session starts on v1
	if err != nil {
		t.Fatal(err)
	}
	before := fingerprint(t, v1)
	s2 := state(2, schema.PhaseCanary, "v1", "v2", 10)
	p.Apply(s2)
	await(t, p, "canary v2", serving(s2.Generation))
	s3 := state(3, schema.PhaseSteady, "v2", "", 0)
	p.Apply(s3)
	await(t, p, "promoted v2", serving(s3.Generation))

	if st := p.Status(); !slices.Equal(st.Loaded, []string{"v1", "v2"}) || st.Sessions["v1"] != 1 {
		t.Errorf("after promote: loaded %v, v1 sessions %d; want [v1 v2] with 1 session on v1", st.Loaded, st.Sessions["v1"])
	}
	if err := generate(ctx, v1); err != nil {
		t.Fatalf("the v1 session's next turn after the promote: %v", err)
	}
	if after := fingerprint(t, v1); after != before {
		t.Errorf("v1 logits after promote = %s; want %s as before (same weights)", after, before)
	}
	v2, endV2, err := p.Acquire(ctx, "v2")
	if err != nil {
		t.Fatal(err)
	}
	defer endV2()
	if err := generate(ctx, v2); err != nil {
		t.Errorf("generate on v2: %v", err)
	}
	if got := fingerprint(t, v2); got == before {
		t.Errorf("v2 logits = %s; want different from v1's", got)
	}

	endSession()
	endSession() // release is idempotent
	await(t, p, "v1 released", func(s Status) bool { return slices.Equal(s.Loaded, []string{"v2"}) })
	if err := generate(ctx, v1); !errors.Is(err, inference.ErrClosed) {
		t.Errorf("generate on released v1 error = %v; want inference.ErrClosed", err)
	}
}

func TestEvictionRespectsRefcounts(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	p := startPool(t, f.store, 2)
	s1 := state(1, schema.PhaseSteady, "v1", "", 0)
	p.Apply(s1)
	await(t, p, "v1", serving(s1.Generation))
	v1, endSession, err := p.Acquire(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}

	s2 := state(2, schema.PhaseSteady, "v2", "", 0)
	p.Apply(s2)
	await(t, p, "v2", serving(s2.Generation))
	// Two slots: v1 (held by the session) and v2 (stable). The canary v3
	// must wait; meanwhile the pool serves generation 3 with it paused.
	s3 := state(3, schema.PhaseCanary, "v2", "v3", 50)
	p.Apply(s3)
	await(t, p, "interim", func(s Status) bool {
		return s.Serving.Generation == s3.Generation && s.Serving.State == schema.PhasePaused
	})
	if st := p.Status(); !slices.Equal(st.Loaded, []string{"v1", "v2"}) || len(st.Loading) != 0 {
		t.Errorf("while v1 is held: loaded %v, loading %v; want [v1 v2], none", st.Loaded, st.Loading)
	}
	if _, _, err := p.Acquire(ctx, "v3"); !errors.Is(err, ErrFull) {
		t.Errorf("Acquire(v3) with both slots in use error = %v; want ErrFull", err)
	}
	if err := generate(ctx, v1); err != nil {
		t.Errorf("held v1 must stay open: %v", err)
	}

	endSession()
	await(t, p, "canary v3", func(s Status) bool {
		return s.Serving.Generation == s3.Generation && s.Serving.State == schema.PhaseCanary
	})
	if st := p.Status(); !slices.Equal(st.Loaded, []string{"v2", "v3"}) {
		t.Errorf("after the session ended: loaded %v; want [v2 v3]", st.Loaded)
	}
}

func TestDirectJumpWithTwoSlots(t *testing.T) {
	f := newFixture(t)
	p := startPool(t, f.store, 2)
	s1 := state(1, schema.PhaseCanary, "v1", "v2", 10)
	p.Apply(s1)
	await(t, p, "canary v2", serving(s1.Generation))
	// The watcher missed the promote: straight from (v1, v2) to (v2, v3).
	s2 := state(2, schema.PhaseCanary, "v2", "v3", 10)
	p.Apply(s2)
	await(t, p, "canary v3", func(s Status) bool {
		return s.Serving.Generation == s2.Generation && s.Serving.State == schema.PhaseCanary
	})
	if st := p.Status(); !slices.Equal(st.Loaded, []string{"v2", "v3"}) {
		t.Errorf("loaded %v; want [v2 v3]", st.Loaded)
	}
}
