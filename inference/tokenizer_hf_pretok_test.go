package inference

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tokLlama3Split is Llama 3's pre-tokenizer as its tokenizer.json writes it.
const tokLlama3Split = `{"type": "Sequence", "pretokenizers": [
	{"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
	{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]}`

// tokWithPipeline loads testdata/tokenizer_hf.json with another
// pre-tokenizer and normalizer (JSON; "" keeps the file's).
func tokWithPipeline(t testing.TB, preTokenizer, normalizer string) *Tokenizer {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "tokenizer_hf.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if preTokenizer != "" {
		doc["pre_tokenizer"] = json.RawMessage(preTokenizer)
	}
	if normalizer != "" {
		doc["normalizer"] = json.RawMessage(normalizer)
	}
	if data, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	tok, err := parseHFTokenizer(data)
	if err != nil {
		t.Fatalf("parse tokenizer with pre_tokenizer %s: %v", preTokenizer, err)
	}
	return tok
}

func TestTokenizerHFPreSplit(t *testing.T) {
	tests := []struct {
		name, preTokenizer, text string
		want                     []string
	}{
		{"llama3 contractions and numbers", tokLlama3Split, "I'M here, it's 12345 gold!!\n\n  ok",
			[]string{"I", "'M", " here", ",", " it", "'s", " ", "123", "45", " gold", "!!\n\n", " ", " ok"}},
		{"llama3 whitespace before a word", tokLlama3Split, "a   b\t\tc \n d",
			[]string{"a", "  ", " b", "\t", "\tc", " \n", " d"}},
		{"digits one by one", `{"type": "Digits", "individual_digits": true}`, "ab12 ٣4",
			[]string{"ab", "1", "2", " ", "٣", "4"}},
		{"digit runs", `{"type": "Digits", "individual_digits": false}`, "ab12 ٣4",
			[]string{"ab", "12", " ", "٣4"}},
		{"string pattern", `{"type": "Split", "pattern": {"String": "."}, "behavior": "Isolated", "invert": false}`, "a.b..c",
			[]string{"a", ".", "b", ".", ".", "c"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var pre hfPreTokenizer
			if err := json.Unmarshal([]byte(tc.preTokenizer), &pre); err != nil {
				t.Fatal(err)
			}
			split, err := pre.splitter()
			if err != nil {
				t.Fatalf("splitter: %v", err)
			}
			if got := split(nil, tc.text); !slices.Equal(got, tc.want) {
				t.Errorf("split(%q) = %q; want %q", tc.text, got, tc.want)
			}
		})
	}
}

func TestTokenizerHFNormalizesNFC(t *testing.T) {
	tok := tokWithPipeline(t, "", `{"type": "NFC"}`)
	if got, want := tok.Encode("cafe\u0301 <|end|>e\u0301"), tok.Encode("caf\u00e9 <|end|>\u00e9"); !slices.Equal(got, want) {
		t.Errorf("Encode(decomposed) = %v; want the composed form's %v", got, want)
	}
}

// FuzzTokenizerHFSplit checks that Llama 3's regex pre-tokenizer, run by
// regexp2, loses no byte of any input, valid UTF-8 or not.
func FuzzTokenizerHFSplit(f *testing.F) {
	for _, tc := range tokRoundTripCases {
		f.Add(tc.text)
	}
	f.Add("I'M here, it's 12345 gold!!\n\n  ok\xff\xfe   \r\n")
	tok := tokWithPipeline(f, tokLlama3Split, "")
	f.Fuzz(func(t *testing.T, text string) {
		words := tok.split(nil, text)
		if got := strings.Join(words, ""); got != text {
			t.Fatalf("pre-split words of %q join to %q", text, got)
		}
		if slices.Contains(words, "") {
			t.Fatalf("pre-split of %q has an empty word", text)
		}
		if got := tok.Decode(tok.Encode(text)); got != text {
			t.Fatalf("Decode(Encode(%q)) = %q", text, got)
		}
	})
}
