package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/parleyhq/parley/schema"
)

// Watch follows a deployment's rollout state until ctx is done, calling fn
// (from one goroutine, in generation order) with every state newer than the
// last it delivered. It listens to the events channel and also reads the
// hash every PollInterval, because pub/sub drops messages while a
// connection is down.
//
// While Redis is unreachable fn is not called, so the caller keeps serving
// the last state it was given. When Redis comes back without the state, or
// with an older generation (it restarted and lost its data), Watch writes
// the last known state back (Client.Restore, author by) so that the fleet's
// generation stays monotonic. Watch returns nil when ctx is done.
func (c *Client) Watch(ctx context.Context, deployment, by string, fn func(schema.RolloutState)) error {
	ps := c.rdb.Subscribe(ctx, c.EventsChannel(deployment))
	defer ps.Close()
	msgs := ps.Channel()
	tick := time.NewTicker(c.cfg.PollInterval)
	defer tick.Stop()

	var last schema.RolloutState
	down := false
	deliver := func(s schema.RolloutState) {
		if s.Generation > last.Generation {
			last = s
			fn(s)
		}
	}
	poll := func() {
		s, err := c.Get(ctx, deployment)
		switch {
		case err == nil && s.Generation >= last.Generation:
			deliver(s)
		case err == nil || errors.Is(err, ErrNotFound):
			if last.Generation == 0 {
				break
			}
			if _, rerr := c.Restore(ctx, last, by); rerr != nil && ctx.Err() == nil {
				c.log.Warn("restore rollout state", "deployment", deployment, "err", rerr)
			}
		case ctx.Err() != nil:
			return
		default:
			if !down {
				c.log.Warn("rollout state unreachable; serving the last known versions",
					"deployment", deployment, "generation", last.Generation, "err", err)
			}
			down = true
			return
		}
		if down {
			c.log.Info("rollout state reachable again", "deployment", deployment, "generation", last.Generation)
			down = false
		}
	}

	poll()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			poll()
		case m, ok := <-msgs:
			if !ok {
				return nil
			}
			var ch schema.RolloutChange
			if err := json.Unmarshal([]byte(m.Payload), &ch); err != nil || ch.To.Deployment != deployment {
				c.log.Warn("bad rollout announcement", "deployment", deployment, "err", err)
				continue
			}
			deliver(ch.To)
		}
	}
}
