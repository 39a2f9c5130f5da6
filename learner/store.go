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
	"sync"

	"github.com/parleyhq/parley/internal/atomicfile"
	"github.com/parleyhq/parley/internal/seglog"
	"github.com/parleyhq/parley/schema"
)

// ErrCorrupt is returned when a store file holds a damaged record anywhere
// but at its very end (a torn final record is a crash mid-write and is cut
// off on open).
var ErrCorrupt = seglog.ErrCorrupt

// Store file names inside the store directory.
const (
	storeMagic   = "PRLYSTO1"
	journalDir   = "open-sessions"
	journalMagic = "PRLYJRN1"
	// maxRecordBytes bounds one stored dialogue or journaled event.
	maxRecordBytes = 16 << 20

	// Files of the JSON-lines format that stores before seglog wrote; open
	// imports them into the logs and deletes them.
	legacySegmentPattern = "segment-*.jsonl"
	legacyJournalFile    = "open-sessions.journal"
)

// Store keeps ended dialogues durably in the learner's data directory and
// indexes them by session and by player.
//
// Dialogues go to a seglog.Log in the store directory, one record holding
// the JSON of a schema.Dialogue each. Every Append is fsync'd before it
// returns; a segment is sealed and a new one started once it reaches
// SegmentBytes. A store never holds two dialogues with the same session id.
//
// The events of sessions that have not ended yet go to a journal, a second
// log in the subdirectory open-sessions holding schema.SessionEvent records,
// so that the consumer can commit their Kafka offsets: on restart it
// replays the journal to rebuild the open sessions. The journal is
// rewritten with only the open sessions' events when it grows stale.
//
// All dialogues are also kept in memory, in the order they were stored:
// the learner trains on windows of them.
type Store struct {
	dir    string
	logger *slog.Logger

	mu        sync.RWMutex
	dialogues []schema.Dialogue
	bySession map[string]int
	byPlayer  map[string][]int
	log       *seglog.Log // nil once closed
	journal   *seglog.Log
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
	s := &Store{dir: dir, logger: logger, bySession: map[string]int{}, byPlayer: map[string][]int{}}
	if err := s.open(segmentBytes); err != nil {
		s.Close()
		return nil, fmt.Errorf("open store %q: %w", dir, err)
	}
	return s, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) open(segmentBytes int64) error {
	opts := seglog.Options{Magic: storeMagic, SegmentBytes: segmentBytes, MaxRecordBytes: maxRecordBytes,
		Strict: true, Logger: s.logger}
	var err error
	if s.log, _, err = seglog.Open(s.dir, opts); err != nil {
		return err
	}
	var dups int
	err = s.log.Scan(seglog.Pos{}, func(p seglog.Pos, raw []byte) error {
		var d schema.Dialogue
		if err := json.Unmarshal(raw, &d); err != nil {
			return fmt.Errorf("segment %d offset %d: %w: %w", p.Segment, p.Offset, ErrCorrupt, err)
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
		s.logger.Warn("store repeats sessions; kept the first copy", "duplicates", dups)
	}
	opts.Magic = journalMagic
	if s.journal, _, err = seglog.Open(filepath.Join(s.dir, journalDir), opts); err != nil {
		return fmt.Errorf("open journal: %w", err)
	}
	return s.importLegacy()
}

func (s *Store) index(d schema.Dialogue) {
	i := len(s.dialogues)
	s.dialogues = append(s.dialogues, d)
	s.bySession[d.SessionID] = i
	s.byPlayer[d.PlayerID] = append(s.byPlayer[d.PlayerID], i)
}

// importLegacy moves the dialogues and journal that a store before seglog
// left in JSON-lines files into the logs and deletes those files. A crash
// midway is harmless: the files stay until everything in them is durable in
// the logs, and Append skips the dialogues imported already.
func (s *Store) importLegacy() error {
	segments, err := filepath.Glob(filepath.Join(s.dir, legacySegmentPattern))
	if err != nil {
		return err
	}
	journal := filepath.Join(s.dir, legacyJournalFile)
	_, err = os.Stat(journal)
	hasJournal := err == nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if len(segments) == 0 && !hasJournal {
		return nil
	}
	var ds []schema.Dialogue
	for k, path := range segments {
		err := readRecords(path, k == len(segments)-1, s.logger, func(raw []byte) error {
			var d schema.Dialogue
			if err := json.Unmarshal(raw, &d); err != nil {
				return err
			}
			ds = append(ds, d)
			return nil
		})
		if err != nil {
			return fmt.Errorf("import %q: %w", path, err)
		}
	}
	n, err := s.append(ds)
	if err != nil {
		return fmt.Errorf("import legacy segments: %w", err)
	}
	var events []schema.SessionEvent
	if hasJournal {
		err := readRecords(journal, true, s.logger, func(raw []byte) error {
			var e schema.SessionEvent
			if err := json.Unmarshal(raw, &e); err != nil {
				return err
			}
			events = append(events, e)
			return nil
		})
		if err == nil {
			err = s.rewriteJournal(events)
		}
		if err != nil {
			return fmt.Errorf("import %q: %w", journal, err)
		}
		segments = append(segments, journal)
	}
	for _, path := range segments {
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("remove imported %q: %w", path, err)
		}
	}
	s.logger.Info("imported a store of the JSON-lines format", "dir", s.dir,
		"dialogues", n, "journal_events", len(events))
	return atomicfile.SyncDir(s.dir)
}

// Append stores the dialogues whose session ids the store does not hold yet
// (and only the first of several with the same id), fsyncs the segment and
// returns how many were added. When Append returns nil they are durable.
func (s *Store) Append(ds []schema.Dialogue) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return 0, errors.New("append to store: closed")
	}
	return s.append(ds)
}

func (s *Store) append(ds []schema.Dialogue) (int, error) {
	var recs []byte
	var fresh []schema.Dialogue
	seen := map[string]bool{}
	for _, d := range ds {
		if _, ok := s.bySession[d.SessionID]; ok || seen[d.SessionID] {
			continue
		}
		seen[d.SessionID] = true
		raw, err := marshalRecord(d)
		if err != nil {
			return 0, fmt.Errorf("append session %q: %w", d.SessionID, err)
		}
		recs = seglog.AppendRecord(recs, raw)
		fresh = append(fresh, d)
	}
	if len(fresh) == 0 {
		return 0, nil
	}
	if err := s.log.Append(recs); err != nil {
		return 0, fmt.Errorf("append to store: %w", err)
	}
	for _, d := range fresh {
		s.index(d)
	}
	return len(fresh), nil
}

// marshalRecord is the JSON of v, refused when too long for one record.
func marshalRecord(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(raw) > maxRecordBytes {
		return nil, fmt.Errorf("record of %d bytes exceeds %d", len(raw), maxRecordBytes)
	}
	return raw, nil
}

// encodeEvents renders events as journal records.
func encodeEvents(events []schema.SessionEvent) ([]byte, error) {
	var recs []byte
	for _, e := range events {
		raw, err := marshalRecord(e)
		if err != nil {
			return nil, fmt.Errorf("event %q: %w", e.EventID, err)
		}
		recs = seglog.AppendRecord(recs, raw)
	}
	return recs, nil
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
	recs, err := encodeEvents(events)
	if err != nil {
		return fmt.Errorf("append to journal: %w", err)
	}
	if err := s.journal.Append(recs); err != nil {
		return fmt.Errorf("append to journal: %w", err)
	}
	return nil
}

// Journal reads every event in the journal, oldest first.
func (s *Store) Journal() ([]schema.SessionEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journal == nil {
		return nil, errors.New("read journal: store closed")
	}
	var out []schema.SessionEvent
	err := s.journal.Scan(seglog.Pos{}, func(p seglog.Pos, raw []byte) error {
		var e schema.SessionEvent
		if err := json.Unmarshal(raw, &e); err != nil {
			return fmt.Errorf("segment %d offset %d: %w: %w", p.Segment, p.Offset, ErrCorrupt, err)
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	return out, nil
}

// RewriteJournal replaces the journal with exactly events (seglog's
// Rewrite: a crash midway can leave the old events in front of the new
// ones, which the consumer's replay absorbs as duplicates).
func (s *Store) RewriteJournal(events []schema.SessionEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journal == nil {
		return errors.New("rewrite journal: store closed")
	}
	return s.rewriteJournal(events)
}

func (s *Store) rewriteJournal(events []schema.SessionEvent) error {
	recs, err := encodeEvents(events)
	if err == nil {
		err = s.journal.Rewrite(recs)
	}
	if err != nil {
		return fmt.Errorf("rewrite journal: %w", err)
	}
	return nil
}

// Close closes the store's files. Everything appended is already durable.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.log != nil {
		errs = append(errs, s.log.Close())
		s.log = nil
	}
	if s.journal != nil {
		errs = append(errs, s.journal.Close())
		s.journal = nil
	}
	return errors.Join(errs...)
}

// readRecords calls fn with the JSON of every record of the legacy file at
// path. A damaged final record is cut off when truncateTorn is set (it is
// the trace of a crash mid-append); any other damage is ErrCorrupt.
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
			return nil // a complete record without its newline
		}
	}
}

// decodeRecord checks a legacy record line and returns its JSON.
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
