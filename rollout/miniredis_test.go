package rollout

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

// TestOnMiniredis runs the compare-and-set script, the history, pub/sub and
// the fleet on miniredis, the embedded Redis of `parley dev`.
func TestOnMiniredis(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rdb := testenv.StartMiniredis(t)
	cfg := DefaultConfig()
	cfg.PollInterval = 50 * time.Millisecond
	c, err := New(rdb, cfg, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Init(ctx, "npc", "v1", "dev"); err != nil {
		t.Fatal(err)
	}
	w := &watchLog{ch: make(chan schema.RolloutState, 100)}
	go c.Watch(ctx, "npc", "gw-1", w.fn)
	w.await(t, 1)
	if _, err := c.Canary(ctx, "npc", "v2", 10, "alice"); err != nil {
		t.Fatal(err)
	}
	g := int64(1)
	if _, err := c.Apply(ctx, "npc", Request{Action: ActionPromote, By: "bob", Generation: &g}); err == nil {
		t.Error("promote at a stale generation succeeded on miniredis; want ErrConflict")
	}
	if _, err := c.Promote(ctx, "npc", "alice", ""); err != nil {
		t.Fatal(err)
	}
	if s := w.await(t, 3); s.Stable != "v2" {
		t.Errorf("watched = %+v; want stable v2", s)
	}
	if h, err := c.History(ctx, "npc", 10); err != nil || len(h) != 3 {
		t.Errorf("History = %d changes, %v; want 3", len(h), err)
	}
	if err := c.Heartbeat(ctx, Instance{Deployment: "npc", Instance: "gw-1", Stable: "v2"}); err != nil {
		t.Fatal(err)
	}
	if f, err := c.Fleet(ctx, "npc"); err != nil || len(f) != 1 {
		t.Errorf("Fleet = %v, %v; want gw-1", f, err)
	}
}
