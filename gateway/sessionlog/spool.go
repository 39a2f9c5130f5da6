package sessionlog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// spool is the write-ahead log of events not yet acknowledged by Kafka: a
// directory of numbered segment files, appended to by Publish and read from
// the oldest end by the drain. Every segment before the active one is sealed
// and fsync'd; records are fsync'd before Publish returns, and concurrent
// appends share one fsync (group commit).
//
// Files in the directory: NNNNNNNNNNNNNNNNNNNN.seg (segments), cursor (how
// far the oldest segment is delivered; a hint that only saves duplicates),
// LOCK (held with flock while a Logger uses the directory), and
// NNN.seg.tail-OFFSET (bytes cut from a damaged segment, kept for inspection).
type spool struct {
	dir          string
	segmentBytes int64
	maxBytes     int64
	log          *slog.Logger
	lock         *os.File

	mu         sync.Mutex
	segments   []uint64 // ids on disk, oldest first; the last is the active one
	active     *os.File
	activeSize int64  // bytes written to the active segment, whole records only
	written    uint64 // records appended since open
	events     int    // records not yet acknowledged
	bytes      int64  // their bytes
	closed     bool

	// syncMu makes one appender at a time the leader that fsyncs (and
	// rotates) for everyone waiting.
	syncMu sync.Mutex
	synced uint64 // records known durable; guarded by syncMu

	// Read side, used only by the drain, which the Logger runs one at a time.
	readID   uint64
	readOff  int64
	readFile *os.File
}

// batch is a run of records from one segment, read but not yet acknowledged.
type batch struct {
	recs   []record
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

func segmentName(id uint64) string { return fmt.Sprintf("%020d.seg", id) }

// openSpool locks dir, checks every segment a previous process left
// (truncating a torn or corrupt tail), and starts a fresh active segment.
func openSpool(dir string, segmentBytes, maxBytes int64, log *slog.Logger) (*spool, recovery, error) {
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
	highest, rec, err := s.recover()
	if err != nil {
		s.unlock()
		return nil, rec, err
	}
	// Never reuse an id the cursor may name, or its segment's successors
	// would be taken for delivered ones at the next open.
	next := highest + 1
	if err := s.startSegment(next); err != nil {
		s.unlock()
		return nil, rec, err
	}
	if err := syncDir(dir); err != nil {
		s.active.Close()
		s.unlock()
		return nil, rec, err
	}
	if s.readID == 0 {
		s.readID, s.readOff = next, int64(len(segmentMagic))
	}
	return s, rec, nil
}

func (s *spool) unlock() {
	_ = syscall.Flock(int(s.lock.Fd()), syscall.LOCK_UN)
	_ = s.lock.Close()
}

// recover scans the segments on disk and returns the highest segment id it
// saw, on disk or in the cursor. Segments the cursor says are delivered,
// empty ones and torn segment creations are deleted.
func (s *spool) recover() (highest uint64, rec recovery, err error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, rec, fmt.Errorf("read spool dir %q: %w", s.dir, err)
	}
	var ids []uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".seg")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		id, err := strconv.ParseUint(name, 10, 64)
		if err != nil || id == 0 {
			return 0, rec, fmt.Errorf("spool dir %q: unexpected segment file %q", s.dir, e.Name())
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	curID, curOff, hasCursor := s.readCursor()
	highest = curID
	if len(ids) > 0 {
		highest = max(highest, ids[len(ids)-1])
	}

	for _, id := range ids {
		path := filepath.Join(s.dir, segmentName(id))
		if hasCursor && id < curID {
			if err := os.Remove(path); err != nil {
				return 0, rec, fmt.Errorf("remove delivered spool segment %q: %w", path, err)
			}
			continue
		}
		starts, size, truncated, err := s.checkSegment(path)
		if err != nil {
			return 0, rec, err
		}
		rec.truncatedBytes += truncated
		from := 0 // index into starts of the first undelivered record
		if hasCursor && id == curID {
			from = slices.Index(starts, curOff)
			if from < 0 {
				from = 0
				if curOff != size {
					s.log.Warn("spool cursor is not at a record boundary; redelivering the segment",
						"segment", path, "cursor", curOff)
				} else {
					from = len(starts)
				}
			}
		}
		if from == len(starts) {
			if err := os.Remove(path); err != nil {
				return 0, rec, fmt.Errorf("remove empty spool segment %q: %w", path, err)
			}
			continue
		}
		if s.readID == 0 {
			s.readID, s.readOff = id, starts[from]
		}
		s.segments = append(s.segments, id)
		rec.events += len(starts) - from
		rec.bytes += size - starts[from]
	}
	s.events, s.bytes = rec.events, rec.bytes
	return highest, rec, nil
}

// checkSegment reads every record of the segment at path, truncates it after
// the last intact one, and returns the record offsets, the resulting size and
// the number of bytes truncated. A file shorter than the magic (a crash while
// creating it) comes back empty; one with other contents is an error.
func (s *spool) checkSegment(path string) (starts []int64, size, truncated int64, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("open spool segment %q: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("stat spool segment %q: %w", path, err)
	}
	br := bufio.NewReaderSize(f, 256<<10)
	magic := make([]byte, len(segmentMagic))
	if n, err := io.ReadFull(br, magic); err != nil || string(magic) != segmentMagic {
		if st.Size() < int64(len(segmentMagic)) && segmentMagic[:n] == string(magic[:n]) {
			return nil, 0, 0, nil
		}
		return nil, 0, 0, fmt.Errorf("spool segment %q does not start with %q; refusing to touch it", path, segmentMagic)
	}
	off := int64(len(segmentMagic))
	for {
		_, n, err := readRecord(br)
		if err == io.EOF {
			return starts, off, 0, nil
		}
		if err != nil {
			saved, saveErr := saveTail(f, path, off)
			s.log.Warn("spool segment has a torn or corrupt tail (a crash while writing); truncating it",
				"segment", path, "offset", off, "dropped_bytes", st.Size()-off, "reason", err,
				"saved_to", saved, "save_err", saveErr)
			if err := f.Truncate(off); err != nil {
				return nil, 0, 0, fmt.Errorf("truncate spool segment %q at %d: %w", path, off, err)
			}
			if err := f.Sync(); err != nil {
				return nil, 0, 0, fmt.Errorf("sync spool segment %q: %w", path, err)
			}
			return starts, off, st.Size() - off, nil
		}
		starts = append(starts, off)
		off += int64(n)
	}
}

// saveTail copies the segment from off to its end into a file beside it
// (not a segment, so never read back), for an operator to inspect: after a
// crash it is a torn record, but after disk corruption it may hold intact
// events behind the damaged one.
func saveTail(f *os.File, path string, off int64) (string, error) {
	dst := fmt.Sprintf("%s.tail-%d", path, off)
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return "", fmt.Errorf("save spool tail %q: %w", dst, err)
	}
	_, err = io.Copy(out, io.NewSectionReader(f, off, 1<<62))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("save spool tail %q: %w", dst, err)
	}
	return dst, nil
}

// startSegment creates segment id with its magic, fsync'd, and makes it the
// active one. The caller holds mu or owns s exclusively, and syncs the dir.
func (s *spool) startSegment(id uint64) error {
	path := filepath.Join(s.dir, segmentName(id))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("create spool segment %q: %w", path, err)
	}
	if _, err := f.WriteString(segmentMagic); err != nil {
		f.Close()
		return fmt.Errorf("write spool segment %q: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync spool segment %q: %w", path, err)
	}
	s.active, s.activeSize = f, int64(len(segmentMagic))
	s.segments = append(s.segments, id)
	return nil
}

// append writes one encoded record and returns once it is on disk.
func (s *spool) append(rec []byte) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.bytes+int64(len(rec)) > s.maxBytes {
		s.mu.Unlock()
		return ErrSpoolFull
	}
	if _, err := s.active.Write(rec); err != nil {
		// Cut a partial write so the next record starts on a boundary.
		_ = s.active.Truncate(s.activeSize)
		s.mu.Unlock()
		return fmt.Errorf("append to spool %q: %w", s.dir, err)
	}
	s.activeSize += int64(len(rec))
	s.written++
	s.events++
	s.bytes += int64(len(rec))
	seq := s.written
	s.mu.Unlock()
	return s.sync(seq)
}

// sync returns once record seq is durable. The first caller to arrive
// fsyncs every record written so far; callers behind it usually find their
// record already covered. The leader also rotates a full active segment, so
// only it ever syncs or closes a segment file.
func (s *spool) sync(seq uint64) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.synced >= seq {
		return nil
	}
	s.mu.Lock()
	target, f := s.written, s.active
	rotated := false
	if s.activeSize >= s.segmentBytes && !s.closed {
		if err := s.startSegment(s.segments[len(s.segments)-1] + 1); err != nil {
			s.log.Error("cannot start a new spool segment; appending to the current one", "err", err)
		} else {
			rotated = true
		}
	}
	s.mu.Unlock()
	err := f.Sync()
	if rotated {
		_ = f.Close()
		if err == nil {
			err = syncDir(s.dir)
		}
	}
	if err != nil {
		return fmt.Errorf("sync spool %q: %w", s.dir, err)
	}
	s.synced = target
	return nil
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
	s.mu.Lock()
	head := s.segments[0]
	activeID := s.segments[len(s.segments)-1]
	limit := s.activeSize
	s.mu.Unlock()

	if head != s.readID {
		s.closeReadFile()
		s.readID, s.readOff = head, int64(len(segmentMagic))
	}
	b := batch{segID: head, endOff: s.readOff}
	if head == activeID && s.readOff >= limit {
		return b, nil
	}
	path := filepath.Join(s.dir, segmentName(head))
	if s.readFile == nil {
		f, err := os.Open(path)
		if err != nil {
			return b, fmt.Errorf("open spool segment %q: %w", path, err)
		}
		s.readFile = f
	}
	if head != activeID {
		st, err := s.readFile.Stat()
		if err != nil {
			return b, fmt.Errorf("stat spool segment %q: %w", path, err)
		}
		limit = st.Size()
	}
	br := bufio.NewReaderSize(io.NewSectionReader(s.readFile, s.readOff, limit-s.readOff), 64<<10)
	for len(b.recs) < maxEvents && b.bytes < maxBytes {
		rec, n, err := readRecord(br)
		if err == io.EOF {
			break
		}
		if err != nil {
			// Only a failing disk gets here: tails are checked at open and
			// this process wrote the rest. Skip what cannot be read.
			s.log.Error("unreadable spool record; skipping the rest of the segment",
				"segment", path, "offset", b.endOff, "skipped_bytes", limit-b.endOff, "err", err)
			b.bytes += limit - b.endOff
			b.endOff = limit
			break
		}
		b.recs = append(b.recs, rec)
		b.endOff += int64(n)
		b.bytes += int64(n)
	}
	b.sealedEnd = head != activeID && b.endOff >= limit
	return b, nil
}

// commit records that b was acknowledged: it advances the read position,
// deletes a finished sealed segment and saves the cursor.
func (s *spool) commit(b batch) error {
	s.readOff = b.endOff
	s.mu.Lock()
	s.events = max(0, s.events-len(b.recs))
	s.bytes = max(0, s.bytes-b.bytes)
	if b.sealedEnd {
		s.segments = s.segments[1:]
	}
	if len(s.segments) == 1 && !b.sealedEnd && s.readOff >= s.activeSize {
		s.events, s.bytes = 0, 0 // everything written is delivered
	}
	next := s.segments[0]
	s.mu.Unlock()

	if b.sealedEnd {
		s.closeReadFile()
		path := filepath.Join(s.dir, segmentName(b.segID))
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("remove delivered spool segment %q: %w", path, err)
		}
		s.readID, s.readOff = next, int64(len(segmentMagic))
	}
	return s.writeCursor()
}

func (s *spool) closeReadFile() {
	if s.readFile != nil {
		_ = s.readFile.Close()
		s.readFile = nil
	}
}

// writeCursor saves the read position. It is not fsync'd: a lost or stale
// cursor only means some delivered events are delivered again.
func (s *spool) writeCursor() error {
	tmp := filepath.Join(s.dir, "cursor.tmp")
	data := fmt.Appendf(nil, "v1 %d %d\n", s.readID, s.readOff)
	if err := os.WriteFile(tmp, data, 0o640); err != nil {
		return fmt.Errorf("write spool cursor: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "cursor")); err != nil {
		return fmt.Errorf("write spool cursor: %w", err)
	}
	return nil
}

func (s *spool) readCursor() (id uint64, off int64, ok bool) {
	data, err := os.ReadFile(filepath.Join(s.dir, "cursor"))
	if err != nil {
		return 0, 0, false
	}
	if _, err := fmt.Sscanf(string(data), "v1 %d %d\n", &id, &off); err != nil || id == 0 || off < int64(len(segmentMagic)) {
		s.log.Warn("ignoring unreadable spool cursor; the oldest segment is delivered again", "dir", s.dir)
		return 0, 0, false
	}
	return id, off, true
}

// close syncs and closes every file and releases the directory. Records not
// yet delivered stay on disk for the next openSpool.
func (s *spool) close() error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	errs := []error{s.active.Sync(), s.active.Close(), s.writeCursor()}
	s.closeReadFile()
	s.unlock()
	return errors.Join(errs...)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open spool dir %q: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync spool dir %q: %w", dir, err)
	}
	return nil
}
