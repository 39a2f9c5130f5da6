package sessionlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/parleyhq/parley/internal/seglog"
	"github.com/parleyhq/parley/internal/testenv"
)

func segmentFiles(t testing.TB, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestRecordRoundTrip(t *testing.T) {
	tests := []record{
		{appended: time.Unix(0, 1), key: []byte("s1"), value: []byte(`{"a":1}`)},
		{appended: time.Unix(1700000000, 5), key: []byte{}, value: []byte("v"),
			headers: []kafka.Header{{Key: "traceparent", Value: []byte("00-x")}, {Key: "empty", Value: []byte{}}}},
	}
	for _, want := range tests {
		enc := appendRecord([]byte("prefix"), want)[len("prefix"):]
		got, n, err := readRecord(bytes.NewReader(enc))
		if err != nil || n != len(enc) {
			t.Fatalf("readRecord(appendRecord(%+v)) = %d bytes, %v; want %d bytes, nil", want, n, err, len(enc))
		}
		if !got.appended.Equal(want.appended) || !bytes.Equal(got.key, want.key) || !bytes.Equal(got.value, want.value) || len(got.headers) != len(want.headers) {
			t.Fatalf("round trip = %+v; want %+v", got, want)
		}
		for i := range want.headers {
			if got.headers[i].Key != want.headers[i].Key || !bytes.Equal(got.headers[i].Value, want.headers[i].Value) {
				t.Fatalf("header %d = %+v; want %+v", i, got.headers[i], want.headers[i])
			}
		}
	}
}

func TestReadRecordRejects(t *testing.T) {
	good := appendRecord(nil, record{appended: time.Unix(0, 1), key: []byte("k"), value: []byte("value")})
	flipped := bytes.Clone(good)
	flipped[len(flipped)-1] ^= 1
	hugeLen := bytes.Clone(good)
	binary.LittleEndian.PutUint32(hugeLen, maxRecordBytes+1)
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, io.EOF},
		{"torn header", good[:5], io.ErrUnexpectedEOF},
		{"torn payload", good[:len(good)-1], io.ErrUnexpectedEOF},
		{"checksum", flipped, errCorrupt},
		{"length out of range", hugeLen, errCorrupt},
		{"zeros", make([]byte, 64), errCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := readRecord(bytes.NewReader(tt.in)); !errors.Is(err, tt.want) {
				t.Fatalf("readRecord = %v; want %v", err, tt.want)
			}
		})
	}
}

// TestCorruptTailIsTruncated damages the end of a spool the way a crash or a
// bad disk would and checks that the next Logger keeps exactly the intact
// records, cuts the rest, and says so in its log and metrics.
func TestCorruptTailIsTruncated(t *testing.T) {
	const published = 5
	tests := []struct {
		name       string
		damage     func(t *testing.T, path string, recordStarts []int64)
		wantEvents int
		wantCut    int64 // bytes truncated
	}{
		{"torn header", func(t *testing.T, path string, _ []int64) { testenv.AppendFile(t, path, []byte{9, 0, 0}) }, published, 3},
		{"torn payload", func(t *testing.T, path string, _ []int64) { testenv.TruncateBy(t, path, 10) }, published - 1, -1},
		{"flipped bit in the last record", func(t *testing.T, path string, _ []int64) { testenv.FlipByteAt(t, path, -1) }, published - 1, -1},
		{"flipped bit in the middle", func(t *testing.T, path string, starts []int64) {
			testenv.FlipByteAt(t, path, starts[2]+recordHeaderSize+3)
		}, 2, -1},
		{"zeros after the last record", func(t *testing.T, path string, _ []int64) { testenv.AppendFile(t, path, make([]byte, 4096)) }, published, 4096},
		{"huge length", func(t *testing.T, path string, _ []int64) {
			testenv.AppendFile(t, path, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1})
		}, published, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig([]string{"127.0.0.1:9"}, "topic", dir)
			cfg.CloseTimeout = 0
			evs := makeEvents(t, "p", 1, published-2)
			first := newHarness(t, cfg)
			publishAll(t, context.Background(), first.Logger, evs)
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			files := segmentFiles(t, dir)
			if len(files) != 1 {
				t.Fatalf("segment files = %v; want one", files)
			}
			path := files[0]
			starts, end := recordStarts(t, path)
			tt.damage(t, path, starts)
			damaged := testenv.FileSize(t, path)

			second := newHarness(t, cfg)
			events, backlogBytes := second.Backlog()
			if events != tt.wantEvents {
				t.Fatalf("Backlog() after damage = %d events; want %d", events, tt.wantEvents)
			}
			wantSize := end
			if tt.wantEvents < published {
				wantSize = starts[tt.wantEvents]
			}
			if got := testenv.FileSize(t, path); got != wantSize {
				t.Errorf("segment size after recovery = %d; want %d (truncated after the last intact record)", got, wantSize)
			}
			if want := wantSize - int64(len(segmentMagic)); backlogBytes != want {
				t.Errorf("Backlog() bytes = %d; want %d", backlogBytes, want)
			}
			wantCut := tt.wantCut
			if wantCut < 0 {
				wantCut = damaged - wantSize
			}
			if got := second.metric(t, "parley.sessionlog.spool.truncated"); got != wantCut {
				t.Errorf("metric spool.truncated = %d; want %d", got, wantCut)
			}
			if !strings.Contains(second.logs.String(), "truncating") {
				t.Errorf("recovery did not log the truncation:\n%s", second.logs)
			}
			tail, err := os.ReadFile(fmt.Sprintf("%s.tail-%d", path, wantSize))
			if err != nil || int64(len(tail)) != wantCut {
				t.Errorf("saved tail = %d bytes, %v; want the %d bytes cut", len(tail), err, wantCut)
			}
			b, err := second.spool.readBatch(100, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if len(b.recs) != tt.wantEvents {
				t.Fatalf("readBatch after recovery = %d records; want %d", len(b.recs), tt.wantEvents)
			}
			for i, r := range b.recs {
				if !bytes.Contains(r.value, []byte(evs[i].EventID)) {
					t.Errorf("record %d = %s; want event %s", i, r.value, evs[i].EventID)
				}
			}
			if err := second.Close(); err != nil {
				t.Fatal(err)
			}
			third := newHarness(t, cfg)
			if events, _ := third.Backlog(); events != tt.wantEvents || strings.Contains(third.logs.String(), "truncating") {
				t.Errorf("reopened after recovery: Backlog() = %d events, logs %q; want %d events and no truncation", events, third.logs, tt.wantEvents)
			}
		})
	}
}

func TestRecoverySegmentFiles(t *testing.T) {
	t.Run("segment torn while being created is removed", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, segmentName(3))
		if err := os.WriteFile(path, []byte(segmentMagic[:3]), 0o640); err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, testConfig([]string{"127.0.0.1:9"}, "topic", dir))
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stat torn segment after New = %v; want it removed", err)
		}
		if files := segmentFiles(t, dir); len(files) != 1 || filepath.Base(files[0]) != segmentName(4) {
			t.Errorf("segments = %v; want only the new %s", files, segmentName(4))
		}
		_ = h
	})
	t.Run("foreign file is refused", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segmentName(1)), []byte("not a spool segment"), 0o640); err != nil {
			t.Fatal(err)
		}
		if _, err := New(testConfig([]string{"127.0.0.1:9"}, "topic", dir), nil, nil, nil); err == nil || !strings.Contains(err.Error(), "refusing") {
			t.Errorf("New over a foreign .seg file = %v; want a refusal", err)
		}
	})
	t.Run("cursor never lets a new segment id look delivered", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "cursor"), []byte("v1 57 8\n"), 0o640); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig([]string{"127.0.0.1:9"}, "topic", dir)
		cfg.CloseTimeout = 0
		first := newHarness(t, cfg)
		publishAll(t, context.Background(), first.Logger, makeEvents(t, "p", 1, 1))
		if err := first.Close(); err != nil {
			t.Fatal(err)
		}
		second := newHarness(t, cfg)
		if events, _ := second.Backlog(); events != 3 {
			t.Errorf("Backlog() = %d events; want the 3 published", events)
		}
	})
}

func recordStarts(t *testing.T, path string) (starts []int64, end int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(data[len(segmentMagic):])
	off := int64(len(segmentMagic))
	for {
		_, n, err := readRecord(r)
		if err == io.EOF {
			return starts, off
		}
		if err != nil {
			t.Fatalf("read undamaged segment at %d: %v", off, err)
		}
		starts = append(starts, off)
		off += int64(n)
	}
}

// readRecord reads one spool record from r and returns it with its size on
// disk, with seglog.ReadRecord's errors or errCorrupt for a payload that
// does not parse.
func readRecord(r io.Reader) (record, int, error) {
	payload, n, err := seglog.ReadRecord(r, maxRecordBytes)
	if err != nil {
		return record{}, 0, err
	}
	rec, err := decodePayload(payload)
	if err != nil {
		return record{}, 0, err
	}
	return rec, n, nil
}

// TestConcurrentPublishesShareFsyncs publishes one event from each of many
// goroutines at once, as a gateway's concurrent sessions do: without a
// commit window they share fsyncs (group commit), and none returns before
// an fsync covered it.
func TestConcurrentPublishesShareFsyncs(t *testing.T) {
	cfg := testConfig([]string{"127.0.0.1:9"}, "t", t.TempDir())
	cfg.CloseTimeout = 0
	cfg.CommitWindow = 0
	h := newHarness(t, cfg)
	evs := makeEvents(t, "group", 64, 1)
	n := uint64(len(evs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, ev := range evs {
		wg.Go(func() {
			<-start
			if err := h.Publish(context.Background(), ev); err != nil {
				t.Errorf("Publish: %v", err)
			}
			if h.spool.seg.Syncs() == 0 {
				t.Error("Publish returned before any fsync")
			}
		})
	}
	close(start)
	wg.Wait()
	if got := h.spool.seg.Syncs(); got >= n {
		t.Errorf("%d concurrent publishes made %d fsyncs; want fewer", n, got)
	} else {
		t.Logf("%d concurrent publishes made %d fsyncs", n, got)
	}
}

// TestCommitWindow publishes serially with a commit window: Publish does
// not wait for an fsync, the committer makes every event durable within the
// window, and the events of one window share an fsync.
func TestCommitWindow(t *testing.T) {
	cfg := testConfig([]string{"127.0.0.1:9"}, "t", t.TempDir())
	cfg.CloseTimeout = 0
	cfg.CommitWindow = time.Hour // nothing is fsync'd while the test runs
	h := newHarness(t, cfg)
	publishAll(t, context.Background(), h.Logger, makeEvents(t, "window", 8, 4))
	if got := h.spool.seg.Syncs(); got != 0 {
		t.Fatalf("%d fsyncs within a one-hour window; want Publish not to wait for one", got)
	}

	cfg = testConfig([]string{"127.0.0.1:9"}, "t", t.TempDir())
	cfg.CloseTimeout = 0
	cfg.CommitWindow = 50 * time.Millisecond
	h = newHarness(t, cfg)
	evs := makeEvents(t, "window", 8, 4)
	publishAll(t, context.Background(), h.Logger, evs)
	deadline := time.Now().Add(10 * time.Second)
	for h.spool.seg.Syncs() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no fsync 10 s after the publishes; want one within the window")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := h.spool.seg.Syncs(); got >= uint64(len(evs)) {
		t.Errorf("%d serial publishes within a window made %d fsyncs; want fewer", len(evs), got)
	}
}
