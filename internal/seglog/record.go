package seglog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// A record on disk is
//
//	length  uint32 LE   bytes of payload, 1..Options.MaxRecordBytes
//	crc     uint32 LE   CRC-32C (Castagnoli) of payload
//	payload
//
// and a segment file is the log's magic followed by records.

// HeaderSize is the bytes a record takes on disk besides its payload.
const HeaderSize = 8

// ErrCorrupt marks a record that is not what was written: a bad checksum or
// a length out of range.
var ErrCorrupt = errors.New("seglog: corrupt record")

// AppendRecord appends the record holding payload, header included, to dst.
// [Log.Write] takes what it builds.
func AppendRecord(dst, payload []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(payload, crc32.MakeTable(crc32.Castagnoli)))
	return append(dst, payload...)
}

// ReadRecord reads one record from r and returns its payload and its size
// on disk. It returns io.EOF at a clean end, io.ErrUnexpectedEOF for a
// record cut short (a torn write) and an error wrapping ErrCorrupt for a
// length outside 1..maxPayload or a checksum mismatch.
func ReadRecord(r io.Reader, maxPayload int) ([]byte, int, error) {
	var hdr [HeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, 0, err
	}
	n := binary.LittleEndian.Uint32(hdr[:4])
	if n == 0 || uint64(n) > uint64(maxPayload) {
		return nil, 0, fmt.Errorf("%w: length %d out of range", ErrCorrupt, n)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, 0, err
	}
	if got, want := crc32.Checksum(payload, crc32.MakeTable(crc32.Castagnoli)), binary.LittleEndian.Uint32(hdr[4:]); got != want {
		return nil, 0, fmt.Errorf("%w: checksum %08x, want %08x", ErrCorrupt, got, want)
	}
	return payload, HeaderSize + int(n), nil
}
