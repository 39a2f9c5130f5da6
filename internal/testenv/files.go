package testenv

import (
	"os"
	"testing"
)

// FileSize returns the size of the file at path.
func FileSize(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// AppendFile appends b to the file at path, as a torn or stray write would.
func AppendFile(t testing.TB, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

// TruncateBy cuts the last n bytes off the file at path.
func TruncateBy(t testing.TB, path string, n int64) {
	t.Helper()
	if err := os.Truncate(path, FileSize(t, path)-n); err != nil {
		t.Fatal(err)
	}
}

// FlipByteAt flips a bit of the byte at off in the file at path, counted
// from the end when off is negative.
func FlipByteAt(t testing.TB, path string, off int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += int64(len(data))
	}
	data[off] ^= 0x40
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
}
