package inference

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// tokTestCorpus reads the small mixed-language corpus in testdata.
func tokTestCorpus(t testing.TB) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "tokenizer_corpus.txt"))
	if err != nil {
		t.Fatalf("read corpus: %v", err)
	}
	return strings.SplitAfter(string(data), "\n")
}

// tokTestTokenizer trains a tokenizer on the testdata corpus.
func tokTestTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := TrainTokenizer(tokTestCorpus(t), 500)
	if err != nil {
		t.Fatalf("TrainTokenizer: %v", err)
	}
	return tok
}

// tokRoundTripCases are texts every tokenizer must round-trip exactly.
var tokRoundTripCases = []struct {
	name, text string
}{
	{"empty", ""},
	{"english", "Good morning! Is the forge open today?"},
	{"contractions", "I'll be back. We'll see who's right. DON'T 'S 's"},
	{"numbers", "Deliver 12 letters, 3.14159 and 1,000,000 coins."},
	{"chinese", "旅行者你好！欢迎来到东望镇。"},
	{"unseen chinese", "龘靐齉爩"},
	{"emoji", "🎉🔥⚔️🛡️ 👨‍👩‍👧‍👦 🇬🇧"},
	{"leading spaces", "   three spaces first"},
	{"trailing spaces", "trailing   "},
	{"only spaces", "     "},
	{"newlines", "line one\nline two\n\n\nline five\r\n"},
	{"tabs", "\tindent\t\ttabs\t"},
	{"unicode spaces", "nbsp\u00a0here\u2003em\u3000ideographic"},
	{"special tokens", TokSys + "be kind" + TokEnd + TokUser + "hi" + TokEnd + TokNPC},
	{"control tokens", "ok" + TokContinue + TokTerminate + TokPad},
	{"special lookalikes", "<|end| <|end|> [Continue [Terminate]] <||>"},
	{"mixed scripts", "Привет, café 你好 مرحبا Καλημέρα"},
	{"control chars", "\x00\x01\x7f\u0085\u00ad"},
	{"invalid utf8", "bad \xff\xfe bytes \xe4\xbd and a cut rune \xf0\x9f"},
}

func TestTokenizerRoundTrip(t *testing.T) {
	tok := tokTestTokenizer(t)
	for _, tc := range tokRoundTripCases {
		t.Run(tc.name, func(t *testing.T) {
			ids := tok.Encode(tc.text)
			for _, id := range ids {
				if id < 0 || id >= tok.VocabSize() {
					t.Fatalf("Encode(%q) has id %d outside [0, %d)", tc.text, id, tok.VocabSize())
				}
			}
			if got := tok.Decode(ids); got != tc.text {
				t.Errorf("Decode(Encode(%q)) = %q", tc.text, got)
			}
			if got := tok.Decode(tok.EncodeOrdinary(tc.text)); got != tc.text {
				t.Errorf("Decode(EncodeOrdinary(%q)) = %q", tc.text, got)
			}
		})
	}
}

func TestTokenizerSpecialTokenIDs(t *testing.T) {
	tok := tokTestTokenizer(t)
	for want, s := range tokSpecials() {
		got, ok := tok.TokenID(s)
		if !ok || got != want {
			t.Errorf("TokenID(%q) = %d, %v; want %d, true", s, got, ok, want)
		}
		if enc := tok.Encode(s); !slices.Equal(enc, []int{want}) {
			t.Errorf("Encode(%q) = %v; want [%d]", s, enc, want)
		}
		if enc := tok.EncodeOrdinary(s); slices.Contains(enc, want) || len(enc) < 2 {
			t.Errorf("EncodeOrdinary(%q) = %v; want plain tokens without %d", s, enc, want)
		}
	}
	// The corpus is full of special tokens; training cut them out, so no
	// learnt token holds a piece of one.
	for id := len(tokSpecials()); id < tok.VocabSize(); id++ {
		if s := tok.Decode([]int{id}); strings.Contains(s, "<|") || strings.Contains(s, "|>") {
			t.Errorf("learnt token %d = %q spans a special token", id, s)
		}
	}
	if id, ok := tok.TokenID("<|nope|>"); ok {
		t.Errorf("TokenID(<|nope|>) = %d, true; want false", id)
	}

	end, _ := tok.TokenID(TokEnd)
	user, _ := tok.TokenID(TokUser)
	ids := tok.Encode("hello" + TokEnd + TokUser + "there")
	i := slices.Index(ids, end)
	if i < 1 || i+2 >= len(ids) || ids[i+1] != user {
		t.Errorf("Encode(hello<|end|><|user|>there) = %v; want text, %d, %d, text", ids, end, user)
	}
}

func TestTokPreSplit(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"  hi", []string{" ", " hi"}},
		{"don't", []string{"don", "'t"}},
		{"they're 'S", []string{"they", "'re", " '", "S"}},
		{"a\n\nb", []string{"a", "\n", "\n", "b"}},
		{"a\n\n b", []string{"a", "\n\n", " b"}},
		{"x  ", []string{"x", "  "}},
		{"123abc 45", []string{"123", "abc", " 45"}},
		{"hello!!! world", []string{"hello", "!!!", " world"}},
		{"你好世界，朋友", []string{"你好世界", "，", "朋友"}},
		{"a\tb", []string{"a", "\t", "b"}},
		{"🎉🔥 ok", []string{"🎉🔥", " ok"}},
		{"\xffab", []string{"\xff", "ab"}},
		{" ", []string{" "}},
	}
	for _, tc := range tests {
		if got := tokPreSplit(nil, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("tokPreSplit(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestTokByteAlphabet(t *testing.T) {
	seen := make(map[rune]bool)
	for b := range 256 {
		r := tokByteToRune(byte(b))
		if seen[r] {
			t.Fatalf("tokByteToRune(%#02x) = %q, already taken", b, r)
		}
		seen[r] = true
		back, ok := tokRuneToByte(r)
		if !ok || back != byte(b) {
			t.Errorf("tokRuneToByte(tokByteToRune(%#02x)) = %#02x, %v", b, back, ok)
		}
	}
	// GPT-2's table maps space to Ġ, newline to Ċ and soft hyphen to Ń.
	for b, want := range map[byte]rune{' ': 'Ġ', '\n': 'Ċ', 0xAD: 'Ń', 'a': 'a'} {
		if got := tokByteToRune(b); got != want {
			t.Errorf("tokByteToRune(%#02x) = %q; want %q", b, got, want)
		}
	}
}

func TestTrainTokenizerCompresses(t *testing.T) {
	corpus := tokTestCorpus(t)
	text := strings.Join(corpus, "")
	bytesOnly, err := TrainTokenizer(corpus, len(tokSpecials())+256)
	if err != nil {
		t.Fatalf("TrainTokenizer(bytes only): %v", err)
	}
	// Without merges, every byte of the text (specials aside) is a token.
	plain := strings.NewReplacer(TokSys, "", TokUser, "", TokNPC, "", TokEnd, "", TokContinue, "", TokTerminate, "").Replace(text)
	nSpecial := len(bytesOnly.Encode(text)) - len(plain)
	if got := len(bytesOnly.Encode(plain)); got != len(plain) {
		t.Fatalf("bytes-only tokenizer gave %d tokens for %d bytes", got, len(plain))
	}

	tok := tokTestTokenizer(t)
	got := len(tok.Encode(text)) - nSpecial
	if got*10 > len(plain)*6 {
		t.Errorf("trained tokenizer: %d tokens for %d bytes; want under 60%%", got, len(plain))
	}
	t.Logf("corpus: %d bytes -> %d tokens (%.2f bytes/token), vocab %d", len(plain), got, float64(len(plain))/float64(got), tok.VocabSize())
}

func TestTrainTokenizerDeterministic(t *testing.T) {
	a, b := tokTestTokenizer(t), tokTestTokenizer(t)
	ja, err := a.marshalHF()
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	jb, err := b.marshalHF()
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	if string(ja) != string(jb) {
		t.Errorf("two trainings on the same corpus gave different tokenizer.json")
	}
}

func TestTrainTokenizerVocabSize(t *testing.T) {
	corpus := tokTestCorpus(t)
	for _, size := range []int{263, 300, 500} {
		tok, err := TrainTokenizer(corpus, size)
		if err != nil {
			t.Fatalf("TrainTokenizer(%d): %v", size, err)
		}
		if tok.VocabSize() != size {
			t.Errorf("TrainTokenizer(%d).VocabSize() = %d", size, tok.VocabSize())
		}
	}
	// A tiny corpus runs out of pairs that occur twice.
	tok, err := TrainTokenizer([]string{"abab"}, 1000)
	if err != nil {
		t.Fatalf("TrainTokenizer(abab): %v", err)
	}
	if got, want := tok.VocabSize(), 263+1; got != want {
		t.Errorf("TrainTokenizer(abab, 1000).VocabSize() = %d; want %d (only ab occurs twice)", got, want)
	}
	if ids := tok.Encode("abab"); len(ids) != 2 {
		t.Errorf("Encode(abab) = %v; want two ab tokens", ids)
	}
	if _, err := TrainTokenizer(corpus, 262); err == nil {
		t.Errorf("TrainTokenizer(262) succeeded; want an error below specials + 256 bytes")
	}
}

// TestTrainTokenizerMergeOrder checks the learnt merges on a corpus small
// enough to follow by hand: "low" x5, "lower" x2, "newest" x6, "widest" x3.
func TestTrainTokenizerMergeOrder(t *testing.T) {
	var texts []string
	for w, n := range map[string]int{"low ": 5, "lower ": 2, "newest ": 6, "widest ": 3} {
		texts = append(texts, strings.Repeat(w, n))
	}
	tok, err := TrainTokenizer(texts, 263+4)
	if err != nil {
		t.Fatalf("TrainTokenizer: %v", err)
	}
	// "es" and "st" occur 9 times (newest, widest): the tie goes to the lower
	// ids, e+s. Then "es t" (9); then "l o" and "o w" (7 each, low and lower)
	// tie and l+o wins; then "lo w" (7).
	got := tok.tokens[263:]
	want := []string{"es", "est", "lo", "low"}
	if !slices.Equal(got, want) {
		t.Errorf("learnt tokens = %q; want %q", got, want)
	}
}

func BenchmarkEncode(b *testing.B) {
	tok := tokTestTokenizer(b)
	text := strings.Join(tokTestCorpus(b), "")
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		tok.Encode(text)
	}
}

// TestTokenizerConcurrentEncode encodes from several goroutines at once (run
// with -race) and checks that the shared word cache gives the same ids as a
// fresh tokenizer.
func TestTokenizerConcurrentEncode(t *testing.T) {
	tok := tokTestTokenizer(t)
	fresh := tokTestTokenizer(t)
	lines := tokTestCorpus(t)
	want := make([][]int, len(lines))
	for i, l := range lines {
		want[i] = fresh.Encode(l)
	}
	errs := make(chan string, 4*len(lines))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 3 {
				for i := range lines {
					j := (i + g*7 + round) % len(lines)
					if got := tok.Encode(lines[j]); !slices.Equal(got, want[j]) {
						errs <- fmt.Sprintf("Encode(%.40q) = %v; want %v", lines[j], got, want[j])
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
