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
// rollout.Route gives each player a sticky arm and its version, and the
// session pins both (with the experiment id while a canary runs). Each
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
	arm, version := rollout.Route(st, playerID)
	a := Assignment{PolicyVersion: version, Arm: arm}
	if st.Canary != "" {
		a.ExperimentID = st.ExperimentID
	}
	return a, nil
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
