package inference

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Hugging Face tokenizer.json, as the tokenizers library writes it for a
// byte-level BPE model: GPT-2's, and those of Llama 3, Qwen 2 and SmolLM2
// (their pre-tokenizers are in tokenizer_hf_pretok.go). Only the parts this
// package implements are read; a file that needs anything else (another
// normalizer, a prefix space, another model type) is refused with
// ErrTokenizerFormat rather than encoded differently from Hugging Face.

type hfTokenizerFile struct {
	Version       string          `json:"version"`
	Truncation    json.RawMessage `json:"truncation"`
	Padding       json.RawMessage `json:"padding"`
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"` // an hfPreTokenizer
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"` // an hfByteLevel
	Model         hfBPEModel      `json:"model"`
}

type hfAddedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// hfPipeline is the part of tokenizer.json around the BPE model as it was
// read, so that Save writes a loaded tokenizer back as it came. It is zero
// for a tokenizer TrainTokenizer made, which has GPT-2's pipeline.
type hfPipeline struct {
	normalizer, preTokenizer, postProcessor, decoder json.RawMessage
}

// hfByteLevel is the ByteLevel decoder. UseRegex is a pointer because
// Hugging Face defaults it to true when absent.
type hfByteLevel struct {
	Type           string `json:"type"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	TrimOffsets    bool   `json:"trim_offsets"`
	UseRegex       *bool  `json:"use_regex,omitempty"`
}

type hfBPEModel struct {
	Type                    string    `json:"type"`
	Dropout                 *float64  `json:"dropout"`
	UnkToken                *string   `json:"unk_token"`
	ContinuingSubwordPrefix *string   `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string   `json:"end_of_word_suffix"`
	FuseUnk                 bool      `json:"fuse_unk"`
	ByteFallback            bool      `json:"byte_fallback"`
	IgnoreMerges            bool      `json:"ignore_merges"`
	Vocab                   hfVocab   `json:"vocab"`
	Merges                  []hfMerge `json:"merges"`
}

// hfVocab is the vocab in id order. It is written as a JSON object in id
// order (encoding/json would sort a map's keys) and read from any order.
type hfVocab []string

func (v hfVocab) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for id, tok := range v {
		if id > 0 {
			b.WriteByte(',')
		}
		if err := tokWriteJSON(&b, tok); err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, ":%d", id)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func (v *hfVocab) UnmarshalJSON(data []byte) error {
	var m map[string]int
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	out := make(hfVocab, len(m))
	for tok, id := range m {
		if id < 0 || id >= len(m) || out[id] != "" {
			return fmt.Errorf("vocab ids are not 0..%d each once (token %q has %d): %w", len(m)-1, tok, id, ErrTokenizerFormat)
		}
		out[id] = tok
	}
	*v = out
	return nil
}

// hfMerge is one merge. Hugging Face writes "left right" up to tokenizers
// 0.19 and ["left", "right"] since 0.20; both are read, the first is written
// so that older versions load the file too (byte-level tokens hold no space).
type hfMerge [2]string

func (m hfMerge) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	if err := tokWriteJSON(&b, m[0]+" "+m[1]); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func (m *hfMerge) UnmarshalJSON(data []byte) error {
	var pair []string
	if err := json.Unmarshal(data, &pair); err == nil {
		if len(pair) != 2 {
			return fmt.Errorf("merge %s has %d parts: %w", data, len(pair), ErrTokenizerFormat)
		}
		*m = hfMerge{pair[0], pair[1]}
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("merge %s: %w", data, ErrTokenizerFormat)
	}
	left, right, ok := strings.Cut(s, " ")
	if !ok || strings.Contains(right, " ") {
		return fmt.Errorf("merge %q is not two space-separated tokens: %w", s, ErrTokenizerFormat)
	}
	*m = hfMerge{left, right}
	return nil
}

// tokWriteJSON writes s as a JSON string without HTML escaping, so tokens
// such as "<|end|>" stay readable in the file.
func tokWriteJSON(b *bytes.Buffer, s string) error {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return err
	}
	b.Truncate(b.Len() - 1) // Encode's newline
	return nil
}

// Save writes the tokenizer as a Hugging Face tokenizer.json that the
// tokenizers library loads with Tokenizer.from_file. The file is written to a
// temporary name and renamed, so a reader never sees half a file.
func (t *Tokenizer) Save(path string) error {
	data, err := t.marshalHF()
	if err != nil {
		return fmt.Errorf("save tokenizer %q: %w", path, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tokenizer-*.json")
	if err != nil {
		return fmt.Errorf("save tokenizer %q: %w", path, err)
	}
	_, werr := f.Write(data)
	merr := f.Chmod(0o644) // CreateTemp makes 0600; a checkpoint file is for others to read
	cerr := f.Close()
	if err := errors.Join(werr, merr, cerr); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("save tokenizer %q: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("save tokenizer %q: %w", path, err)
	}
	return nil
}

// marshalHF renders the tokenizer.json document.
func (t *Tokenizer) marshalHF() ([]byte, error) {
	added := make([]hfAddedToken, 0, len(t.added))
	for _, a := range t.added {
		added = append(added, hfAddedToken{ID: a.id, Content: a.content, Special: a.special})
	}
	sort.Slice(added, func(i, j int) bool { return added[i].ID < added[j].ID })
	n := 0
	for _, m := range t.merges {
		n = max(n, m.rank+1)
	}
	merges := make([]hfMerge, n)
	for key, m := range t.merges {
		left, right := t.tokens[int(key>>32)], t.tokens[int(uint32(key))]
		if strings.Contains(left, " ") || strings.Contains(right, " ") {
			return nil, fmt.Errorf("merge %q %q: a token with a space cannot be written as a merge string: %w", left, right, ErrTokenizerFormat)
		}
		merges[m.rank] = hfMerge{left, right}
	}
	merges = compactMerges(merges)
	pipe, err := t.hf.orGPT2()
	if err != nil {
		return nil, err
	}
	doc := hfTokenizerFile{
		Version:       "1.0",
		Truncation:    json.RawMessage("null"),
		Padding:       json.RawMessage("null"),
		AddedTokens:   added,
		Normalizer:    pipe.normalizer,
		PreTokenizer:  pipe.preTokenizer,
		PostProcessor: pipe.postProcessor,
		Decoder:       pipe.decoder,
		Model: hfBPEModel{
			Type:         "BPE",
			IgnoreMerges: t.ignoreMerges,
			Vocab:        hfVocab(t.tokens),
			Merges:       merges,
		},
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// compactMerges drops the gaps that duplicate merges in a loaded file leave
// (only the first of a duplicated pair is kept when loading).
func compactMerges(merges []hfMerge) []hfMerge {
	out := merges[:0]
	for _, m := range merges {
		if m != (hfMerge{}) {
			out = append(out, m)
		}
	}
	return out
}

// LoadTokenizer reads a Hugging Face tokenizer.json holding a byte-level BPE
// model: model type "BPE" without unknown token, dropout, subword prefixes or
// byte fallback; a pre-tokenizer built from ByteLevel (without prefix space),
// Split (behavior Isolated), Digits and Sequence; no normalizer or NFC; a
// ByteLevel decoder. Other files are refused with ErrTokenizerFormat. The
// post-processor is not read: Encode never adds a BOS or EOS token, as Hugging
// Face's encode without special tokens, and as a chat template expects (it
// writes its own bos_token).
func LoadTokenizer(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %q: %w", path, err)
	}
	t, err := parseHFTokenizer(data)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %q: %w", path, err)
	}
	return t, nil
}

// parseHFTokenizer builds a Tokenizer from tokenizer.json's bytes.
func parseHFTokenizer(data []byte) (*Tokenizer, error) {
	var doc hfTokenizerFile
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parse json: %w: %w", ErrTokenizerFormat, err)
	}
	if err := doc.check(); err != nil {
		return nil, err
	}
	tokens := []string(doc.Model.Vocab)
	var added []tokAdded
	for _, a := range doc.AddedTokens {
		switch {
		case a.ID < 0:
			return nil, fmt.Errorf("added token %q has id %d: %w", a.Content, a.ID, ErrTokenizerFormat)
		case a.ID < len(tokens) && tokens[a.ID] != a.Content:
			return nil, fmt.Errorf("added token %q has id %d, which the vocab gives to %q: %w", a.Content, a.ID, tokens[a.ID], ErrTokenizerFormat)
		case a.ID == len(tokens):
			tokens = append(tokens, a.Content) // added after the model's vocab
		case a.ID > len(tokens):
			return nil, fmt.Errorf("added token %q has id %d, leaving a gap after %d: %w", a.Content, a.ID, len(tokens)-1, ErrTokenizerFormat)
		}
		if a.SingleWord || a.LStrip || a.RStrip {
			return nil, fmt.Errorf("added token %q: single_word, lstrip and rstrip are not supported: %w", a.Content, ErrTokenizerFormat)
		}
		if a.Normalized && !isJSONNull(doc.Normalizer) {
			return nil, fmt.Errorf("added token %q is matched in normalized text, which is not supported: %w", a.Content, ErrTokenizerFormat)
		}
		added = append(added, tokAdded{content: a.Content, id: a.ID, special: a.Special})
	}
	index := make(map[string]int, len(doc.Model.Vocab))
	for id, tok := range doc.Model.Vocab {
		index[tok] = id
	}
	merges := make([][2]int, 0, len(doc.Model.Merges))
	for _, m := range doc.Model.Merges {
		left, lok := index[m[0]]
		right, rok := index[m[1]]
		if !lok || !rok {
			return nil, fmt.Errorf("merge %q %q names a token outside the vocab: %w", m[0], m[1], ErrTokenizerFormat)
		}
		merges = append(merges, [2]int{left, right})
	}
	t, err := newTokenizer(tokens, added, merges, doc.Model.IgnoreMerges)
	if err != nil {
		return nil, err
	}
	var pre hfPreTokenizer
	if err := json.Unmarshal(doc.PreTokenizer, &pre); err != nil {
		return nil, fmt.Errorf("pre_tokenizer %s: %w: %w", doc.PreTokenizer, ErrTokenizerFormat, err)
	}
	if t.split, err = pre.splitter(); err != nil {
		return nil, err
	}
	if t.normalize, err = hfNormalizerFunc(doc.Normalizer); err != nil {
		return nil, err
	}
	t.hf = hfPipeline{normalizer: doc.Normalizer, preTokenizer: doc.PreTokenizer, postProcessor: doc.PostProcessor, decoder: doc.Decoder}
	return t, nil
}

// LoadHFTokenizer reads the tokenizer of a Hugging Face model directory, its
// tokenizer.json (see LoadTokenizer).
func LoadHFTokenizer(dir string) (*Tokenizer, error) {
	return LoadTokenizer(filepath.Join(dir, "tokenizer.json"))
}

// check refuses the features this package does not implement.
func (doc *hfTokenizerFile) check() error {
	m := doc.Model
	switch {
	case m.Type != "BPE":
		return fmt.Errorf("model type %q, want BPE: %w", m.Type, ErrTokenizerFormat)
	case m.Dropout != nil && *m.Dropout != 0:
		return fmt.Errorf("bpe dropout: %w", ErrTokenizerFormat)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "",
		m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return fmt.Errorf("subword prefix or suffix: %w", ErrTokenizerFormat)
	case m.ByteFallback:
		return fmt.Errorf("byte fallback: %w", ErrTokenizerFormat)
	case isJSONNull(doc.PreTokenizer):
		return fmt.Errorf("no pre_tokenizer: %w", ErrTokenizerFormat)
	}
	var dec hfByteLevel
	if err := json.Unmarshal(doc.Decoder, &dec); err != nil || dec.Type != "ByteLevel" {
		return fmt.Errorf("decoder is not ByteLevel: %w", ErrTokenizerFormat)
	}
	return nil
}

// orGPT2 fills the parts of p that are unset with GPT-2's: no normalizer or
// post-processor, ByteLevel pre-tokenizer and decoder.
func (p hfPipeline) orGPT2() (hfPipeline, error) {
	yes := true
	var err error
	if p.preTokenizer == nil {
		p.preTokenizer, err = json.Marshal(hfPreTokenizer{Type: "ByteLevel", AddPrefixSpace: false, TrimOffsets: true, UseRegex: &yes})
	}
	if p.decoder == nil && err == nil {
		p.decoder, err = json.Marshal(hfByteLevel{Type: "ByteLevel", AddPrefixSpace: true, TrimOffsets: true, UseRegex: &yes})
	}
	if p.normalizer == nil {
		p.normalizer = json.RawMessage("null")
	}
	if p.postProcessor == nil {
		p.postProcessor = json.RawMessage("null")
	}
	return p, err
}

func isJSONNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}
