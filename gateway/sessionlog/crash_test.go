package sessionlog

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

// crashDirEnv names the spool dir when this test binary runs as the child
// process of TestCrashLosesNoAcknowledgedEvent.
const crashDirEnv = "SESSIONLOG_CRASH_CHILD_DIR"

// TestCrashChild is the child process: it publishes events as fast as it
// can, printing each before Publish and "ok" after, until it is killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("runs only as the child of TestCrashLosesNoAcknowledgedEvent")
	}
	cfg := testConfig([]string{"127.0.0.1:9"}, "topic", dir)
	cfg.SegmentBytes = 16 << 10 // rotate often, so the kill may land anywhere
	l, err := New(cfg, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := bufio.NewWriter(os.Stdout)
	for round := 0; ; round++ {
		for _, ev := range makeEvents(t, "crash", 8, 6) {
			line, _ := json.Marshal(ev)
			out.WriteString("event " + string(line) + "\n")
			out.Flush()
			if err := l.Publish(context.Background(), ev); err != nil {
				t.Fatal(err)
			}
			out.WriteString("ok\n")
			out.Flush()
		}
	}
}

// TestCrashLosesNoAcknowledgedEvent kills a publishing process with SIGKILL
// and checks that a new Logger on its spool delivers every event whose
// Publish had returned, exactly once and in order.
func TestCrashLosesNoAcknowledgedEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		published []schema.SessionEvent
		acked     []bool
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
			acked = append(acked, false)
		case line == "ok":
			acked[len(acked)-1] = true
		}
		if len(published) == 300 {
			once.Do(func() { _ = cmd.Process.Kill() })
		}
	}
	_ = cmd.Wait()
	nacked := 0
	for _, a := range acked {
		if a {
			nacked++
		}
	}
	if nacked < 299 {
		t.Fatalf("child acknowledged %d events before it was killed; want at least 299", nacked)
	}

	k := testenv.StartKafka(t)
	topic := k.Topic("sessions")
	h := newHarness(t, testConfig(k.Addrs, topic, dir))
	if events, _ := h.Backlog(); events < nacked {
		t.Fatalf("Backlog() after the crash = %d events; want at least the %d acknowledged", events, nacked)
	}
	h.run(t)
	h.waitDrained(t)
	checkDeliveredSome(t, readTopic(t, k.Addrs, topic), published, func(i int) bool { return !acked[i] })
	t.Logf("child published %d events (%d acknowledged) before SIGKILL; recovery log:\n%s", len(published), nacked, h.logs)
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
