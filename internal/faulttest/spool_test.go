//go:build faults

package faulttest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/schema"
)

// spoolLoad plays sessions of one message each against gw until a request
// is refused, then one more message on a live session, and returns what
// was accepted (the events the gateway owes Kafka) and the refusals.
type spoolLoad struct {
	started, turns int
	sessions       []string // answered sessions, each with its turns
	refused        []apiResult
	refusedTurn    string // session whose message was refused
	refusedTurnNum int    // the turn that message would have been
}

func fillSpool(ctx context.Context, t *testing.T, gw *gatewayProc, key string) spoolLoad {
	t.Helper()
	var l spoolLoad
	for i := 0; i < 2000 && len(l.refused) == 0; i++ {
		sess, r := createSession(ctx, gw.base, key, fmt.Sprintf("player-%d", i))
		if r.status != http.StatusCreated {
			l.refused = append(l.refused, r)
			break
		}
		l.started++
		l.sessions = append(l.sessions, sess.SessionID)
		msg, r := sendMessage(ctx, gw.base, key, sess.SessionID, "What news from the city?")
		if r.status != http.StatusOK {
			l.refused = append(l.refused, r)
			l.refusedTurn, l.refusedTurnNum = sess.SessionID, 1
			return l
		}
		l.turns++
		_ = msg
	}
	if len(l.refused) == 0 {
		t.Fatalf("2000 sessions accepted: the spool never filled")
	}
	// A message of a live session is refused too.
	id := l.sessions[len(l.sessions)-1]
	if _, r := sendMessage(ctx, gw.base, key, id, "Still there?"); r.status != http.StatusOK {
		l.refused = append(l.refused, r)
		l.refusedTurn, l.refusedTurnNum = id, 2
	} else {
		l.turns++
	}
	return l
}

// checkRefusals asserts every refusal is a 503 saying why, with Retry-After.
func checkRefusals(t *testing.T, l spoolLoad, says string) {
	t.Helper()
	for _, r := range l.refused {
		if r.err != nil || r.status != http.StatusServiceUnavailable || r.code() != "unavailable" || r.retryAfter == "" ||
			!strings.Contains(string(r.body), says) {
			t.Errorf("refusal = %v (Retry-After %q); want 503 unavailable with Retry-After saying %q", r, r.retryAfter, says)
		}
	}
}

// checkDelivered asserts that, once the spool drained, the topic holds
// every accepted event, and that the session of the refused message keeps
// the logging guarantee (checkTurnEvents): an exchange in the transcript
// whose event never reaches Kafka is an event lost.
func checkDelivered(ctx context.Context, t *testing.T, s *stack, gw *gatewayProc, key string, l spoolLoad) {
	t.Helper()
	c := countEvents(topicRecords(ctx, t, s.kafka.Addrs, s.topic))
	t.Logf("accepted %d starts and %d turns before the refusal; topic holds %d records, %d unique, %d duplicates: %v",
		l.started, l.turns, c.records, c.unique, c.duplicates, c.byType)
	if c.byType[schema.SessionStarted] < l.started || c.byType[schema.TurnEvent] < l.turns {
		t.Errorf("topic has %d started, %d turns; want at least the %d and %d accepted (events lost)",
			c.byType[schema.SessionStarted], c.byType[schema.TurnEvent], l.started, l.turns)
	}
	if l.refusedTurn == "" {
		return
	}
	view, r := getSession(ctx, gw.base, key, l.refusedTurn)
	if r.status != http.StatusOK {
		t.Errorf("session of the refused message: %v", r)
		return
	}
	_, unsaved := checkTurnEvents(t, "session of the refused message", c.sessions[l.refusedTurn], view.Transcript)
	t.Logf("session of the refused message (turn %d): transcript %+v, %d turns logged but not saved", l.refusedTurnNum, view.Transcript, unsaved)
}

// TestSpoolFull fills a small spool (SpoolMaxBytes 24 KiB) with the broker
// down: requests are answered 503 with the reason, the gateway counts the
// refused events in parley.sessionlog.spool.full and stays up; once the
// broker is back and the spool drains, service resumes and the spooled
// events are on the topic.
func TestSpoolFull(t *testing.T) {
	began := time.Now()
	s := newStack(t, "faults-spool")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	spec := s.spec(t, "gw-spool")
	spec.SpoolMaxBytes, spec.SegmentBytes = 24<<10, 4<<10
	gw := startGateway(t, spec)
	key, err := gateway.CreateKey(ctx, s.redis.Client, s.redis.Prefix, "game", gateway.RolePlayerClient)
	if err != nil {
		t.Fatal(err)
	}
	if _, r := createSession(ctx, gw.base, key, "player-before"); r.status != http.StatusCreated {
		t.Fatalf("create session: %v", r)
	}

	s.kafka.Stop()
	downAt := time.Now()
	l := fillSpool(ctx, t, gw, key)
	full := gw.metric(t, "parley_sessionlog_spool_full_total")
	backlog := gw.metric(t, "parley_sessionlog_spool_bytes")
	t.Logf("broker down: %d sessions and %d turns accepted, then %d refused; spool %v bytes; spool.full counter %v",
		l.started, l.turns, len(l.refused), backlog, full)
	checkRefusals(t, l, "spool full")
	if full < float64(len(l.refused)) {
		t.Errorf("parley_sessionlog_spool_full_total = %v; want at least %d", full, len(l.refused))
	}
	if r := call(ctx, http.MethodGet, gw.base+"/healthz", "", nil); r.status != http.StatusOK || gw.exited() {
		t.Fatalf("gateway after the spool filled: /healthz %v, exited %v", r, gw.exited())
	}

	s.kafka.Start()
	upAt := time.Now()
	waitFor(t, 2*time.Minute, "the spool drained", func() bool {
		return gw.metric(t, "parley_sessionlog_spool_events") == 0
	})
	t.Logf("broker down %.1fs; spool drained %.1fs after it came back", upAt.Sub(downAt).Seconds(), time.Since(upAt).Seconds())
	sess, r := createSession(ctx, gw.base, key, "player-after")
	if r.status != http.StatusCreated {
		t.Fatalf("new session after the spool drained: %v", r)
	}
	if _, r := sendMessage(ctx, gw.base, key, sess.SessionID, "Hello"); r.status != http.StatusOK {
		t.Fatalf("message after the spool drained: %v", r)
	}
	checkDelivered(ctx, t, s, gw, key, l)
	t.Logf("runtime %.1fs", time.Since(began).Seconds())
}

// TestSpoolDiskFull puts the spool on a 256 KiB tmpfs, so that with the
// broker down the disk fills before SpoolMaxBytes: a real ENOSPC. The
// gateway answers 503 saying the events could not be logged, counts them
// in parley.gateway.event_publish_errors and stays up; when the broker is
// back the spool drains, the disk frees, and service resumes. Needs root
// (mount); skipped with a message where mount is not permitted.
func TestSpoolDiskFull(t *testing.T) {
	began := time.Now()
	s := newStack(t, "faults-enospc")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	spec := s.spec(t, "gw-enospc")
	spec.SpoolMaxBytes, spec.SegmentBytes = 64<<20, 32<<10
	spool := filepath.Join(spec.DataDir, "spool")
	if err := os.MkdirAll(spool, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", spool).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a 256 KiB tmpfs for the spool (needs root): %v: %s", err, out)
	}
	// Cleanups run last-registered first: the gateway is killed before
	// this unmounts, and this before the temp dir is removed.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", spool).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", spool, err, out)
		}
	})
	gw := startGateway(t, spec)
	key, err := gateway.CreateKey(ctx, s.redis.Client, s.redis.Prefix, "game", gateway.RolePlayerClient)
	if err != nil {
		t.Fatal(err)
	}

	s.kafka.Stop()
	l := fillSpool(ctx, t, gw, key)
	errs := gw.metric(t, "parley_gateway_event_publish_errors_total")
	full := gw.metric(t, "parley_sessionlog_spool_full_total")
	t.Logf("broker down, 256 KiB disk: %d sessions and %d turns accepted, then %d refused: %v; event_publish_errors %v, spool.full %v",
		l.started, l.turns, len(l.refused), l.refused[0], errs, full)
	checkRefusals(t, l, "could not be logged")
	if errs < float64(len(l.refused)) {
		t.Errorf("parley_gateway_event_publish_errors_total = %v; want at least %d", errs, len(l.refused))
	}
	if r := call(ctx, http.MethodGet, gw.base+"/healthz", "", nil); r.status != http.StatusOK || gw.exited() {
		t.Fatalf("gateway after the disk filled: /healthz %v, exited %v", r, gw.exited())
	}

	s.kafka.Start()
	waitFor(t, 2*time.Minute, "the spool drained", func() bool {
		return gw.metric(t, "parley_sessionlog_spool_events") == 0
	})
	var r apiResult
	waitFor(t, time.Minute, "a new session accepted after the spool drained", func() bool {
		_, r = createSession(ctx, gw.base, key, "player-after")
		return r.status == http.StatusCreated
	})
	checkDelivered(ctx, t, s, gw, key, l)
	t.Logf("runtime %.1fs", time.Since(began).Seconds())
}
