package sessionlog

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

// crashDirEnv names the spool dir, and crashPublishersEnv the number of
// publishing goroutines, when this test binary runs as the child process of
// the crash tests.
const (
	crashDirEnv        = "SESSIONLOG_CRASH_CHILD_DIR"
	crashPublishersEnv = "SESSIONLOG_CRASH_CHILD_PUBLISHERS"
)

// TestCrashChild is the child process: it publishes events as fast as it
// can from one goroutine per session, printing each before Publish and
// "ok" and its id after, until it is killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("runs only as the child of the crash tests")
	}
	publishers, err := strconv.Atoi(os.Getenv(crashPublishersEnv))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig([]string{"127.0.0.1:9"}, "topic", dir)
	cfg.SegmentBytes = 16 << 10 // rotate often, so the kill may land anywhere
	l, err := New(cfg, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	say := func(line string) {
		mu.Lock()
		out.WriteString(line + "\n")
		out.Flush()
		mu.Unlock()
	}
	sessions := max(8, publishers)
	for round := 0; ; round++ {
		evs := makeEvents(t, fmt.Sprintf("crash-%d", round), sessions, 6)
		var wg sync.WaitGroup
		for p := range publishers {
			wg.Go(func() {
				for i := p; i < len(evs); i += publishers { // this goroutine's sessions' events, in order
					line, _ := json.Marshal(evs[i])
					say("event " + string(line))
					if err := l.Publish(context.Background(), evs[i]); err != nil {
						t.Error(err)
						return
					}
					say("ok " + evs[i].EventID)
				}
			})
		}
		wg.Wait()
	}
}

// TestCrashLosesNoAcknowledgedEvent kills a process publishing from one
// goroutine with SIGKILL and checks that a new Logger on its spool delivers
// every event whose Publish had returned, exactly once and in order.
func TestCrashLosesNoAcknowledgedEvent(t *testing.T) {
	crashAndRecover(t, 1)
}

// TestCrashLosesNoGroupCommittedEvent is TestCrashLosesNoAcknowledgedEvent
// with eight publishing goroutines, whose events share writes and fsyncs:
// a kill may land between a group's write and its fsync, or amid a group.
func TestCrashLosesNoGroupCommittedEvent(t *testing.T) {
	crashAndRecover(t, 8)
}

func crashAndRecover(t *testing.T, publishers int) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, fmt.Sprintf("%s=%d", crashPublishersEnv, publishers))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		published []schema.SessionEvent
		acked     = map[string]bool{}
		once      sync.Once
	)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event "):
			var ev schema.SessionEvent
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "event ")), &ev); err != nil {
				t.Fatalf("child line %q: %v", line, err)
			}
			published = append(published, ev)
		case strings.HasPrefix(line, "ok "):
			acked[strings.TrimPrefix(line, "ok ")] = true
		}
		if len(published) == 300 {
			once.Do(func() { _ = cmd.Process.Kill() })
		}
	}
	_ = cmd.Wait()
	if nacked := len(acked); nacked < len(published)-publishers || nacked < 300-publishers {
		t.Fatalf("child acknowledged %d of %d events before it was killed; want all but the %d in flight", nacked, len(published), publishers)
	}

	k := testenv.StartKafka(t)
	topic := k.Topic("sessions")
	h := newHarness(t, testConfig(k.Addrs, topic, dir))
	if events, _ := h.Backlog(); events < len(acked) {
		t.Fatalf("Backlog() after the crash = %d events; want at least the %d acknowledged", events, len(acked))
	}
	h.run(t)
	h.waitDrained(t)
	checkDeliveredSome(t, readTopic(t, k.Addrs, topic), published, func(i int) bool { return !acked[published[i].EventID] })
	t.Logf("child published %d events (%d acknowledged) before SIGKILL; recovery log:\n%s", len(published), len(acked), h.logs)
}

// TestConcurrentPublishers publishes from many goroutines, one per session as
// the gateway does, while Run drains small, rotating segments.
func TestConcurrentPublishers(t *testing.T) {
	k := testenv.StartKafka(t)
	topic := k.Topic("sessions")
	cfg := testConfig(k.Addrs, topic, t.TempDir())
	cfg.SegmentBytes, cfg.BatchMaxEvents = 8<<10, 16
	h := newHarness(t, cfg)
	h.run(t)

	const sessions = 16
	evs := makeEvents(t, k.Prefix, sessions, 10)
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Go(func() {
			for i := s; i < len(evs); i += sessions { // this session's events, in order
				if err := h.Publish(context.Background(), evs[i]); err != nil {
					t.Errorf("Publish: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	h.waitDrained(t)
	checkDelivered(t, readTopic(t, k.Addrs, topic), evs)
}
