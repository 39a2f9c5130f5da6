// Package atomicfile replaces files so that a reader, or the next start after
// a crash, sees either the old contents or the new ones whole: [Write] writes
// a temporary file beside the target, fsyncs it, renames it over the target
// and fsyncs the directory; [SyncDir] makes a directory's entries durable.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces path with data, durably and atomically. A failed Write
// leaves path as it was and no temporary file behind.
func Write(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	_, werr := tmp.Write(data)
	err = errors.Join(werr, tmp.Chmod(perm), tmp.Sync(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %q: %w", path, err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	return nil
}

// SyncDir fsyncs dir so that the files created, renamed or removed in it
// stay so after a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %q: %w", dir, err)
	}
	if err := errors.Join(d.Sync(), d.Close()); err != nil {
		return fmt.Errorf("sync dir %q: %w", dir, err)
	}
	return nil
}
