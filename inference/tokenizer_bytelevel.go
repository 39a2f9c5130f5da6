package inference

import (
	"unicode"
	"unicode/utf8"
)

// GPT-2's byte-to-unicode table maps every byte to a printable rune, so that
// byte-level tokens can be written as JSON strings in tokenizer.json. Bytes in
// '!'..'~', '¡'..'¬' and '®'..'ÿ' stand for themselves; the other 68 bytes
// (controls, space, DEL, NBSP, soft hyphen) take runes 256, 257, ... in
// increasing byte order. The mapping is computed, not stored, so the package
// keeps no tables.

// tokByteIsPrintable reports whether b stands for itself in GPT-2's table.
func tokByteIsPrintable(b byte) bool {
	return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE
}

// tokByteToRune maps a byte to its printable rune.
func tokByteToRune(b byte) rune {
	switch {
	case tokByteIsPrintable(b):
		return rune(b)
	case b <= ' ': // 0x00..0x20: 33 bytes
		return 256 + rune(b)
	case b <= 0xA0: // 0x7F..0xA0: 34 bytes
		return 256 + 33 + rune(b-0x7F)
	default: // 0xAD
		return 256 + 67
	}
}

// tokRuneToByte inverts tokByteToRune; ok is false for a rune outside the table.
func tokRuneToByte(r rune) (b byte, ok bool) {
	switch {
	case r < 256:
		if tokByteIsPrintable(byte(r)) {
			return byte(r), true
		}
		return 0, false
	case r < 256+33:
		return byte(r - 256), true
	case r < 256+67:
		return byte(r-256-33) + 0x7F, true
	case r == 256+67:
		return 0xAD, true
	default:
		return 0, false
	}
}

// tokBytesToString writes raw bytes in GPT-2's printable alphabet, as tokens
// appear in tokenizer.json's vocab and merges.
func tokBytesToString(raw []byte) string {
	out := make([]rune, len(raw))
	for i, b := range raw {
		out[i] = tokByteToRune(b)
	}
	return string(out)
}

// tokStringToBytes inverts tokBytesToString; ok is false if s holds a rune
// outside GPT-2's printable alphabet.
func tokStringToBytes(s string) (raw []byte, ok bool) {
	raw = make([]byte, 0, len(s))
	for _, r := range s {
		b, ok := tokRuneToByte(r)
		if !ok {
			return nil, false
		}
		raw = append(raw, b)
	}
	return raw, true
}

// Character classes of GPT-2's pre-tokenizer pattern.
const (
	tokClassSpace = iota
	tokClassLetter
	tokClassNumber
	tokClassOther // neither space, letter nor number; includes bytes of invalid UTF-8
)

// tokRuneAt decodes the rune at s[i:] and returns it with its class and width.
// A byte that starts no valid UTF-8 sequence counts as one "other" rune.
func tokRuneAt(s string, i int) (class, width int) {
	r, w := utf8.DecodeRuneInString(s[i:])
	switch {
	case r == utf8.RuneError && w <= 1:
		return tokClassOther, 1
	case unicode.IsSpace(r):
		return tokClassSpace, w
	case unicode.IsLetter(r):
		return tokClassLetter, w
	case unicode.IsNumber(r):
		return tokClassNumber, w
	default:
		return tokClassOther, w
	}
}

// tokContraction returns the length of the suffix GPT-2's pattern splits off
// after an apostrophe at the start of s (tried in the pattern's order), or 0.
func tokContraction(s string) int {
	for _, c := range [...]string{"s", "t", "re", "ve", "m", "ll", "d"} {
		if len(s) >= len(c) && s[:len(c)] == c {
			return len(c)
		}
	}
	return 0
}

// tokPreSplit appends to dst the words of s as GPT-2's pre-tokenizer splits
// them, i.e. the matches of
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// written by hand because Go's regexp has no lookahead. The words are
// substrings of s that cover it exactly, so no byte is lost.
func tokPreSplit(dst []string, s string) []string {
	for i := 0; i < len(s); {
		j := tokWordEnd(s, i)
		dst = append(dst, s[i:j])
		i = j
	}
	return dst
}

// tokWordEnd returns the end of the pre-tokenizer match that starts at s[i].
func tokWordEnd(s string, i int) int {
	if s[i] == '\'' {
		if n := tokContraction(s[i+1:]); n > 0 {
			return i + 1 + n
		}
	}
	start := i
	if s[i] == ' ' && i+1 < len(s) {
		if class, _ := tokRuneAt(s, i+1); class != tokClassSpace {
			start = i + 1 // " ?" takes the space in front of a non-space run
		}
	}
	class, w := tokRuneAt(s, start)
	if class != tokClassSpace {
		j := start + w
		for j < len(s) {
			c, w := tokRuneAt(s, j)
			if c != class {
				break
			}
			j += w
		}
		return j
	}
	// A run of whitespace: \s+(?!\S) leaves the last space of a run that a
	// non-space follows to the next word; a lone space falls to \s+.
	j, last := i, i
	for j < len(s) {
		c, w := tokRuneAt(s, j)
		if c != tokClassSpace {
			break
		}
		last = j
		j += w
	}
	if j < len(s) && last > i {
		return last
	}
	return j
}
