package sessionlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/parleyhq/parley/internal/seglog"
)

// spool is the write-ahead log of events not yet acknowledged by Kafka: a
// seglog.Log appended to by Publish and read from the oldest end by the
// drain, which deletes each segment once Kafka has acknowledged all of it.
// With no commit window records are fsync'd before append returns, and
// concurrent appends share one write and one fsync (group commit, see
// commitGroup); with one, append returns once the record is written to the
// segment file and the committer fsyncs everything written within the
// window. The spool bounds the bytes not yet acknowledged.
//
// Files in the directory besides the log's segments (and the tails it cuts
// from damaged ones): cursor (how far the oldest segment is delivered; a
// hint that only saves duplicates) and LOCK (held with flock while a Logger
// uses the directory).
type spool struct {
	dir          string
	segmentBytes int64
	maxBytes     int64
	log          *slog.Logger
	lock         *os.File
	seg          *seglog.Log

	mu      sync.Mutex
	events  int   // records not yet acknowledged
	bytes   int64 // their bytes
	closed  bool
	syncErr error // of the committer's last fsync; refuses appends until one succeeds

	// Group commit, without a commit window; guarded by mu.
	pending    *commitGroup // records waiting for the next write and fsync
	unwritten  int64        // bytes in pending and in the group being written
	committing bool         // a leader is writing and fsyncing a group
	// sync is seg.Sync; tests replace it to fail or hold an fsync.
	sync func(seq uint64) error

	// The committer, running when window > 0: dirty wakes it after a write,
	// stopCommit ends it and it closes committed when it returns.
	window     time.Duration
	dirty      chan struct{}
	stopCommit context.CancelFunc
	committed  chan struct{}

	// Read side, used only by the drain, which the Logger runs one at a time.
	read   seglog.Pos
	reader *seglog.Reader
	// cursorAt is when the cursor was last saved.
	cursorAt time.Time
}

// cursorEvery is how often the drain saves the cursor: a file write and a
// rename per delivered batch cost more than the delivery itself, and a
// cursor older by this much only means up to this much of the delivered
// events are delivered again after a crash.
const cursorEvery = time.Second

// batch is a run of records from one segment, read but not yet acknowledged.
type batch struct {
	recs   []record
	n      int // records read, recs and any that did not decode
	segID  uint64
	endOff int64
	bytes  int64 // on-disk bytes from the read offset to endOff
	// sealedEnd says endOff is the end of a sealed segment, which can be
	// deleted once the batch is acknowledged.
	sealedEnd bool
}

// recovery says what openSpool found left by a previous process.
type recovery struct {
	events         int
	bytes          int64
	truncatedBytes int64
}

func segmentName(id uint64) string { return seglog.SegmentName(id) }

// openSpool locks dir, opens the log in it (which cuts a torn or corrupt
// tail and starts a fresh active segment), counts what is undelivered and,
// with a positive commit window, starts the committer.
func openSpool(dir string, segmentBytes, maxBytes int64, window time.Duration, log *slog.Logger) (*spool, recovery, error) {
	var rec recovery
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, rec, fmt.Errorf("create spool dir %q: %w", dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return nil, rec, fmt.Errorf("open spool lock %q: %w", dir, err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, rec, fmt.Errorf("lock spool %q (is another gateway using it?): %w", dir, err)
	}
	s := &spool{dir: dir, segmentBytes: segmentBytes, maxBytes: maxBytes, log: log, lock: lock}
	// Segments before the cursor's are delivered, and the log never reuses
	// an id the cursor may name, or its successors would be taken for
	// delivered ones at the next open.
	cursor, hasCursor := s.readCursor()
	s.seg, rec.truncatedBytes, err = openLog(dir, segmentBytes, cursor.Segment, log)
	if err != nil {
		s.unlock()
		return nil, rec, err
	}
	s.reader = s.seg.NewReader()
	s.sync = s.seg.Sync
	if err := s.recover(cursor, hasCursor); err != nil {
		_ = s.seg.Close()
		s.unlock()
		return nil, rec, err
	}
	rec.events, rec.bytes = s.events, s.bytes
	if window > 0 {
		s.window = window
		ctx, cancel := context.WithCancel(context.Background())
		s.dirty, s.stopCommit, s.committed = make(chan struct{}, 1), cancel, make(chan struct{})
		go s.syncLoop(ctx)
	}
	return s, rec, nil
}

func openLog(dir string, segmentBytes int64, start uint64, log *slog.Logger) (*seglog.Log, int64, error) {
	l, rec, err := seglog.Open(dir, seglog.Options{
		Magic: segmentMagic, SegmentBytes: segmentBytes, MaxRecordBytes: maxRecordBytes,
		Start: start, Logger: log,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("open spool: %w", err)
	}
	return l, rec.Truncated, nil
}

func (s *spool) unlock() {
	_ = syscall.Flock(int(s.lock.Fd()), syscall.LOCK_UN)
	_ = s.lock.Close()
}

// recover counts the records from the cursor on and sets the read position
// to the first of them. A cursor segment delivered to its end is deleted; a
// cursor that is not at a record boundary redelivers its whole segment.
func (s *spool) recover(cursor seglog.Pos, hasCursor bool) error {
	var before, after struct {
		events int
		bytes  int64
	}
	atBoundary, curEnd := false, int64(len(segmentMagic))
	err := s.seg.Scan(seglog.Pos{Segment: cursor.Segment}, func(p seglog.Pos, payload []byte) error {
		n := int64(recordHeaderSize + len(payload))
		if hasCursor && p.Segment == cursor.Segment && p.Offset < cursor.Offset {
			before.events++
			before.bytes += n
		} else {
			atBoundary = atBoundary || p == cursor
			after.events++
			after.bytes += n
		}
		if p.Segment == cursor.Segment {
			curEnd = p.Offset + n
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read spool %q: %w", s.dir, err)
	}
	s.events, s.bytes = after.events, after.bytes
	head := s.seg.Segments()[0]
	s.read = seglog.Pos{Segment: head, Offset: int64(len(segmentMagic))}
	if !hasCursor || head != cursor.Segment {
		return nil
	}
	switch {
	case atBoundary:
		s.read.Offset = cursor.Offset
	case cursor.Offset == curEnd:
		if err := s.seg.Remove(head); err != nil {
			return err
		}
		s.read.Segment = s.seg.Segments()[0]
	default:
		s.log.Warn("spool cursor is not at a record boundary; redelivering the segment",
			"segment", filepath.Join(s.dir, segmentName(head)), "cursor", cursor.Offset)
		s.events += before.events
		s.bytes += before.bytes
	}
	return nil
}

// commitGroup is the records of the appends that arrived while the previous
// group was being written and fsync'd (classic group commit): one leader
// writes them with one write(2) and fsyncs them with one fsync, and every
// append in the group returns that write's or fsync's error. A lone append
// finds no group in progress and commits its record at once, so it waits for
// nothing but its own fsync; under load a group holds every record that
// arrived during one fsync, so that fsyncs per second stay bounded by the
// disk's rate and events per fsync grow with the load.
type commitGroup struct {
	buf    []byte
	events int
	// lead receives one token when the group is the next to commit: the
	// append that takes it becomes the group's leader.
	lead chan struct{}
	// done is closed once the group is durable or failed; err says which.
	done chan struct{}
	err  error
}

// append writes one encoded record and returns once it is on disk: fsync'd
// without a commit window (by the group commit it joins), written to the
// segment file (where it outlives the process) with one, the committer
// fsyncing it within the window (or append itself, when the record filled
// the segment).
func (s *spool) append(rec []byte) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.syncErr != nil {
		err := s.syncErr
		s.mu.Unlock()
		return fmt.Errorf("append to spool: the last fsync failed: %w", err)
	}
	if s.bytes+s.unwritten+int64(len(rec)) > s.maxBytes {
		s.mu.Unlock()
		return ErrSpoolFull
	}
	if s.window == 0 {
		return s.appendGrouped(rec) // unlocks mu
	}
	seq, err := s.seg.Write(rec)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("append to spool: %w", err)
	}
	s.events++
	s.bytes += int64(len(rec))
	s.mu.Unlock()
	// A full segment is sealed by the next fsync: that one runs here, so
	// that a segment outgrows SegmentBytes by no more than without a window.
	if s.seg.End().Offset < s.segmentBytes {
		select {
		case s.dirty <- struct{}{}:
		default:
		}
		return nil
	}
	if err := s.sync(seq); err != nil {
		return fmt.Errorf("append to spool: %w", err)
	}
	return nil
}

// appendGrouped adds rec to the pending group and returns the group's
// result. The caller holds mu; appendGrouped unlocks it.
func (s *spool) appendGrouped(rec []byte) error {
	g := s.pending
	if g == nil {
		g = &commitGroup{lead: make(chan struct{}, 1), done: make(chan struct{})}
		s.pending = g
	}
	g.buf = append(g.buf, rec...)
	g.events++
	s.unwritten += int64(len(rec))
	if s.committing {
		s.mu.Unlock()
		select {
		case <-g.done:
			return g.err
		case <-g.lead:
		}
		s.mu.Lock()
	}
	s.committing = true
	s.commitPending()
	return g.err
}

// commitPending is the leader's work, entered with mu held: it takes the
// pending group, writes it, fsyncs it, wakes its appends with the result
// and hands the lead to the group that gathered meanwhile, if any. One
// leader runs at a time (committing), so groups reach the file, and their
// fsyncs, in order.
func (s *spool) commitPending() {
	g := s.pending
	s.pending = nil
	seq, err := s.seg.Write(g.buf)
	s.unwritten -= int64(len(g.buf))
	if err == nil {
		s.events += g.events
		s.bytes += int64(len(g.buf))
	}
	s.mu.Unlock()
	if err == nil {
		err = s.sync(seq)
	}
	if err != nil {
		// Every append of the group fails: a failed fsync may have dropped
		// any of their bytes, and a failed write cut all of them.
		g.err = fmt.Errorf("append to spool: %w", err)
	}
	close(g.done)

	s.mu.Lock()
	if s.pending == nil {
		s.committing = false
	} else {
		s.pending.lead <- struct{}{}
	}
	s.mu.Unlock()
}

// syncLoop is the committer: after a write it waits out the window, so that
// the writes within it share one fsync, and fsyncs all written so far. A
// record is thus on disk within the window plus two fsyncs of its write. A
// failed fsync refuses appends until a later one succeeds: the kernel may
// have dropped the records it failed to write, so acknowledging more would
// hide the loss.
func (s *spool) syncLoop(ctx context.Context) {
	defer close(s.committed)
	for {
		select {
		case <-s.dirty:
		case <-ctx.Done():
			return
		}
		if !sleep(ctx, s.window) {
			return
		}
		err := s.seg.SyncAll()
		s.mu.Lock()
		if err != nil && s.syncErr == nil {
			s.log.Error("spool fsync failed; refusing events until one succeeds", "err", err, "dir", s.dir)
		}
		s.syncErr = err
		s.mu.Unlock()
		if err != nil {
			// Try again after the window even without a new write.
			select {
			case s.dirty <- struct{}{}:
			default:
			}
		}
	}
}

// backlog returns the records and bytes not yet acknowledged.
func (s *spool) backlog() (int, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events, s.bytes
}

// readBatch reads up to maxEvents records (and about maxBytes) from the
// oldest undelivered position, never across a segment boundary.
func (s *spool) readBatch(maxEvents int, maxBytes int64) (batch, error) {
	if head := s.seg.Segments()[0]; head != s.read.Segment {
		s.reader.Close()
		s.read = seglog.Pos{Segment: head, Offset: int64(len(segmentMagic))}
	}
	sb, err := s.reader.Read(s.read, maxEvents, maxBytes)
	b := batch{n: len(sb.Records), segID: s.read.Segment, endOff: sb.End.Offset, bytes: sb.Bytes, sealedEnd: sb.Sealed}
	if err != nil {
		return b, fmt.Errorf("read spool: %w", err)
	}
	for _, p := range sb.Records {
		rec, err := decodePayload(p)
		if err != nil {
			// The checksum matched, so this process or an older one wrote
			// it: nothing to deliver but nothing to retry either.
			s.log.Error("undecodable spool record; skipping it", "segment", b.segID, "err", err)
			continue
		}
		b.recs = append(b.recs, rec)
	}
	if len(b.recs) == 0 && b.n > 0 && !b.sealedEnd {
		// Nothing to deliver: step past what did not decode.
		if err := s.commit(b); err != nil {
			return b, err
		}
		return s.readBatch(maxEvents, maxBytes)
	}
	return b, nil
}

// commit records that b was acknowledged: it advances the read position,
// deletes a finished sealed segment and saves the cursor (after a deletion,
// or when the last save is cursorEvery old).
func (s *spool) commit(b batch) error {
	s.read.Offset = b.endOff
	s.mu.Lock()
	s.events = max(0, s.events-b.n)
	s.bytes = max(0, s.bytes-b.bytes)
	if end := s.seg.End(); !b.sealedEnd && s.read.Segment == end.Segment && s.read.Offset >= end.Offset {
		s.events, s.bytes = 0, 0 // everything written is delivered
	}
	s.mu.Unlock()

	if b.sealedEnd {
		s.reader.Close()
		if err := s.seg.Remove(b.segID); err != nil {
			return fmt.Errorf("remove delivered spool segment: %w", err)
		}
		s.read = seglog.Pos{Segment: s.seg.Segments()[0], Offset: int64(len(segmentMagic))}
	} else if time.Since(s.cursorAt) < cursorEvery {
		return nil
	}
	return s.writeCursor()
}

// writeCursor saves the read position. It is not fsync'd: a lost or stale
// cursor only means some delivered events are delivered again.
func (s *spool) writeCursor() error {
	tmp := filepath.Join(s.dir, "cursor.tmp")
	data := fmt.Appendf(nil, "v1 %d %d\n", s.read.Segment, s.read.Offset)
	if err := os.WriteFile(tmp, data, 0o640); err != nil {
		return fmt.Errorf("write spool cursor: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "cursor")); err != nil {
		return fmt.Errorf("write spool cursor: %w", err)
	}
	s.cursorAt = time.Now()
	return nil
}

func (s *spool) readCursor() (seglog.Pos, bool) {
	data, err := os.ReadFile(filepath.Join(s.dir, "cursor"))
	if err != nil {
		return seglog.Pos{}, false
	}
	var p seglog.Pos
	if _, err := fmt.Sscanf(string(data), "v1 %d %d\n", &p.Segment, &p.Offset); err != nil || p.Segment == 0 || p.Offset < int64(len(segmentMagic)) {
		s.log.Warn("ignoring unreadable spool cursor; the oldest segment is delivered again", "dir", s.dir)
		return seglog.Pos{}, false
	}
	return p, true
}

// close syncs and closes every file and releases the directory. Records not
// yet delivered stay on disk for the next openSpool.
func (s *spool) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	if s.window > 0 {
		s.stopCommit() // the log's Close fsyncs what the committer had not
		<-s.committed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := []error{s.seg.Close(), s.writeCursor()}
	s.reader.Close()
	s.unlock()
	return errors.Join(errs...)
}
