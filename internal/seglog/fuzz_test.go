package seglog

import (
	"bytes"
	"testing"
)

// FuzzReadRecord feeds arbitrary bytes to the record parser: it must never
// panic, and whatever it accepts must re-encode to the bytes it read.
func FuzzReadRecord(f *testing.F) {
	good := AppendRecord(nil, []byte(`{"event_id":"x"}`))
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add(append(bytes.Clone(good), good...))
	f.Add([]byte{})
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, in []byte) {
		p, n, err := ReadRecord(bytes.NewReader(in), 1<<10)
		if err != nil {
			return
		}
		if n > len(in) || n != HeaderSize+len(p) {
			t.Fatalf("ReadRecord = %d payload bytes, size %d, of %d input bytes", len(p), n, len(in))
		}
		if enc := AppendRecord(nil, p); !bytes.Equal(enc, in[:n]) {
			t.Fatalf("re-encoding the payload = %x; want %x", enc, in[:n])
		}
	})
}
