package sessionlog

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/parleyhq/parley/internal/seglog"
)

// A spool record is a seglog record whose payload is a version byte (1),
// the appended-at unix nanos (int64 LE), key, value, header count, then each
// header's key and value; every byte string is a uvarint length and its
// bytes. A segment file is segmentMagic followed by records.
const (
	segmentMagic     = "PRLYSPL1"
	recordHeaderSize = seglog.HeaderSize
	recordVersion    = 1
	// maxRecordBytes bounds one record's payload; a longer length on disk
	// is corruption.
	maxRecordBytes = 1 << 20
)

// errCorrupt marks a record that is not what was written: a bad checksum, a
// length out of range or a payload that does not parse.
var errCorrupt = seglog.ErrCorrupt

// record is one spooled Kafka message and when Publish accepted it.
type record struct {
	appended time.Time
	key      []byte
	value    []byte
	headers  []kafka.Header
}

// message is the Kafka message for r, timestamped when Publish accepted it
// rather than when a late delivery happens to write it.
func (r record) message() kafka.Message {
	return kafka.Message{Key: r.key, Value: r.value, Headers: r.headers, Time: r.appended}
}

// appendRecord appends r's encoding, header included, to dst.
func appendRecord(dst []byte, r record) []byte {
	p := []byte{recordVersion}
	p = binary.LittleEndian.AppendUint64(p, uint64(r.appended.UnixNano()))
	p = appendBytes(p, r.key)
	p = appendBytes(p, r.value)
	p = binary.AppendUvarint(p, uint64(len(r.headers)))
	for _, h := range r.headers {
		p = appendBytes(p, []byte(h.Key))
		p = appendBytes(p, h.Value)
	}
	return seglog.AppendRecord(dst, p)
}

func appendBytes(dst, b []byte) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(b))), b...)
}

func decodePayload(p []byte) (record, error) {
	if len(p) < 9 || p[0] != recordVersion {
		return record{}, fmt.Errorf("%w: unknown version or short payload", errCorrupt)
	}
	rec := record{appended: time.Unix(0, int64(binary.LittleEndian.Uint64(p[1:9])))}
	d := decoder{b: p[9:]}
	rec.key = d.bytes()
	rec.value = d.bytes()
	nh := d.uvarint()
	if nh > uint64(len(d.b)) { // each header takes at least two bytes
		return record{}, fmt.Errorf("%w: %d headers in %d bytes", errCorrupt, nh, len(d.b))
	}
	if nh > 0 {
		rec.headers = make([]kafka.Header, 0, nh)
	}
	for range nh {
		k, v := d.bytes(), d.bytes()
		rec.headers = append(rec.headers, kafka.Header{Key: string(k), Value: v})
	}
	if d.err != nil || len(d.b) != 0 {
		return record{}, fmt.Errorf("%w: payload does not parse", errCorrupt)
	}
	return rec, nil
}

// decoder reads uvarint-prefixed fields, remembering the first failure.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errCorrupt
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errCorrupt
		return nil
	}
	b := d.b[:n:n]
	d.b = d.b[n:]
	return b
}
