package learner

import (
	"context"
	"time"
)

// schedule says when a periodic job (the user-agent refresh, the AT-GRPO
// cycle) is due: after everySessions new ended sessions, or after every
// once at least minSessions arrived. Either may be 0 (off).
type schedule struct {
	everySessions int
	every         time.Duration
	minSessions   int
}

// due reports whether the job is due with newSessions stored since its last
// run, which was sinceLast ago.
func (s schedule) due(newSessions int, sinceLast time.Duration) bool {
	if s.everySessions > 0 && newSessions >= s.everySessions {
		return true
	}
	return s.every > 0 && newSessions >= max(1, s.minSessions) && sinceLast >= s.every
}

// runEvery checks every poll whether the job is due and runs it until ctx is
// done. A failed run is logged by failed and retried at the next due time.
func runEvery(ctx context.Context, poll time.Duration, due func() bool, run func(context.Context) error, failed func(error)) error {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if !due() {
			continue
		}
		if err := run(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			failed(err)
		}
	}
}
