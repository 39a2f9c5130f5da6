package modelpool

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleyhq/parley/gateway/rollout"
	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

// TestTwoGatewaysSwapUnderLoad runs two "gateways" (a pool following the
// rollout state through its own watcher) on one Redis under steady request
// load, and makes ten canary-then-promote swaps: every request must succeed
// and both pools must serve every promoted generation. The time from each
// promote to both pools serving it is logged, not asserted.
func TestTwoGatewaysSwapUnderLoad(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFixture(t)
	r := testenv.StartRedis(t)
	rcfg := rollout.DefaultConfig()
	rcfg.Prefix = r.Prefix
	rc, err := rollout.New(r.Client, rcfg, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Init(ctx, "npc", "v1", "test"); err != nil {
		t.Fatal(err)
	}

	var pools []*Pool[*inference.Engine]
	for i := range 2 {
		p := startPool(t, f.store, 3)
		pools = append(pools, p)
		go rc.Watch(ctx, "npc", fmt.Sprintf("gw-%d", i), p.Apply)
	}
	awaitAll := func(gen int64) time.Duration {
		start := time.Now()
		for _, p := range pools {
			await(t, p, fmt.Sprintf("generation %d", gen), func(s Status) bool {
				return s.Serving.Generation >= gen && s.Serving.State != schema.PhasePaused
			})
		}
		return time.Since(start)
	}
	awaitAll(1)

	var ok, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	loadCtx, stopLoad := context.WithCancel(ctx)
	for g, p := range pools {
		for w := range 2 {
			wg.Go(func() {
				for n := 0; loadCtx.Err() == nil; n++ {
					player := fmt.Sprintf("p-%d-%d-%d", g, w, n)
					_, e, release, err := p.AcquireServing(loadCtx, func(s schema.RolloutState) string {
						_, v := rollout.Route(s, player)
						return v
					})
					if err == nil {
						err = generate(loadCtx, e)
						release()
					}
					switch {
					case err == nil:
						ok.Add(1)
					case loadCtx.Err() != nil:
					default:
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
				}
			})
		}
	}

	versions := []string{"v1", "v2", "v3"}
	var worst, total time.Duration
	for i := range 10 {
		next := versions[(i+1)%len(versions)]
		ch, err := rc.Canary(ctx, "npc", next, 50, "test")
		if err != nil {
			t.Fatal(err)
		}
		awaitAll(ch.To.Generation)
		ch, err = rc.Promote(ctx, "npc", "test", "swap")
		if err != nil {
			t.Fatal(err)
		}
		d := awaitAll(ch.To.Generation)
		worst, total = max(worst, d), total+d
	}
	stopLoad()
	wg.Wait()
	t.Logf("10 swaps: %d requests served, %d failed; promote → both pools serving: mean %v, worst %v",
		ok.Load(), failed.Load(), total/10, worst)
	if failed.Load() != 0 {
		t.Errorf("%d requests failed during the swaps (first: %v); want 0", failed.Load(), firstErr.Load())
	}
	if ok.Load() == 0 {
		t.Error("no request was served")
	}
	for i, p := range pools {
		if st := p.Status(); st.Serving.Stable != versions[10%len(versions)] || len(st.Loaded) > 3 {
			t.Errorf("gateway %d: serving %s with %v loaded; want stable %s, at most 3 loaded", i, st.Serving.Stable, st.Loaded, versions[10%len(versions)])
		}
	}
}
