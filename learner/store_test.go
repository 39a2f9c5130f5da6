package learner

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/parleyhq/parley/internal/seglog"
)

// segmentIndexes lists the store's segment files in dir.
func segmentIndexes(dir string) ([]string, error) {
	return filepath.Glob(filepath.Join(dir, "*.seg"))
}

func (s *Store) segmentPath(id uint64) string { return filepath.Join(s.dir, seglog.SegmentName(id)) }

// encodeRecord renders v as one line of the legacy JSON-lines format.
func encodeRecord(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := fmt.Appendf(nil, "%08x ", crc32.ChecksumIEEE(raw))
	out = append(out, raw...)
	return append(out, '\n'), nil
}

// TestStoreImportsLegacyFiles opens a directory written by the JSON-lines
// store (two segments, the last with a torn record, and a journal) and
// checks that every dialogue and journaled event moves into the logs and
// the old files go.
func TestStoreImportsLegacyFiles(t *testing.T) {
	dir := t.TempDir()
	ds := testDialogues(5, 11)
	events := fuzzEvents()[:2]
	writeLegacy := func(name string, recs ...any) {
		t.Helper()
		var out []byte
		for _, r := range recs {
			line, err := encodeRecord(r)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, line...)
		}
		if err := os.WriteFile(filepath.Join(dir, name), out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeLegacy("segment-000001.jsonl", ds[0], ds[1], ds[2])
	writeLegacy("segment-000002.jsonl", ds[3], ds[1], ds[4])
	if err := appendBytes(filepath.Join(dir, "segment-000002.jsonl"), []byte(`0badc0de {"session_id":"torn`)); err != nil {
		t.Fatal(err)
	}
	writeLegacy(legacyJournalFile, json.RawMessage(events[0]), json.RawMessage(events[1]))

	for _, open := range []string{"import", "reopen"} {
		s, err := OpenStore(dir, 0, nil)
		if err != nil {
			t.Fatalf("%s: OpenStore = %v; want nil", open, err)
		}
		var got []string
		for _, d := range s.Range(0, s.Len()) {
			got = append(got, d.SessionID)
		}
		want := []string{ds[0].SessionID, ds[1].SessionID, ds[2].SessionID, ds[3].SessionID, ds[4].SessionID}
		if !slices.Equal(got, want) {
			t.Errorf("%s: stored sessions %q; want %q", open, got, want)
		}
		journal, err := s.Journal()
		if err != nil || len(journal) != 2 || journal[1].EventID != "0194a3b0-0000-7000-8000-000000000002" {
			t.Errorf("%s: Journal() = %+v, %v; want the 2 legacy events", open, journal, err)
		}
		if old, _ := filepath.Glob(filepath.Join(dir, "*.jsonl")); len(old) != 0 {
			t.Errorf("%s: legacy segments %q still there", open, old)
		}
		if _, err := os.Stat(filepath.Join(dir, legacyJournalFile)); !os.IsNotExist(err) {
			t.Errorf("%s: stat legacy journal = %v; want it removed", open, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStoreRefusesDamageBeforeNewerSegments(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(testDialogues(2, 12)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	first := s.segmentPath(1)
	if s, err = OpenStore(dir, 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(testDialogues(4, 12)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	data, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-2] ^= 0x40
	if err := os.WriteFile(first, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(dir, 0, nil); !errors.Is(err, ErrCorrupt) {
		t.Errorf("OpenStore with a damaged older segment = %v; want ErrCorrupt", err)
	}
}
