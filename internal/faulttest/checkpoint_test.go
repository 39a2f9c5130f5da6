//go:build faults

package faulttest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/rollout"
)

// TestCorruptCheckpointRefused publishes versions whose weights are then
// damaged in the registry (a flipped byte, a truncated file) and rolls them
// out as canary and as stable: the gateway refuses each, goes on serving v1
// to every new session, and says why in its fleet entry and its log.
func TestCorruptCheckpointRefused(t *testing.T) {
	began := time.Now()
	s := newStack(t, "faults-ckpt")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	gw := startGateway(t, s.spec(t, "gw-ckpt"))
	key, err := gateway.CreateKey(ctx, s.redis.Client, s.redis.Prefix, "game", gateway.RolePlayerClient)
	if err != nil {
		t.Fatal(err)
	}
	rcfg := rollout.DefaultConfig()
	rcfg.Prefix = s.redis.Prefix
	rc, err := rollout.New(s.redis.Client, rcfg, nil)
	if err != nil {
		t.Fatal(err)
	}

	damage := map[string]func(path string) error{
		"flipped byte": func(path string) error {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0x01
			return os.WriteFile(path, b, 0o644)
		},
		"truncated": func(path string) error {
			fi, err := os.Stat(path)
			if err != nil {
				return err
			}
			return os.Truncate(path, fi.Size()/2)
		},
	}
	steps := []struct {
		version, damage, action string
		refused                 bool // the state names a damaged version
	}{
		{"v2", "flipped byte", "canary", true},
		{"v2", "", "rollback", false},
		{"v3", "truncated", "canary", true},
		{"v3", "", "promote", true}, // the damaged canary made stable
	}
	refusals := 0
	for i, st := range steps {
		if st.damage != "" {
			testenv.PublishTinyModel(t, s.registry, "npc", st.version)
			path := filepath.Join(s.registry, "npc", st.version, "model.safetensors")
			_ = os.Chmod(path, 0o644)
			if err := damage[st.damage](path); err != nil {
				t.Fatalf("damage %s: %v", path, err)
			}
		}
		var ch rollout.Instance
		switch st.action {
		case "canary":
			_, err = rc.Canary(ctx, s.dep, st.version, 50, "faulttest")
		case "rollback":
			_, err = rc.Rollback(ctx, s.dep, "faulttest", "the canary was refused")
		case "promote":
			_, err = rc.Promote(ctx, s.dep, "faulttest", "promote a damaged canary")
		}
		if err != nil {
			t.Fatalf("step %d: %s %s: %v", i, st.action, st.version, err)
		}
		state, _ := rc.Get(ctx, s.dep)
		if !st.refused {
			waitFor(t, 30*time.Second, "the fleet serving the new state", func() bool {
				fleet, err := rc.Fleet(ctx, s.dep)
				if err != nil || len(fleet) != 1 {
					return false
				}
				ch = fleet[0]
				return ch.Generation == state.Generation
			})
			t.Logf("step %d: %s (rollout generation %d: stable %s canary %q); fleet serves generation %d stable %q canary %q loaded %v",
				i, st.action, state.Generation, state.Stable, state.Canary, ch.Generation, ch.Stable, ch.Canary, ch.Loaded)
			continue
		}
		refusals++
		waitFor(t, time.Minute, fmt.Sprintf("refusal %d of %s in the gateway log", refusals, st.version), func() bool {
			return strings.Count(gw.logText(), "model version refused") >= refusals
		})
		waitFor(t, 30*time.Second, "the fleet entry naming the refused version", func() bool {
			fleet, err := rc.Fleet(ctx, s.dep)
			if err != nil || len(fleet) != 1 {
				return false
			}
			ch = fleet[0]
			return strings.Contains(ch.LastError, st.version)
		})
		t.Logf("step %d: %s %s (rollout generation %d: stable %s canary %s); fleet serves generation %d stable %q canary %q loaded %v; last_error %q",
			i, st.action, st.version, state.Generation, state.Stable, state.Canary, ch.Generation, ch.Stable, ch.Canary, ch.Loaded, ch.LastError)
		// The pool did not switch to the state naming the damaged version.
		// (Its serving state may name a rolled-back canary at weight 0,
		// which gets no sessions and is not loaded.)
		if ch.Generation >= state.Generation || ch.Stable != "v1" {
			t.Errorf("step %d: fleet serves generation %d stable %q; want an older generation than %d with stable v1", i, ch.Generation, ch.Stable, state.Generation)
		}
		if !strings.Contains(ch.LastError, "checksum") {
			t.Errorf("step %d: last_error %q; want it to say checksum", i, ch.LastError)
		}
		for _, v := range ch.Loaded {
			if v != "v1" {
				t.Errorf("step %d: version %s is resident; want only v1", i, v)
			}
		}
		// Every new session is served by v1 and answered.
		for p := range 8 {
			sess, r := createSession(ctx, gw.base, key, fmt.Sprintf("player-%d-%d", i, p))
			if r.status != 201 {
				t.Fatalf("step %d: create session: %v", i, r)
			}
			if sess.PolicyVersion != "v1" {
				t.Errorf("step %d: new session pinned %q; want v1", i, sess.PolicyVersion)
			}
			if _, r := sendMessage(ctx, gw.base, key, sess.SessionID, "Hello there"); r.status != 200 {
				t.Errorf("step %d: message: %v", i, r)
			}
		}
	}
	t.Logf("runtime %.1fs", time.Since(began).Seconds())
}
