package inference

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeStream(t *testing.T) {
	tok := tokTestTokenizer(t)
	texts := []string{strings.Join(tokTestCorpus(t), "")}
	for _, tc := range tokRoundTripCases {
		texts = append(texts, tc.text)
	}
	for _, text := range texts {
		ids := tok.Encode(text)
		d := tok.NewDecodeStream()
		var b strings.Builder
		for _, id := range ids {
			piece := d.Next(id)
			if utf8.ValidString(text) && !utf8.ValidString(piece) {
				t.Errorf("Next gave %q, not valid UTF-8, while decoding %.40q", piece, text)
			}
			b.WriteString(piece)
		}
		b.WriteString(d.Flush())
		if got := b.String(); got != text {
			t.Errorf("DecodeStream of Encode(%.40q) = %.40q", text, got)
		}
	}
}

func TestDecodeStreamHoldsOpenRune(t *testing.T) {
	// A bytes-only tokenizer splits "é🎉" into its 6 bytes, one token each.
	tok, err := TrainTokenizer(nil, len(tokSpecials())+256)
	if err != nil {
		t.Fatal(err)
	}
	d := tok.NewDecodeStream()
	var got []string
	for _, id := range tok.Encode("é🎉!") {
		got = append(got, d.Next(id))
	}
	want := []string{"", "é", "", "", "", "🎉", "!"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Next pieces = %q; want %q", got, want)
	}
	if rest := d.Flush(); rest != "" {
		t.Errorf("Flush = %q; want empty", rest)
	}

	// An open rune at the end comes out of Flush.
	d = tok.NewDecodeStream()
	ids := tok.Encode("🎉")
	for _, id := range ids[:2] {
		if piece := d.Next(id); piece != "" {
			t.Errorf("Next on half an emoji = %q; want empty", piece)
		}
	}
	if rest, want := d.Flush(), "🎉"[:2]; rest != want {
		t.Errorf("Flush = %q; want %q", rest, want)
	}
}
