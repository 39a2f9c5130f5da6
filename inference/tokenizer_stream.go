package inference

import "unicode/utf8"

// DecodeStream turns token ids into text one token at a time, for streaming
// replies. A byte-level token can end inside a multi-byte rune (an emoji or a
// Chinese character is often two or three tokens), so Next holds such a tail
// back until the rune is complete. The texts Next and Flush return, joined,
// are exactly Decode of all the ids. A DecodeStream is not safe for
// concurrent use; make one per reply.
type DecodeStream struct {
	tok     *Tokenizer
	pending []byte
}

// NewDecodeStream starts decoding one stream of ids.
func (t *Tokenizer) NewDecodeStream() *DecodeStream {
	return &DecodeStream{tok: t}
}

// Next adds the bytes of id and returns the text that is now complete, which
// may be "" while a rune is still open. Bytes that can never complete a rune
// are passed on as they are, as Decode would.
func (d *DecodeStream) Next(id int) string {
	d.pending = append(d.pending, d.tok.TokenBytes(id)...)
	hold := tokOpenRuneTail(d.pending)
	out := string(d.pending[:len(d.pending)-hold])
	d.pending = append(d.pending[:0], d.pending[len(d.pending)-hold:]...)
	return out
}

// Flush returns the bytes still held back, at the end of the stream.
func (d *DecodeStream) Flush() string {
	out := string(d.pending)
	d.pending = d.pending[:0]
	return out
}

// tokOpenRuneTail returns how many bytes at the end of b begin a UTF-8
// sequence that more bytes could still complete.
func tokOpenRuneTail(b []byte) int {
	for k := 1; k <= min(utf8.UTFMax-1, len(b)); k++ {
		tail := b[len(b)-k:]
		if !utf8.RuneStart(tail[0]) {
			continue
		}
		if utf8.FullRune(tail) {
			return 0
		}
		return k
	}
	return 0
}
