package seglog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/parleyhq/parley/internal/testenv"
)

const testMagic = "TESTLOG1"

func testOptions(segmentBytes int64) Options {
	return Options{Magic: testMagic, SegmentBytes: segmentBytes, MaxRecordBytes: 1 << 10}
}

func openLog(t *testing.T, dir string, opts Options) (*Log, Recovery) {
	t.Helper()
	l, rec, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%q) = %v; want nil", dir, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, rec
}

func appendAll(t *testing.T, l *Log, payloads ...string) {
	t.Helper()
	for _, p := range payloads {
		if err := l.Append(AppendRecord(nil, []byte(p))); err != nil {
			t.Fatalf("Append(%q) = %v; want nil", p, err)
		}
	}
}

func scanAll(t *testing.T, l *Log, from Pos) ([]string, []Pos) {
	t.Helper()
	var got []string
	var at []Pos
	err := l.Scan(from, func(p Pos, b []byte) error {
		got = append(got, string(b))
		at = append(at, p)
		return nil
	})
	if err != nil {
		t.Fatalf("Scan = %v; want nil", err)
	}
	return got, at
}

func payloads(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("record %02d", i)
	}
	return out
}

func TestRecordRejects(t *testing.T) {
	good := AppendRecord(nil, []byte("payload"))
	flipped := bytes.Clone(good)
	flipped[len(flipped)-1] ^= 1
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, io.EOF},
		{"torn header", good[:5], io.ErrUnexpectedEOF},
		{"torn payload", good[:len(good)-1], io.ErrUnexpectedEOF},
		{"checksum", flipped, ErrCorrupt},
		{"length out of range", AppendRecord(nil, make([]byte, 11)), ErrCorrupt},
		{"zero length", make([]byte, 16), ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := ReadRecord(bytes.NewReader(tt.in), 10); !errors.Is(err, tt.want) {
				t.Fatalf("ReadRecord = %v; want %v", err, tt.want)
			}
		})
	}
}

func TestAppendRotateReopen(t *testing.T) {
	dir := t.TempDir()
	want := payloads(20)
	l, _ := openLog(t, dir, testOptions(64))
	appendAll(t, l, want...)
	if n := len(l.Segments()); n < 5 {
		t.Errorf("%d segments after 20 records into 64-byte segments; want rotation into several", n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(AppendRecord(nil, []byte("late"))); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close = %v; want ErrClosed", err)
	}

	l2, rec := openLog(t, dir, testOptions(64))
	if rec.Truncated != 0 {
		t.Errorf("Recovery.Truncated = %d after a clean close; want 0", rec.Truncated)
	}
	got, at := scanAll(t, l2, Pos{})
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("reopened log holds %q; want %q", got, want)
	}
	// Scanning from a record's position starts with that record.
	if rest, _ := scanAll(t, l2, at[7]); len(rest) != 13 || rest[0] != want[7] {
		t.Errorf("Scan from %+v = %q; want the last 13 records from %q", at[7], rest, want[7])
	}
	appendAll(t, l2, "after reopen")
	if got, _ := scanAll(t, l2, Pos{}); len(got) != 21 || got[20] != "after reopen" {
		t.Errorf("after appending to the reopened log: %q; want 21 records ending with the new one", got)
	}
}

func TestConcurrentAppendsShareSyncs(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, testOptions(1<<10))
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				if err := l.Append(AppendRecord(nil, fmt.Appendf(nil, "w%d-%02d", w, i))); err != nil {
					t.Errorf("Append = %v", err)
				}
			}
		})
	}
	wg.Wait()
	if n := l.Syncs(); n >= 200 {
		t.Errorf("200 concurrent appends made %d fsyncs; want fewer (group commit)", n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, _ := openLog(t, dir, testOptions(1<<10))
	got, _ := scanAll(t, l2, Pos{})
	if len(got) != 200 {
		t.Fatalf("reopened log holds %d records; want 200", len(got))
	}
	next := map[string]int{}
	for _, r := range got {
		w, i, _ := strings.Cut(r, "-")
		if want := fmt.Sprintf("%02d", next[w]); i != want {
			t.Fatalf("writer %s: record %s after %d; want each writer's records in order", w, i, next[w])
		}
		next[w]++
	}
}

// TestDamagedTailIsCut damages the end of a segment the way a crash or a
// bad disk would and checks that Open keeps exactly the intact records,
// saves the cut bytes beside the segment and reports them.
func TestDamagedTailIsCut(t *testing.T) {
	tests := []struct {
		name     string
		damage   func(t *testing.T, path string, starts []int64)
		wantRecs int
	}{
		{"torn header", func(t *testing.T, path string, _ []int64) { testenv.AppendFile(t, path, []byte{9, 0, 0}) }, 5},
		{"torn payload", func(t *testing.T, path string, _ []int64) { testenv.TruncateBy(t, path, 3) }, 4},
		{"checksum mismatch in the last record", func(t *testing.T, path string, _ []int64) { testenv.FlipByteAt(t, path, -1) }, 4},
		{"checksum mismatch in the middle", func(t *testing.T, path string, starts []int64) { testenv.FlipByteAt(t, path, starts[2]+HeaderSize+1) }, 2},
		{"zeros after the last record", func(t *testing.T, path string, _ []int64) { testenv.AppendFile(t, path, make([]byte, 4096)) }, 5},
		{"huge length", func(t *testing.T, path string, _ []int64) {
			testenv.AppendFile(t, path, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1})
		}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			want := payloads(5)
			l, _ := openLog(t, dir, testOptions(1<<20))
			appendAll(t, l, want...)
			_, at := scanAll(t, l, Pos{})
			end := l.End()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, SegmentName(end.Segment))
			starts := make([]int64, len(at))
			for i, p := range at {
				starts[i] = p.Offset
			}
			tt.damage(t, path, starts)
			damaged := testenv.FileSize(t, path)

			var logs bytes.Buffer // Open logs from one goroutine
			opts := testOptions(1 << 20)
			opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			l2, rec := openLog(t, dir, opts)
			wantSize := end.Offset
			if tt.wantRecs < len(want) {
				wantSize = starts[tt.wantRecs]
			}
			if got := testenv.FileSize(t, path); got != wantSize {
				t.Errorf("segment size after Open = %d; want %d (cut after the last intact record)", got, wantSize)
			}
			if rec.Truncated != damaged-wantSize {
				t.Errorf("Recovery.Truncated = %d; want %d", rec.Truncated, damaged-wantSize)
			}
			if !strings.Contains(logs.String(), "truncating") {
				t.Errorf("Open did not log the cut:\n%s", logs.String())
			}
			tail, err := os.ReadFile(fmt.Sprintf("%s.tail-%d", path, wantSize))
			if err != nil || int64(len(tail)) != damaged-wantSize {
				t.Errorf("saved tail = %d bytes, %v; want the %d bytes cut", len(tail), err, damaged-wantSize)
			}
			got, _ := scanAll(t, l2, Pos{})
			if strings.Join(got, ",") != strings.Join(want[:tt.wantRecs], ",") {
				t.Errorf("records after Open = %q; want %q", got, want[:tt.wantRecs])
			}
			if err := l2.Close(); err != nil {
				t.Fatal(err)
			}
			if _, rec := openLog(t, dir, testOptions(1<<20)); rec.Truncated != 0 {
				t.Errorf("second Open after the repair cut %d bytes; want 0", rec.Truncated)
			}
		})
	}
}

// TestStrict checks that a strict log cuts only what a crash mid-append
// leaves at the end of its newest segment and refuses any other damage.
func TestStrict(t *testing.T) {
	tests := []struct {
		name    string
		damage  func(t *testing.T, newest, older string, starts []int64)
		wantCut int64 // -1: Open fails with ErrCorrupt
	}{
		{"torn header", func(t *testing.T, newest, _ string, _ []int64) { testenv.AppendFile(t, newest, []byte{1, 2, 3}) }, 3},
		{"torn payload", func(t *testing.T, newest, _ string, _ []int64) { testenv.TruncateBy(t, newest, 2) }, HeaderSize + 9 - 2},
		{"checksum mismatch in the last record", func(t *testing.T, newest, _ string, _ []int64) { testenv.FlipByteAt(t, newest, -1) }, HeaderSize + 9},
		{"length past the end", func(t *testing.T, newest, _ string, _ []int64) {
			testenv.AppendFile(t, newest, []byte("0badc0de {\"torn"))
		}, 15},
		{"zeros to the end", func(t *testing.T, newest, _ string, _ []int64) { testenv.AppendFile(t, newest, make([]byte, 100)) }, 100},
		{"checksum mismatch before the last record", func(t *testing.T, newest, _ string, starts []int64) {
			testenv.FlipByteAt(t, newest, starts[0]+HeaderSize)
		}, -1},
		{"damage in an older segment", func(t *testing.T, _, older string, _ []int64) { testenv.FlipByteAt(t, older, -1) }, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := testOptions(1 << 10)
			opts.Strict = true
			l, _ := openLog(t, dir, opts)
			appendAll(t, l, "older 01")
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l, _ = openLog(t, dir, opts)
			appendAll(t, l, payloads(3)...)
			_, at := scanAll(t, l, Pos{Segment: l.End().Segment})
			segs := l.Segments()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			starts := make([]int64, len(at))
			for i, p := range at {
				starts[i] = p.Offset
			}
			tt.damage(t, filepath.Join(dir, SegmentName(segs[1])), filepath.Join(dir, SegmentName(segs[0])), starts)
			l, rec, err := Open(dir, opts)
			if err == nil {
				defer l.Close()
			}
			if tt.wantCut < 0 {
				if !errors.Is(err, ErrCorrupt) {
					t.Errorf("strict Open = %v; want ErrCorrupt", err)
				}
				return
			}
			if err != nil || rec.Truncated != tt.wantCut {
				t.Errorf("strict Open = cut %d bytes, %v; want %d cut, nil", rec.Truncated, err, tt.wantCut)
			}
		})
	}
}

func TestOpenSegmentFiles(t *testing.T) {
	t.Run("segment torn while being created is removed", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, SegmentName(3))
		if err := os.WriteFile(path, []byte(testMagic[:3]), 0o640); err != nil {
			t.Fatal(err)
		}
		l, _ := openLog(t, dir, testOptions(1<<10))
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stat torn segment after Open = %v; want it removed", err)
		}
		if got := l.Segments(); len(got) != 1 || got[0] != 4 {
			t.Errorf("Segments() = %v; want only the new [4]", got)
		}
	})
	t.Run("foreign file is refused", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, SegmentName(1)), []byte("not a log segment"), 0o640); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Open(dir, testOptions(1<<10)); err == nil || !strings.Contains(err.Error(), "refusing") {
			t.Errorf("Open over a foreign .seg file = %v; want a refusal", err)
		}
	})
	t.Run("start deletes older segments and is never reused", func(t *testing.T) {
		dir := t.TempDir()
		l, _ := openLog(t, dir, testOptions(16))
		appendAll(t, l, payloads(3)...)
		segs := l.Segments()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		opts := testOptions(16)
		opts.Start = segs[1]
		l2, _ := openLog(t, dir, opts)
		if got, _ := scanAll(t, l2, Pos{}); len(got) != 2 {
			t.Errorf("records from segment %d on = %q; want the last 2", opts.Start, got)
		}
		if _, err := os.Stat(filepath.Join(dir, SegmentName(segs[0]))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stat segment before Start = %v; want it deleted", err)
		}
		if err := l2.Close(); err != nil {
			t.Fatal(err)
		}
		opts.Start = 57
		l3, _ := openLog(t, dir, opts)
		if got := l3.Segments(); len(got) != 1 || got[0] != 58 {
			t.Errorf("Segments() with Start 57 = %v; want only the new [58]", got)
		}
	})
}

func TestReaderAndRemove(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, testOptions(40))
	want := payloads(6)
	appendAll(t, l, want...)
	r := l.NewReader()
	defer r.Close()
	var got []string
	pos := Pos{Segment: l.Segments()[0]}
	for range 20 {
		b, err := r.Read(pos, 1, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range b.Records {
			got = append(got, string(p))
		}
		pos = b.End
		if b.Sealed {
			if err := l.Remove(b.End.Segment); err != nil {
				t.Fatal(err)
			}
			pos = Pos{Segment: l.Segments()[0]}
		}
		if len(b.Records) == 0 && !b.Sealed {
			break
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("read %q; want %q", got, want)
	}
	if segs := l.Segments(); len(segs) != 1 || pos != l.End() {
		t.Errorf("after reading and removing everything: segments %v, position %+v; want only the active one and its end %+v", segs, pos, l.End())
	}
	if err := l.Remove(l.End().Segment); err == nil {
		t.Error("Remove(active segment) = nil; want an error")
	}
}

func TestRewrite(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, testOptions(32))
	appendAll(t, l, payloads(5)...)
	var recs []byte
	for _, p := range []string{"kept a", "kept b"} {
		recs = AppendRecord(recs, []byte(p))
	}
	if err := l.Rewrite(recs); err != nil {
		t.Fatal(err)
	}
	appendAll(t, l, "after")
	want := "kept a,kept b,after"
	if got, _ := scanAll(t, l, Pos{}); strings.Join(got, ",") != want {
		t.Errorf("after Rewrite: %q; want %s", got, want)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, _ := openLog(t, dir, testOptions(32))
	if got, _ := scanAll(t, l2, Pos{}); strings.Join(got, ",") != want {
		t.Errorf("reopened after Rewrite: %q; want %s", got, want)
	}
}
