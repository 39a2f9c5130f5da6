package sessionlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/segmentio/kafka-go"
)

// A spool record on disk is
//
//	length  uint32 LE   bytes of payload, 1..maxRecordBytes
//	crc     uint32 LE   CRC-32C (Castagnoli) of payload
//	payload             version byte (1), appended-at unix nanos (int64 LE),
//	                    key, value, header count, then each header's key and
//	                    value; every byte string is a uvarint length and its bytes.
//
// A segment file is segmentMagic followed by records.
const (
	segmentMagic     = "PRLYSPL1"
	recordHeaderSize = 8
	recordVersion    = 1
	// maxRecordBytes bounds one record's payload; a longer length on disk
	// is corruption.
	maxRecordBytes = 1 << 20
)

// errCorrupt marks a record that is not what was written: a bad checksum, a
// length out of range or a payload that does not parse.
var errCorrupt = errors.New("corrupt spool record")

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
	start := len(dst)
	dst = append(dst, make([]byte, recordHeaderSize)...)
	dst = append(dst, recordVersion)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.appended.UnixNano()))
	dst = appendBytes(dst, r.key)
	dst = appendBytes(dst, r.value)
	dst = binary.AppendUvarint(dst, uint64(len(r.headers)))
	for _, h := range r.headers {
		dst = appendBytes(dst, []byte(h.Key))
		dst = appendBytes(dst, h.Value)
	}
	payload := dst[start+recordHeaderSize:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(payload, crc32.MakeTable(crc32.Castagnoli)))
	return dst
}

func appendBytes(dst, b []byte) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(b))), b...)
}

// readRecord reads one record from r and returns it with its size on disk.
// It returns io.EOF at a clean end, io.ErrUnexpectedEOF for a record cut
// short (a torn write) and an error wrapping errCorrupt for anything else
// that is not a whole, intact record.
func readRecord(r io.Reader) (record, int, error) {
	var hdr [recordHeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return record{}, 0, err
	}
	n := binary.LittleEndian.Uint32(hdr[:4])
	if n == 0 || n > maxRecordBytes {
		return record{}, 0, fmt.Errorf("%w: length %d out of range", errCorrupt, n)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return record{}, 0, err
	}
	if got, want := crc32.Checksum(payload, crc32.MakeTable(crc32.Castagnoli)), binary.LittleEndian.Uint32(hdr[4:]); got != want {
		return record{}, 0, fmt.Errorf("%w: checksum %08x, want %08x", errCorrupt, got, want)
	}
	rec, err := decodePayload(payload)
	if err != nil {
		return record{}, 0, err
	}
	return rec, recordHeaderSize + int(n), nil
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
