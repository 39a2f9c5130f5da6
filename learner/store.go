package learner

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/parleyhq/parley/schema"
)

// ErrCorrupt is returned when a store file holds a damaged record anywhere
// but at its very end (a torn final record is a crash mid-write and is cut
// off on open).
var ErrCorrupt = errors.New("learner: store record corrupt")

// Store file names inside the store directory.
const (
	segmentPrefix = "segment-"
	segmentSuffix = ".jsonl"
	journalFile   = "open-sessions.journal"
)

// Store keeps ended dialogues durably in the learner's data directory and
// indexes them by session and by player.
//
// Dialogues go to append-only segment files segment-NNNNNN.jsonl, one record
// per line: eight hex digits of the CRC-32 (IEEE) of the JSON, a space, the
// JSON of a schema.Dialogue. Every Append is fsync'd before it returns;
// a segment is closed and a new one started once it reaches SegmentBytes.
// A store never holds two dialogues with the same session id.
//
// The events of sessions that have not ended yet go to a journal file
// (open-sessions.journal, same record format holding schema.SessionEvent)
// so that the consumer can commit their Kafka offsets: on restart it
// replays the journal to rebuild the open sessions. The journal is
// rewritten with only the open sessions' events when it grows stale.
//
// All dialogues are also kept in memory, in the order they were stored:
// the learner trains on windows of them.
type Store struct {
	dir          string
	segmentBytes int64
	logger       *slog.Logger

	mu        sync.RWMutex
	dialogues []schema.Dialogue
	bySession map[string]int
	byPlayer  map[string][]int
	seg       *os.File
	segIndex  int
	segSize   int64
	journal   *os.File
}

// DefaultSegmentBytes is the size at which a segment file is closed.
const DefaultSegmentBytes = 64 << 20

// OpenStore opens (creating if needed) the store in dir, reading every
// segment. segmentBytes <= 0 means DefaultSegmentBytes.
func OpenStore(dir string, segmentBytes int64, logger *slog.Logger) (*Store, error) {
	if segmentBytes <= 0 {
		segmentBytes = DefaultSegmentBytes
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open store %q: %w", dir, err)
	}
	s := &Store{dir: dir, segmentBytes: segmentBytes, logger: logger,
		bySession: map[string]int{}, byPlayer: map[string][]int{}}
	if err := s.load(); err != nil {
		s.Close()
		return nil, fmt.Errorf("open store %q: %w", dir, err)
	}
	return s, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) segmentPath(i int) string {
	return filepath.Join(s.dir, fmt.Sprintf("%s%06d%s", segmentPrefix, i, segmentSuffix))
}

// segmentIndexes lists the indexes of the segment files in dir, ascending.
func segmentIndexes(dir string) ([]int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, segmentPrefix) || !strings.HasSuffix(name, segmentSuffix) {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(name, segmentPrefix), segmentSuffix))
		if err != nil {
			continue
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

func (s *Store) load() error {
	idx, err := segmentIndexes(s.dir)
	if err != nil {
		return err
	}
	for k, i := range idx {
		last := k == len(idx)-1
		var dups int
		err := readRecords(s.segmentPath(i), last, s.logger, func(raw []byte) error {
			var d schema.Dialogue
			if err := json.Unmarshal(raw, &d); err != nil {
				return err
			}
			if _, ok := s.bySession[d.SessionID]; ok {
				dups++
				return nil
			}
			s.index(d)
			return nil
		})
		if err != nil {
			return err
		}
		if dups > 0 {
			s.logger.Warn("store segment repeats sessions; kept the first copy", "segment", i, "duplicates", dups)
		}
	}
	s.segIndex = 1
	if len(idx) > 0 {
		s.segIndex = idx[len(idx)-1]
	}
	if err := s.openSegment(); err != nil {
		return err
	}
	j, err := os.OpenFile(filepath.Join(s.dir, journalFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	s.journal = j
	return syncDir(s.dir)
}

func (s *Store) index(d schema.Dialogue) {
	i := len(s.dialogues)
	s.dialogues = append(s.dialogues, d)
	s.bySession[d.SessionID] = i
	s.byPlayer[d.PlayerID] = append(s.byPlayer[d.PlayerID], i)
}

func (s *Store) openSegment() error {
	f, err := os.OpenFile(s.segmentPath(s.segIndex), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	s.seg, s.segSize = f, st.Size()
	return nil
}

// readRecords calls fn with the JSON of every record of the file at path. A
// damaged final record is cut off when truncateTorn is set (it is the trace
// of a crash mid-append); any other damage is ErrCorrupt.
func readRecords(path string, truncateTorn bool, logger *slog.Logger, fn func([]byte) error) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var off int64
	line := 0
	for {
		raw, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) && len(raw) == 0 {
			return nil
		}
		line++
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read %q: %w", path, err)
		}
		payload, ok := decodeRecord(raw)
		if ok {
			if ferr := fn(payload); ferr != nil {
				ok = false
			}
		}
		if !ok {
			rest, _ := io.ReadAll(r)
			if !truncateTorn || len(bytes.TrimSpace(rest)) > 0 {
				return fmt.Errorf("%q line %d: %w", path, line, ErrCorrupt)
			}
			logger.Warn("cutting off a torn record at the end of a store file", "file", path, "line", line, "bytes", len(raw))
			if err := os.Truncate(path, off); err != nil {
				return fmt.Errorf("truncate torn record of %q: %w", path, err)
			}
			return nil
		}
		off += int64(len(raw))
		if errors.Is(err, io.EOF) {
			// A complete record without its newline: keep it, but the next
			// append must start on a new line.
			return appendNewline(path)
		}
	}
}

func appendNewline(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte{'\n'})
	return errors.Join(werr, f.Sync(), f.Close())
}

// encodeRecord renders v as one store record line.
func encodeRecord(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(raw)+10)
	out = fmt.Appendf(out, "%08x ", crc32.ChecksumIEEE(raw))
	out = append(out, raw...)
	return append(out, '\n'), nil
}

// decodeRecord checks a record line and returns its JSON.
func decodeRecord(line []byte) ([]byte, bool) {
	line = bytes.TrimSuffix(line, []byte{'\n'})
	if len(line) < 10 || line[8] != ' ' {
		return nil, false
	}
	sum, err := strconv.ParseUint(string(line[:8]), 16, 32)
	if err != nil {
		return nil, false
	}
	payload := line[9:]
	if crc32.ChecksumIEEE(payload) != uint32(sum) {
		return nil, false
	}
	return payload, true
}

// Append stores the dialogues whose session ids the store does not hold yet
// (and only the first of several with the same id), fsyncs the segment and
// returns how many were added. When Append returns nil they are durable.
func (s *Store) Append(ds []schema.Dialogue) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seg == nil {
		return 0, errors.New("append to store: closed")
	}
	var buf bytes.Buffer
	var fresh []schema.Dialogue
	seen := map[string]bool{}
	for _, d := range ds {
		if _, ok := s.bySession[d.SessionID]; ok || seen[d.SessionID] {
			continue
		}
		seen[d.SessionID] = true
		rec, err := encodeRecord(d)
		if err != nil {
			return 0, fmt.Errorf("append session %q: %w", d.SessionID, err)
		}
		buf.Write(rec)
		fresh = append(fresh, d)
	}
	if len(fresh) == 0 {
		return 0, nil
	}
	if s.segSize > 0 && s.segSize+int64(buf.Len()) > s.segmentBytes {
		if err := s.rotate(); err != nil {
			return 0, fmt.Errorf("append to store: rotate segment: %w", err)
		}
	}
	if _, err := s.seg.Write(buf.Bytes()); err != nil {
		return 0, fmt.Errorf("append to store segment %d: %w", s.segIndex, err)
	}
	if err := s.seg.Sync(); err != nil {
		return 0, fmt.Errorf("sync store segment %d: %w", s.segIndex, err)
	}
	s.segSize += int64(buf.Len())
	for _, d := range fresh {
		s.index(d)
	}
	return len(fresh), nil
}

func (s *Store) rotate() error {
	if err := s.seg.Close(); err != nil {
		return err
	}
	s.segIndex++
	if err := s.openSegment(); err != nil {
		return err
	}
	return syncDir(s.dir)
}

// Has reports whether the store holds the session.
func (s *Store) Has(sessionID string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.bySession[sessionID]
	return ok
}

// Len is the number of stored dialogues.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.dialogues)
}

// Range returns copies of the dialogues stored at positions [from, to) in
// storage order (to is clamped to Len).
func (s *Store) Range(from, to int) []schema.Dialogue {
	s.mu.RLock()
	defer s.mu.RUnlock()
	to = min(to, len(s.dialogues))
	if from < 0 || from >= to {
		return nil
	}
	return slices.Clone(s.dialogues[from:to])
}

// Players lists the ids of the players with stored dialogues, sorted.
func (s *Store) Players() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.byPlayer))
	for p := range s.byPlayer {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// ByPlayer returns the player's dialogues in storage order.
func (s *Store) ByPlayer(playerID string) []schema.Dialogue {
	s.mu.RLock()
	defer s.mu.RUnlock()
	idx := s.byPlayer[playerID]
	out := make([]schema.Dialogue, len(idx))
	for k, i := range idx {
		out[k] = s.dialogues[i]
	}
	return out
}

// AppendJournal appends events of open sessions to the journal and fsyncs it.
func (s *Store) AppendJournal(events []schema.SessionEvent) error {
	if len(events) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journal == nil {
		return errors.New("append to journal: store closed")
	}
	var buf bytes.Buffer
	for _, e := range events {
		rec, err := encodeRecord(e)
		if err != nil {
			return fmt.Errorf("append event %q to journal: %w", e.EventID, err)
		}
		buf.Write(rec)
	}
	if _, err := s.journal.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("append to journal: %w", err)
	}
	if err := s.journal.Sync(); err != nil {
		return fmt.Errorf("sync journal: %w", err)
	}
	return nil
}

// Journal reads every event in the journal, oldest first.
func (s *Store) Journal() ([]schema.SessionEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []schema.SessionEvent
	err := readRecords(filepath.Join(s.dir, journalFile), true, s.logger, func(raw []byte) error {
		var e schema.SessionEvent
		if err := json.Unmarshal(raw, &e); err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	return out, nil
}

// RewriteJournal replaces the journal with exactly events, atomically
// (temporary file, fsync, rename, fsync of the directory).
func (s *Store) RewriteJournal(events []schema.SessionEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journal == nil {
		return errors.New("rewrite journal: store closed")
	}
	path := filepath.Join(s.dir, journalFile)
	tmp := path + ".tmp"
	var buf bytes.Buffer
	for _, e := range events {
		rec, err := encodeRecord(e)
		if err != nil {
			return fmt.Errorf("rewrite journal: %w", err)
		}
		buf.Write(rec)
	}
	if err := writeFileSync(tmp, buf.Bytes()); err != nil {
		return fmt.Errorf("rewrite journal: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rewrite journal: %w", err)
	}
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("rewrite journal: %w", err)
	}
	old := s.journal
	j, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("reopen journal: %w", err)
	}
	s.journal = j
	return old.Close()
}

// Close closes the store's files. Everything appended is already durable.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.seg != nil {
		errs = append(errs, s.seg.Close())
		s.seg = nil
	}
	if s.journal != nil {
		errs = append(errs, s.journal.Close())
		s.journal = nil
	}
	return errors.Join(errs...)
}

// writeFileSync writes and fsyncs a file.
func writeFileSync(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	return nil
}

// syncDir fsyncs a directory so that created and renamed files in it are
// durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
