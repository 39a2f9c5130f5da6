package sessionlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleyhq/parley/internal/seglog"
	"github.com/parleyhq/parley/schema"
)

// groupHarness is a Logger without a commit window whose spool's fsync the
// test controls: hook runs in place of each fsync, with the end of what it
// covers. It also checks that each group took one write: the k-th fsync
// covers the log's k-th write.
func groupHarness(t *testing.T, hook func(call int, end int64, sync func() error) error) *harness {
	t.Helper()
	cfg := testConfig([]string{"127.0.0.1:9"}, "t", t.TempDir())
	cfg.CloseTimeout = 0
	cfg.CommitWindow = 0
	h := newHarness(t, cfg)
	sp := h.spool
	calls := 0
	sp.sync = func(seq uint64) error {
		// Leaders commit one at a time, and the next group is written only
		// after this fsync returns: the active segment ends with this group.
		calls++
		if seq != uint64(calls) {
			t.Errorf("fsync %d covers write %d; want one write per group", calls, seq)
		}
		return hook(calls, sp.seg.End().Offset, func() error { return sp.seg.Sync(seq) })
	}
	if n := len(segmentFiles(t, cfg.SpoolDir)); n != 1 {
		t.Fatalf("%d segments in a new spool; want 1", n)
	}
	return h
}

// waitGathered waits until n appends are pending behind the held first
// fsync. The first append leads alone: it takes its group at once.
func waitGathered(t *testing.T, sp *spool, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		sp.mu.Lock()
		pending := 0
		if sp.pending != nil {
			pending = sp.pending.events
		}
		sp.mu.Unlock()
		if pending >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d of %d appends gathered behind a held fsync", pending, n)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// publishSessions publishes evs from one goroutine per session, each
// session's events in order, and returns each event's Publish error; after
// each Publish that returned, check runs.
func publishSessions(h *harness, sessions int, evs []schema.SessionEvent, check func(ev schema.SessionEvent, err error)) {
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Go(func() {
			for i := s; i < len(evs); i += sessions {
				check(evs[i], h.Publish(context.Background(), evs[i]))
			}
		})
	}
	wg.Wait()
}

// TestGroupCommitAcknowledgesAfterItsFsync holds the first fsync until
// every other publisher has appended behind it, and checks that no Publish
// returns before an fsync covered its record's bytes, that the appends
// that gathered share the next write and fsync, and that every event is in
// the file.
func TestGroupCommitAcknowledgesAfterItsFsync(t *testing.T) {
	const sessions = 16
	var (
		returned atomic.Int64
		durable  atomic.Int64 // end of the segment bytes a returned fsync covered
		h        *harness
	)
	h = groupHarness(t, func(call int, end int64, sync func() error) error {
		if call == 1 {
			waitGathered(t, h.spool, sessions-1)
			if n := returned.Load(); n != 0 {
				t.Errorf("%d Publishes returned before the first fsync", n)
			}
		}
		if err := sync(); err != nil {
			return err
		}
		durable.Store(end)
		return nil
	})
	path := segmentFiles(t, h.cfg.SpoolDir)[0]
	evs := makeEvents(t, "group", sessions, 4)
	publishSessions(h, sessions, evs, func(ev schema.SessionEvent, err error) {
		returned.Add(1)
		if err != nil {
			t.Errorf("Publish(%s): %v", ev.EventID, err)
			return
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Error(err)
			return
		}
		if !bytes.Contains(data[:min(durable.Load(), int64(len(data)))], []byte(ev.EventID)) {
			t.Errorf("Publish(%s) returned before an fsync covered its record", ev.EventID)
		}
	})
	fsyncs := h.spool.seg.Syncs()
	if fsyncs > uint64(len(evs)-(sessions-1)+1) {
		t.Errorf("%d publishes made %d fsyncs; want the %d held behind the first to share one", len(evs), fsyncs, sessions-1)
	}
	if got := len(spooledEvents(t, h.spool)); got != len(evs) {
		t.Errorf("%d events in the spool; want %d", got, len(evs))
	}
	t.Logf("%d publishes from %d goroutines made %d fsyncs", len(evs), sessions, fsyncs)
}

// TestGroupCommitFailedFsyncFailsItsGroup fails every second fsync, among
// them the one of the group that gathered behind a held first fsync,
// and checks that exactly the Publishes whose records a failed fsync
// covered return its error.
func TestGroupCommitFailedFsyncFailsItsGroup(t *testing.T) {
	const sessions = 16
	errDisk := errors.New("injected fsync failure")
	type span struct{ from, to int64 }
	var (
		mu     sync.Mutex
		failed []span
		last   = int64(len(segmentMagic))
		h      *harness
	)
	h = groupHarness(t, func(call int, end int64, sync func() error) error {
		if call == 1 {
			waitGathered(t, h.spool, sessions-1)
		}
		mu.Lock()
		from := last
		last = end
		if call%2 == 0 {
			failed = append(failed, span{from, end})
		}
		mu.Unlock()
		if call%2 == 0 {
			return errDisk
		}
		return sync()
	})
	evs := makeEvents(t, "fail", sessions, 4)
	var results sync.Map // event id → Publish's error
	publishSessions(h, sessions, evs, func(ev schema.SessionEvent, err error) {
		if err != nil && !errors.Is(err, errDisk) {
			t.Errorf("Publish(%s) = %v; want nil or the fsync's error", ev.EventID, err)
		}
		results.Store(ev.EventID, err)
	})
	spooled := spooledEvents(t, h.spool)
	if len(spooled) != len(evs) {
		t.Errorf("%d events in the spool; want all %d (the writes succeeded)", len(spooled), len(evs))
	}
	nfailed, biggest := 0, 0
	perSpan := map[span]int{}
	for id, off := range spooled {
		var s *span
		for i := range failed {
			if failed[i].from <= off && off < failed[i].to {
				s = &failed[i]
			}
		}
		v, ok := results.Load(id)
		if !ok {
			t.Errorf("event %s is in the spool but was never published", id)
			continue
		}
		err, _ := v.(error)
		switch {
		case s != nil && err == nil:
			t.Errorf("Publish(%s) = nil; want the error of the failed fsync that covered it", id)
		case s == nil && err != nil:
			t.Errorf("Publish(%s) = %v; no failed fsync covered it", id, err)
		case s != nil:
			nfailed++
			perSpan[*s]++
			biggest = max(biggest, perSpan[*s])
		}
	}
	if biggest < sessions-1 {
		t.Errorf("the largest failed group covered %d events; want the %d gathered behind the first fsync", biggest, sessions-1)
	}
	t.Logf("%d failed fsyncs failed %d of %d publishes (largest group %d)", len(failed), nfailed, len(evs), biggest)
}

// spooledEvents returns the offset of each event in the spool by event id.
func spooledEvents(t *testing.T, sp *spool) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := sp.seg.Scan(seglog.Pos{Segment: sp.seg.Segments()[0]}, func(p seglog.Pos, payload []byte) error {
		rec, err := decodePayload(payload)
		if err != nil {
			return err
		}
		var ev schema.SessionEvent
		if err := json.Unmarshal(rec.value, &ev); err != nil {
			return err
		}
		if _, dup := out[ev.EventID]; dup {
			t.Errorf("event %s is in the spool twice", ev.EventID)
		}
		out[ev.EventID] = p.Offset
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
