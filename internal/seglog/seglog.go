// Package seglog is an append-only log of checksummed records in numbered
// segment files: [Log.Write] and [Log.Sync] make records durable with one
// fsync shared by concurrent writers, a segment is sealed once it reaches a
// size, [Open] cuts a torn or corrupt tail (keeping the cut bytes beside the
// segment) and [Log.Scan] or a [Reader] reads the records back. The gateway's
// session-log spool and the learner's store are built on it.
//
// Files in the log's directory: NNNNNNNNNNNNNNNNNNNN.seg, the segments, and
// NNNNNNNNNNNNNNNNNNNN.seg.tail-OFFSET, bytes cut from a damaged segment and
// kept for an operator to inspect. Other files are left alone.
package seglog

import (
	"bufio"
	"encoding/binary"
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
	"sync/atomic"

	"github.com/parleyhq/parley/internal/atomicfile"
)

// ErrClosed is returned by a Log's methods after Close.
var ErrClosed = errors.New("seglog: closed")

// Options says what a log's segments look like and how it recovers.
type Options struct {
	// Magic starts every segment file; Open refuses a .seg file that starts
	// with anything else.
	Magic string
	// SegmentBytes is the size at which a segment is sealed and a new one
	// started.
	SegmentBytes int64
	// MaxRecordBytes bounds a record's payload; a longer length on disk is
	// corruption.
	MaxRecordBytes int
	// Start is the oldest segment still wanted: Open deletes older ones
	// unread, and never gives a new segment an id at or below it.
	Start uint64
	// Strict makes Open refuse, with ErrCorrupt, damage anywhere but at the
	// very end of the newest segment holding records, which is all a crash
	// mid-append can leave: a record cut short or running past the end of
	// the file, or zeros to the end. Otherwise every damaged tail is cut.
	Strict bool
	// Logger reports repairs; nil discards.
	Logger *slog.Logger
}

// Pos is where a record starts: a segment id and a byte offset in it. An
// offset before the end of the magic means the segment's first record.
type Pos struct {
	Segment uint64
	Offset  int64
}

// Recovery says what Open found left by a previous process.
type Recovery struct {
	// Truncated is the bytes cut from damaged segment tails.
	Truncated int64
}

// Log is an open segment log. Write, Sync, Append and the accessors are
// safe for concurrent use.
type Log struct {
	dir  string
	opts Options
	log  *slog.Logger

	mu         sync.Mutex
	segments   []uint64 // ids on disk, oldest first; the last is the active one
	active     *os.File
	activeSize int64  // bytes of whole records written to the active segment
	written    uint64 // writes since open
	closed     bool

	// syncMu makes one caller of Sync at a time the leader that fsyncs (and
	// rotates) for everyone waiting.
	syncMu sync.Mutex
	synced uint64 // writes known durable; guarded by syncMu
	syncs  atomic.Uint64
}

// SegmentName is the file name of segment id.
func SegmentName(id uint64) string { return fmt.Sprintf("%020d.seg", id) }

// Open opens the log in dir, creating dir if needed. It checks every
// segment a previous process left, cutting a torn or corrupt tail, deletes
// segments without records, and starts a fresh active segment.
func Open(dir string, opts Options) (*Log, Recovery, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	var rec Recovery
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, rec, fmt.Errorf("create log dir %q: %w", dir, err)
	}
	l := &Log{dir: dir, opts: opts, log: opts.Logger}
	highest, rec, err := l.recover()
	if err != nil {
		return nil, rec, err
	}
	if err := l.startSegment(highest + 1); err != nil {
		return nil, rec, err
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		_ = l.active.Close()
		return nil, rec, err
	}
	return l, rec, nil
}

// segmentCheck is what checkSegment found in one segment.
type segmentCheck struct {
	id      uint64
	path    string
	records int
	end     int64 // offset after the last intact record
	size    int64 // file size
	damage  error // why the bytes from end on are not records; nil if none
	torn    bool  // the damage is all at the end of the file, as a crash leaves it
}

// recover checks the segments on disk and returns the highest id it saw,
// on disk or in opts.Start.
func (l *Log) recover() (highest uint64, rec Recovery, err error) {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return 0, rec, fmt.Errorf("read log dir %q: %w", l.dir, err)
	}
	var ids []uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".seg")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		id, err := strconv.ParseUint(name, 10, 64)
		if err != nil || id == 0 {
			return 0, rec, fmt.Errorf("log dir %q: unexpected segment file %q", l.dir, e.Name())
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	highest = l.opts.Start
	if len(ids) > 0 {
		highest = max(highest, ids[len(ids)-1])
	}

	var checks []segmentCheck
	newest := -1 // index in checks of the newest segment with records
	for _, id := range ids {
		path := l.path(id)
		if id < l.opts.Start {
			if err := os.Remove(path); err != nil {
				return 0, rec, fmt.Errorf("remove consumed log segment %q: %w", path, err)
			}
			continue
		}
		c, err := l.checkSegment(id)
		if err != nil {
			return 0, rec, err
		}
		if c.records > 0 {
			newest = len(checks)
		}
		checks = append(checks, c)
	}
	if l.opts.Strict {
		for i, c := range checks {
			if c.damage != nil && (i < newest || !c.torn) {
				return 0, rec, fmt.Errorf("log segment %q is damaged at offset %d, not a torn final record: %w: %w", c.path, c.end, ErrCorrupt, c.damage)
			}
		}
	}
	for _, c := range checks {
		if c.damage != nil {
			if err := l.cutTail(c); err != nil {
				return 0, rec, err
			}
			rec.Truncated += c.size - c.end
		}
		if c.records == 0 {
			if err := os.Remove(c.path); err != nil {
				return 0, rec, fmt.Errorf("remove empty log segment %q: %w", c.path, err)
			}
			continue
		}
		l.segments = append(l.segments, c.id)
	}
	return highest, rec, nil
}

// checkSegment reads every record of segment id without changing it. A file
// shorter than the magic (a crash while creating it) comes back with no
// records; one with other contents is an error.
func (l *Log) checkSegment(id uint64) (segmentCheck, error) {
	c := segmentCheck{id: id, path: l.path(id)}
	f, err := os.Open(c.path)
	if err != nil {
		return c, fmt.Errorf("open log segment %q: %w", c.path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return c, fmt.Errorf("stat log segment %q: %w", c.path, err)
	}
	c.size = st.Size()
	br := bufio.NewReaderSize(f, 256<<10)
	magic := make([]byte, len(l.opts.Magic))
	if n, err := io.ReadFull(br, magic); err != nil || string(magic) != l.opts.Magic {
		if c.size < int64(len(magic)) && l.opts.Magic[:n] == string(magic[:n]) {
			return c, nil
		}
		return c, fmt.Errorf("log segment %q does not start with %q; refusing to touch it", c.path, l.opts.Magic)
	}
	c.end = int64(len(magic))
	for {
		_, n, err := ReadRecord(br, l.opts.MaxRecordBytes)
		if err == io.EOF {
			return c, nil
		}
		if err != nil {
			c.damage = err
			c.torn, err = tornTail(f, c.end, c.size)
			if err != nil {
				return c, fmt.Errorf("read log segment %q: %w", c.path, err)
			}
			return c, nil
		}
		c.records++
		c.end += int64(n)
	}
}

// tornTail reports whether the damaged bytes of f from off to size are what
// a crash mid-append leaves: a record whose header or payload would run to
// or past the end of the file, or zeros to the end.
func tornTail(f *os.File, off, size int64) (bool, error) {
	var hdr [HeaderSize]byte
	if n, err := f.ReadAt(hdr[:], off); n < HeaderSize {
		if err == io.EOF {
			return true, nil
		}
		return false, err
	}
	if off+HeaderSize+int64(binary.LittleEndian.Uint32(hdr[:4])) >= size {
		return true, nil
	}
	buf := make([]byte, 64<<10)
	for r := io.NewSectionReader(f, off, size-off); ; {
		n, err := r.Read(buf)
		if slices.ContainsFunc(buf[:n], func(b byte) bool { return b != 0 }) {
			return false, nil
		}
		if err == io.EOF {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// cutTail saves the damaged bytes of c beside it and truncates the segment
// after its last intact record.
func (l *Log) cutTail(c segmentCheck) error {
	f, err := os.OpenFile(c.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open log segment %q: %w", c.path, err)
	}
	defer f.Close()
	saved, saveErr := saveTail(f, c.path, c.end)
	l.log.Warn("log segment has a torn or corrupt tail (a crash while writing); truncating it",
		"segment", c.path, "offset", c.end, "dropped_bytes", c.size-c.end, "reason", c.damage,
		"saved_to", saved, "save_err", saveErr)
	if err := f.Truncate(c.end); err != nil {
		return fmt.Errorf("truncate log segment %q at %d: %w", c.path, c.end, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync log segment %q: %w", c.path, err)
	}
	return nil
}

// saveTail copies the segment from off to its end into a file beside it
// (not a segment, so never read back), for an operator to inspect: after a
// crash it is a torn record, but after disk corruption it may hold intact
// records behind the damaged one.
func saveTail(f *os.File, path string, off int64) (string, error) {
	dst := fmt.Sprintf("%s.tail-%d", path, off)
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return "", fmt.Errorf("save log tail %q: %w", dst, err)
	}
	_, err = io.Copy(out, io.NewSectionReader(f, off, 1<<62))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("save log tail %q: %w", dst, err)
	}
	return dst, nil
}

func (l *Log) path(id uint64) string { return filepath.Join(l.dir, SegmentName(id)) }

// startSegment creates segment id with the magic, fsync'd, and makes it the
// active one. The caller holds mu or owns l exclusively, and syncs the dir.
func (l *Log) startSegment(id uint64) error {
	path := l.path(id)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("create log segment %q: %w", path, err)
	}
	if _, err := f.WriteString(l.opts.Magic); err != nil {
		f.Close()
		return fmt.Errorf("write log segment %q: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync log segment %q: %w", path, err)
	}
	l.active, l.activeSize = f, int64(len(l.opts.Magic))
	l.segments = append(l.segments, id)
	return nil
}

// Write appends records, whole ones built with AppendRecord, to the active
// segment and returns a sequence number for Sync. They are not durable
// until Sync returns.
func (l *Log) Write(records []byte) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	if _, err := l.active.Write(records); err != nil {
		// Cut a partial write so the next record starts on a boundary.
		_ = l.active.Truncate(l.activeSize)
		return 0, fmt.Errorf("append to log %q: %w", l.dir, err)
	}
	l.activeSize += int64(len(records))
	l.written++
	return l.written, nil
}

// Sync returns once the write numbered seq is durable. The first caller to
// arrive fsyncs every write so far; callers behind it usually find theirs
// already covered (group commit: writes that arrive while an fsync runs
// share the next one, so the window is bounded by one fsync's time). The
// leader also seals a full active segment and starts the next, so only it
// ever syncs or closes a segment file.
func (l *Log) Sync(seq uint64) error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if l.synced >= seq {
		return nil
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	target, f := l.written, l.active
	rotated := false
	if l.activeSize >= l.opts.SegmentBytes {
		if err := l.startSegment(l.segments[len(l.segments)-1] + 1); err != nil {
			l.log.Error("cannot start a new log segment; appending to the current one", "err", err)
		} else {
			rotated = true
		}
	}
	l.mu.Unlock()
	err := f.Sync()
	l.syncs.Add(1)
	if rotated {
		_ = f.Close()
		if err == nil {
			err = atomicfile.SyncDir(l.dir)
		}
	}
	if err != nil {
		return fmt.Errorf("sync log %q: %w", l.dir, err)
	}
	l.synced = target
	return nil
}

// SyncAll returns once every write made before it is durable.
func (l *Log) SyncAll() error {
	l.mu.Lock()
	seq := l.written
	l.mu.Unlock()
	return l.Sync(seq)
}

// Syncs returns how many fsyncs Sync has made: with concurrent writers,
// fewer than the writes it made durable.
func (l *Log) Syncs() uint64 { return l.syncs.Load() }

// Append writes records, as Write does, and returns once they are durable.
func (l *Log) Append(records []byte) error {
	seq, err := l.Write(records)
	if err != nil {
		return err
	}
	return l.Sync(seq)
}

// Segments returns the ids of the segments on disk, oldest first; the last
// is the active one.
func (l *Log) Segments() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.segments)
}

// End is the position after the last record written.
func (l *Log) End() Pos {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Pos{Segment: l.segments[len(l.segments)-1], Offset: l.activeSize}
}

// Remove deletes sealed segment id, whose records are no longer wanted.
func (l *Log) Remove(id uint64) error {
	l.mu.Lock()
	i := slices.Index(l.segments, id)
	if i < 0 || i == len(l.segments)-1 {
		l.mu.Unlock()
		return fmt.Errorf("remove log segment %d of %q: not a sealed segment", id, l.dir)
	}
	l.segments = slices.Delete(l.segments, i, i+1)
	l.mu.Unlock()
	if err := os.Remove(l.path(id)); err != nil {
		return fmt.Errorf("remove log segment: %w", err)
	}
	return nil
}

// Rewrite replaces every record in the log with records (built with
// AppendRecord): it writes them into a new segment with atomicfile.Write,
// makes that the active segment and deletes the older ones. A crash before
// the deletions are durable leaves the older records in front of the new
// ones, so use it where reading a record twice is harmless.
func (l *Log) Rewrite(records []byte) error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	id := l.segments[len(l.segments)-1] + 1
	path := l.path(id)
	if err := atomicfile.Write(path, append([]byte(l.opts.Magic), records...), 0o640); err != nil {
		return fmt.Errorf("rewrite log %q: %w", l.dir, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("rewrite log %q: %w", l.dir, err)
	}
	old := l.segments
	_ = l.active.Close() // everything in it is superseded
	l.segments = []uint64{id}
	l.active, l.activeSize = f, int64(len(l.opts.Magic)+len(records))
	l.synced = l.written
	var errs []error
	for _, id := range old {
		if err := os.Remove(l.path(id)); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, atomicfile.SyncDir(l.dir))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("rewrite log %q: remove old segments: %w", l.dir, err)
	}
	return nil
}

// Close syncs and closes the active segment. Records stay on disk for the
// next Open.
func (l *Log) Close() error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	err := l.active.Sync()
	if err == nil {
		l.synced = l.written
	}
	return errors.Join(err, l.active.Close())
}

// Batch is a run of records from one segment.
type Batch struct {
	Records [][]byte
	// End is the position after the last record read.
	End Pos
	// Bytes is the bytes on disk from the read position to End.
	Bytes int64
	// Sealed says End is the end of a sealed segment: nothing follows in it.
	Sealed bool
}

// Reader reads records by position, keeping the segment it read last open.
// It is not safe for concurrent use; a Log may have several.
type Reader struct {
	log *Log
	id  uint64
	f   *os.File
}

// NewReader returns a Reader of l; Close it when done.
func (l *Log) NewReader() *Reader { return &Reader{log: l} }

// Read reads up to maxRecords records, and about maxBytes, from pos onward,
// never past the end of pos's segment nor past what has been written whole.
// A record that cannot be read (only a failing disk gets there: tails are
// checked at Open) is logged and the rest of its segment skipped.
func (r *Reader) Read(from Pos, maxRecords int, maxBytes int64) (Batch, error) {
	l := r.log
	l.mu.Lock()
	activeID, limit := l.segments[len(l.segments)-1], l.activeSize
	l.mu.Unlock()

	from.Offset = max(from.Offset, int64(len(l.opts.Magic)))
	b := Batch{End: from}
	if from.Segment == activeID && from.Offset >= limit {
		return b, nil
	}
	path := l.path(from.Segment)
	if r.f == nil || r.id != from.Segment {
		r.Close()
		f, err := os.Open(path)
		if err != nil {
			return b, fmt.Errorf("open log segment %q: %w", path, err)
		}
		r.f, r.id = f, from.Segment
	}
	if from.Segment != activeID {
		st, err := r.f.Stat()
		if err != nil {
			return b, fmt.Errorf("stat log segment %q: %w", path, err)
		}
		limit = st.Size()
	}
	br := bufio.NewReaderSize(io.NewSectionReader(r.f, from.Offset, max(0, limit-from.Offset)), 64<<10)
	for len(b.Records) < maxRecords && b.Bytes < maxBytes {
		p, n, err := ReadRecord(br, l.opts.MaxRecordBytes)
		if err == io.EOF {
			break
		}
		if err != nil {
			l.log.Error("unreadable log record; skipping the rest of the segment",
				"segment", path, "offset", b.End.Offset, "skipped_bytes", limit-b.End.Offset, "err", err)
			b.Bytes += limit - b.End.Offset
			b.End.Offset = limit
			break
		}
		b.Records = append(b.Records, p)
		b.End.Offset += int64(n)
		b.Bytes += int64(n)
	}
	b.Sealed = from.Segment != activeID && b.End.Offset >= limit
	return b, nil
}

// Close closes the segment file r holds open, if any; r stays usable.
func (r *Reader) Close() {
	if r.f != nil {
		_ = r.f.Close()
		r.f = nil
	}
}

// Scan calls fn with the position and payload of every record from pos on,
// in order, up to what has been written when it reaches the active segment.
// It stops at fn's first error and returns it.
func (l *Log) Scan(from Pos, fn func(Pos, []byte) error) error {
	r := l.NewReader()
	defer r.Close()
	for _, id := range l.Segments() {
		if id < from.Segment {
			continue
		}
		pos := Pos{Segment: id, Offset: int64(len(l.opts.Magic))}
		if id == from.Segment {
			pos.Offset = max(pos.Offset, from.Offset)
		}
		for {
			b, err := r.Read(pos, 1024, 4<<20)
			if err != nil {
				return err
			}
			for _, p := range b.Records {
				if err := fn(pos, p); err != nil {
					return err
				}
				pos.Offset += int64(HeaderSize + len(p))
			}
			if len(b.Records) == 0 {
				break
			}
			pos = b.End
		}
	}
	return nil
}
