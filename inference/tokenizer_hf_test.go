package inference

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestTokenizerSaveLoad(t *testing.T) {
	tok := tokTestTokenizer(t)
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := tok.Save(path); err != nil {
		t.Fatalf("Save: %v", err)
	}
	loaded, err := LoadTokenizer(path)
	if err != nil {
		t.Fatalf("LoadTokenizer: %v", err)
	}
	if got, want := loaded.VocabSize(), tok.VocabSize(); got != want {
		t.Errorf("loaded VocabSize() = %d; want %d", got, want)
	}
	for _, s := range tokSpecials() {
		want, _ := tok.TokenID(s)
		if got, ok := loaded.TokenID(s); !ok || got != want {
			t.Errorf("loaded TokenID(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
	texts := []string{strings.Join(tokTestCorpus(t), "")}
	for _, tc := range tokRoundTripCases {
		texts = append(texts, tc.text)
	}
	for _, text := range texts {
		if got, want := loaded.Encode(text), tok.Encode(text); !slices.Equal(got, want) {
			t.Errorf("loaded Encode(%.40q) = %v; want %v", text, got, want)
		}
	}

	// Saving what was loaded writes the same file.
	again := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := loaded.Save(again); err != nil {
		t.Fatalf("Save loaded: %v", err)
	}
	a, _ := os.ReadFile(path)
	b, _ := os.ReadFile(again)
	if string(a) != string(b) {
		t.Errorf("save -> load -> save changed tokenizer.json")
	}
}

// TestTokenizerSaveFormat checks the saved file against the structure the
// Hugging Face tokenizers library writes for GPT-2's byte-level BPE.
func TestTokenizerSaveFormat(t *testing.T) {
	tok := tokTestTokenizer(t)
	doc := tokSavedDoc(t, tok)

	model := doc["model"].(map[string]any)
	if model["type"] != "BPE" {
		t.Errorf("model.type = %v; want BPE", model["type"])
	}
	vocab := model["vocab"].(map[string]any)
	if len(vocab) != tok.VocabSize() {
		t.Errorf("len(model.vocab) = %d; want %d", len(vocab), tok.VocabSize())
	}
	for tokStr, want := range map[string]float64{TokPad: 0, TokTerminate: 6, "!": 7 + '!', "Ġ": 7 + ' ', "Ċ": 7 + '\n'} {
		if got := vocab[tokStr]; got != want {
			t.Errorf("model.vocab[%q] = %v; want %v", tokStr, got, want)
		}
	}
	merges := model["merges"].([]any)
	if got, want := len(merges), tok.VocabSize()-263; got != want {
		t.Errorf("len(model.merges) = %d; want %d", got, want)
	}
	for _, m := range merges {
		left, right, ok := strings.Cut(m.(string), " ")
		if !ok || vocab[left] == nil || vocab[right] == nil || vocab[left+right] == nil {
			t.Errorf("merge %q is not two vocab tokens joining into a third", m)
		}
	}

	added := doc["added_tokens"].([]any)
	if len(added) != len(tokSpecials()) {
		t.Fatalf("len(added_tokens) = %d; want %d", len(added), len(tokSpecials()))
	}
	for id, s := range tokSpecials() {
		a := added[id].(map[string]any)
		if a["id"] != float64(id) || a["content"] != s || a["special"] != true || a["normalized"] != false {
			t.Errorf("added_tokens[%d] = %v; want id %d, content %q, special, not normalized", id, a, id, s)
		}
	}
	for _, key := range []string{"pre_tokenizer", "decoder"} {
		c := doc[key].(map[string]any)
		if c["type"] != "ByteLevel" {
			t.Errorf("%s.type = %v; want ByteLevel", key, c["type"])
		}
	}
	if pre := doc["pre_tokenizer"].(map[string]any); pre["add_prefix_space"] != false || pre["use_regex"] != true {
		t.Errorf("pre_tokenizer = %v; want add_prefix_space false, use_regex true", pre)
	}
	if doc["normalizer"] != nil {
		t.Errorf("normalizer = %v; want null", doc["normalizer"])
	}
}

// tokSavedDoc saves tok and reads the file back as generic JSON.
func tokSavedDoc(t *testing.T, tok *Tokenizer) map[string]any {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := tok.Save(path); err != nil {
		t.Fatalf("Save: %v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read saved: %v", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("saved tokenizer.json is not JSON: %v", err)
	}
	return doc
}

// tokWriteDoc writes doc as a tokenizer.json and returns its path.
func tokWriteDoc(t *testing.T, doc map[string]any) string {
	t.Helper()
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatalf("write: %v", err)
	}
	return path
}

// TestLoadTokenizerVariants loads forms that the tokenizers library writes
// but Save does not: merges as pairs (tokenizers >= 0.20), added tokens
// outside the model's vocab, vocab keys in any order.
func TestLoadTokenizerVariants(t *testing.T) {
	tok := tokTestTokenizer(t)
	text := strings.Join(tokTestCorpus(t), "")
	want := tok.Encode(text)

	t.Run("merges as pairs", func(t *testing.T) {
		doc := tokSavedDoc(t, tok)
		model := doc["model"].(map[string]any)
		merges := model["merges"].([]any)
		for i, m := range merges {
			left, right, _ := strings.Cut(m.(string), " ")
			merges[i] = []string{left, right}
		}
		loaded, err := LoadTokenizer(tokWriteDoc(t, doc))
		if err != nil {
			t.Fatalf("LoadTokenizer: %v", err)
		}
		if got := loaded.Encode(text); !slices.Equal(got, want) {
			t.Errorf("Encode differs after loading pair-form merges")
		}
	})

	t.Run("duplicate merge", func(t *testing.T) {
		doc := tokSavedDoc(t, tok)
		model := doc["model"].(map[string]any)
		merges := model["merges"].([]any)
		// Repeat the first merge right after it, shifting every later rank.
		model["merges"] = slices.Insert(slices.Clone(merges), 1, merges[0])
		loaded, err := LoadTokenizer(tokWriteDoc(t, doc))
		if err != nil {
			t.Fatalf("LoadTokenizer: %v", err)
		}
		if got := loaded.Encode(text); !slices.Equal(got, want) {
			t.Errorf("Encode differs after loading a duplicated merge")
		}
		// The first rank counts; saving drops the duplicate.
		if err := loaded.Save(filepath.Join(t.TempDir(), "tokenizer.json")); err != nil {
			t.Errorf("Save after loading a duplicated merge: %v", err)
		}
		if got := len(tokSavedDoc(t, loaded)["model"].(map[string]any)["merges"].([]any)); got != len(merges) {
			t.Errorf("saved %d merges; want %d", got, len(merges))
		}
	})

	t.Run("added tokens outside vocab", func(t *testing.T) {
		doc := tokSavedDoc(t, tok)
		vocab := doc["model"].(map[string]any)["vocab"].(map[string]any)
		n := len(vocab)
		doc["added_tokens"] = append(doc["added_tokens"].([]any), map[string]any{
			"id": n, "content": "<|narrator|>", "special": true,
		})
		loaded, err := LoadTokenizer(tokWriteDoc(t, doc))
		if err != nil {
			t.Fatalf("LoadTokenizer: %v", err)
		}
		if id, ok := loaded.TokenID("<|narrator|>"); !ok || id != n {
			t.Errorf("TokenID(<|narrator|>) = %d, %v; want %d", id, ok, n)
		}
		if got := loaded.Encode("a<|narrator|>b"); len(got) != 3 || got[1] != n {
			t.Errorf("Encode(a<|narrator|>b) = %v; want [a %d b]", got, n)
		}
		if loaded.VocabSize() != n+1 {
			t.Errorf("VocabSize() = %d; want %d", loaded.VocabSize(), n+1)
		}
	})
}

// TestLoadTokenizerIgnoreMerges checks Hugging Face's ignore_merges: a word
// that is itself in the vocab is one token even if no merge path builds it.
func TestLoadTokenizerIgnoreMerges(t *testing.T) {
	tok := tokTestTokenizer(t)
	for _, ignore := range []bool{false, true} {
		doc := tokSavedDoc(t, tok)
		model := doc["model"].(map[string]any)
		vocab := model["vocab"].(map[string]any)
		id := len(vocab)
		vocab["Ġzqzq"] = id // " zqzq": no merges join these bytes
		model["ignore_merges"] = ignore
		loaded, err := LoadTokenizer(tokWriteDoc(t, doc))
		if err != nil {
			t.Fatalf("LoadTokenizer: %v", err)
		}
		got := loaded.Encode("a zqzq")
		if single := len(got) == 2 && got[1] == id; single != ignore {
			t.Errorf("ignore_merges %v: Encode(a zqzq) = %v; want %d as one token: %v", ignore, got, id, ignore)
		}
		if dec := loaded.Decode(got); dec != "a zqzq" {
			t.Errorf("ignore_merges %v: Decode = %q", ignore, dec)
		}
	}
}

func TestLoadTokenizerRefuses(t *testing.T) {
	tok := tokTestTokenizer(t)
	tests := []struct {
		name   string
		mutate func(doc map[string]any)
	}{
		{"unigram model", func(doc map[string]any) { doc["model"].(map[string]any)["type"] = "Unigram" }},
		{"NFKC normalizer", func(doc map[string]any) { doc["normalizer"] = map[string]any{"type": "NFKC"} }},
		{"split merged with previous", func(doc map[string]any) {
			doc["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\s+`}, "behavior": "MergedWithPrevious", "invert": false}
		}},
		{"split of a bad regex", func(doc map[string]any) {
			doc["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `(?<`}, "behavior": "Isolated", "invert": false}
		}},
		{"whitespace in a sequence", func(doc map[string]any) {
			doc["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{map[string]any{"type": "Whitespace"}}}
		}},
		{"prefix space", func(doc map[string]any) {
			doc["pre_tokenizer"].(map[string]any)["add_prefix_space"] = true
		}},
		{"whitespace pre-tokenizer", func(doc map[string]any) { doc["pre_tokenizer"] = map[string]any{"type": "Whitespace"} }},
		{"no decoder", func(doc map[string]any) { doc["decoder"] = nil }},
		{"byte fallback", func(doc map[string]any) { doc["model"].(map[string]any)["byte_fallback"] = true }},
		{"missing byte", func(doc map[string]any) {
			vocab := doc["model"].(map[string]any)["vocab"].(map[string]any)
			// Byte 0x01 is written ā; its id goes to a two-byte token so ids stay dense.
			vocab["āā"] = vocab["ā"]
			delete(vocab, "ā")
		}},
		{"token outside byte alphabet", func(doc map[string]any) {
			vocab := doc["model"].(map[string]any)["vocab"].(map[string]any)
			vocab["\u4e00"] = len(vocab)
		}},
		{"merge of unknown token", func(doc map[string]any) {
			model := doc["model"].(map[string]any)
			model["merges"] = append(model["merges"].([]any), "zz\u4e00 q")
		}},
		{"merge of three parts", func(doc map[string]any) {
			model := doc["model"].(map[string]any)
			model["merges"] = append(model["merges"].([]any), "a b c")
		}},
		{"added token clashing with vocab", func(doc map[string]any) {
			doc["added_tokens"].([]any)[0].(map[string]any)["id"] = 7 + 'a'
		}},
		{"vocab id gap", func(doc map[string]any) {
			doc["model"].(map[string]any)["vocab"].(map[string]any)["Ġ"] = 100000
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := tokSavedDoc(t, tok)
			tc.mutate(doc)
			_, err := LoadTokenizer(tokWriteDoc(t, doc))
			if !errors.Is(err, ErrTokenizerFormat) {
				t.Errorf("LoadTokenizer = %v; want ErrTokenizerFormat", err)
			}
		})
	}

	t.Run("not json", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "tokenizer.json")
		if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadTokenizer(path); !errors.Is(err, ErrTokenizerFormat) {
			t.Errorf("LoadTokenizer = %v; want ErrTokenizerFormat", err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		_, err := LoadTokenizer(filepath.Join(t.TempDir(), "nope.json"))
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("LoadTokenizer = %v; want fs.ErrNotExist", err)
		}
	})
}
