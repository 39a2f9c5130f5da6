package sessionlog

import (
	"bytes"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// FuzzReadRecord feeds arbitrary bytes to the spool's record decoder: it must
// never panic, and whatever it accepts must re-encode to the bytes it read.
func FuzzReadRecord(f *testing.F) {
	good := appendRecord(nil, record{appended: time.Unix(1, 2), key: []byte("session"), value: []byte(`{"event_id":"x"}`),
		headers: []kafka.Header{{Key: "traceparent", Value: []byte("00-abc")}}})
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add(append(bytes.Clone(good), good...))
	f.Add([]byte{})
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, in []byte) {
		rec, n, err := readRecord(bytes.NewReader(in))
		if err != nil {
			return
		}
		if n > len(in) {
			t.Fatalf("readRecord consumed %d of %d bytes", n, len(in))
		}
		if enc := appendRecord(nil, rec); !bytes.Equal(enc, in[:n]) {
			t.Fatalf("re-encoding the decoded record = %x; want %x", enc, in[:n])
		}
	})
}
