package inference

import (
	"bytes"
	"testing"
)

// FuzzParseHFTokenizer parses tokenizer.json bytes as LoadTokenizer does (a
// studio may bring its own): any input is refused or gives a tokenizer
// whose encodings stay inside its vocab and decode without panicking.
func FuzzParseHFTokenizer(f *testing.F) {
	tok, err := TrainTokenizer([]string{"Hello traveller, the road north is long.", "Do you like fishing by the river?"}, 280)
	if err != nil {
		f.Fatal(err)
	}
	good, err := tok.marshalHF()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(bytes.Replace(good, []byte(`"BPE"`), []byte(`"WordPiece"`), 1))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]},"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"}}`))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":5},"merges":[["a","zz"]]},"added_tokens":[{"id":-1,"content":"x"}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := parseHFTokenizer(data)
		if err != nil {
			return
		}
		for _, text := range []string{"Hello traveller!", "caf\xc3\xa9 \x00\xff", "<|user|> hi"} {
			ids := tk.Encode(text)
			for _, id := range ids {
				if id < 0 || id >= tk.VocabSize() {
					t.Fatalf("Encode(%q) has id %d outside [0, %d)", text, id, tk.VocabSize())
				}
			}
			_ = tk.Decode(ids)
		}
	})
}

// FuzzReadSafetensors reads model.safetensors bytes as LoadCheckpoint does
// (hfWeights): any input is refused or gives exactly the tensors asked for,
// each with as many values as its shape holds.
func FuzzReadSafetensors(f *testing.F) {
	want := map[string][]int{"a": {2, 3}, "b": {4}}
	var good bytes.Buffer
	vals := map[string][]float32{"a": {1, 2, 3, 4, 5, 6}, "b": {7, 8, 9, 10}}
	if err := writeSafetensors(&good, []string{"a", "b"}, vals, want); err != nil {
		f.Fatal(err)
	}
	f.Add(good.Bytes())
	f.Add(good.Bytes()[:good.Len()-3])
	f.Add(bytes.Replace(good.Bytes(), []byte(`"F32"`), []byte(`"F16"`), 1))
	f.Add([]byte("\xff\xff\xff\xff\xff\xff\xff\xff{}"))
	f.Add([]byte("\x02\x00\x00\x00\x00\x00\x00\x00{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		w := newHFWeights(nil)
		if err := w.addShard(WeightsFile, data); err != nil {
			return
		}
		if err := w.check(want, func(string) bool { return false }); err != nil {
			return
		}
		for name, dims := range want {
			n := 1
			for _, d := range dims {
				n *= d
			}
			if err := w.read(name, make([]float32, n)); err != nil {
				t.Fatalf("tensor %s passed the checks but reads as: %v", name, err)
			}
		}
	})
}
