package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/parleyhq/parley/gateway/modelpool"
	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/rollout"
)

// PoolRouter routes new sessions by the rollout state that pool serves:
// rollout.Expose gives each player a sticky arm and its version, and the
// session pins both (with the experiment, its salt and the generation when
// the player is in a running or paused experiment). Each
// request holds its session's version in the pool only while it is
// answered, so a session pinned to a version that was promoted away still
// finds it (the pool reloads it if it was evicted and a slot is free).
func PoolRouter(pool *modelpool.Pool[*inference.Engine]) Router { return poolRouter{pool} }

type poolRouter struct {
	pool *modelpool.Pool[*inference.Engine]
}

func (r poolRouter) Assign(_ context.Context, playerID string) (Assignment, error) {
	st := r.pool.Serving()
	if st.Stable == "" {
		return Assignment{}, fmt.Errorf("%w: no version served yet", ErrUnavailable)
	}
	e := rollout.Expose(st, playerID)
	return Assignment{PolicyVersion: e.Version, Arm: e.Arm, ExperimentID: e.ExperimentID, Salt: e.Salt, Generation: e.Generation}, nil
}

func (r poolRouter) Acquire(ctx context.Context, version string) (Generator, func(), error) {
	e, release, err := r.pool.Acquire(ctx, version)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return FromEngine(e), release, nil
}

func (r poolRouter) Ready() error {
	if r.pool.Serving().Stable == "" {
		return errors.New("no model version loaded yet")
	}
	return nil
}
