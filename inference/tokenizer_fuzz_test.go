package inference

import (
	"strings"
	"testing"
)

// FuzzTokenizerRoundTrip checks that any input, valid UTF-8 or not, survives
// Encode and Decode byte for byte: the tokenizer is byte-level, so invalid
// UTF-8 is not replaced but kept. Run it with
//
//	go test ./inference -run '^$' -fuzz FuzzTokenizerRoundTrip -fuzztime 60s -fuzzminimizetime 2s
//
// (without -fuzzminimizetime the fuzzer spends up to a minute shrinking each
// new interesting input and looks stalled).
func FuzzTokenizerRoundTrip(f *testing.F) {
	for _, tc := range tokRoundTripCases {
		f.Add(tc.text)
	}
	for _, line := range tokTestCorpus(f) {
		f.Add(line)
	}
	tok := tokTestTokenizer(f)
	f.Fuzz(func(t *testing.T, text string) {
		if got := strings.Join(tokPreSplit(nil, text), ""); got != text {
			t.Fatalf("pre-split words of %q join to %q", text, got)
		}
		for _, w := range tokPreSplit(nil, text) {
			if w == "" {
				t.Fatalf("pre-split of %q has an empty word", text)
			}
		}
		ids := tok.Encode(text)
		for _, id := range ids {
			if id < 0 || id >= tok.VocabSize() {
				t.Fatalf("Encode(%q) has id %d outside [0, %d)", text, id, tok.VocabSize())
			}
		}
		if got := tok.Decode(ids); got != text {
			t.Fatalf("Decode(Encode(%q)) = %q", text, got)
		}
		if got := tok.Decode(tok.EncodeOrdinary(text)); got != text {
			t.Fatalf("Decode(EncodeOrdinary(%q)) = %q", text, got)
		}
		// The cache must not change results: a second encode is equal.
		if again := tok.Encode(text); len(again) != len(ids) {
			t.Fatalf("Encode(%q) gave %d then %d tokens", text, len(ids), len(again))
		}
	})
}
