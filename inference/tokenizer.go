package inference

import (
	"container/heap"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Special tokens of Parley's chat template. They are added tokens: never
// split, matched in Encode's input text, and given fixed low ids by
// TrainTokenizer (pad is 0, then sys, user, npc, end, continue, terminate).
const (
	TokPad       = "<|pad|>"
	TokSys       = "<|sys|>"
	TokUser      = "<|user|>"
	TokNPC       = "<|npc|>"
	TokEnd       = "<|end|>"
	TokContinue  = "[Continue]"
	TokTerminate = "[Terminate]"
)

// ErrTokenizerFormat reports a tokenizer.json that is malformed or uses a
// Hugging Face feature this package does not implement.
var ErrTokenizerFormat = errors.New("inference: unsupported tokenizer format")

// tokSpecials lists the chat template's special tokens in id order.
func tokSpecials() []string {
	return []string{TokPad, TokSys, TokUser, TokNPC, TokEnd, TokContinue, TokTerminate}
}

// tokCacheLimit bounds the per-word encode cache; the cache is emptied when
// it is full. tokCacheMaxWord is the longest word that is cached.
const (
	tokCacheLimit   = 1 << 16
	tokCacheMaxWord = 64
)

// Tokenizer is a byte-level BPE tokenizer in the style of GPT-2: text is
// split into words by GPT-2's pre-tokenizer pattern, each word's UTF-8 bytes
// start as one token per byte, and learnt merges join adjacent tokens in rank
// order. Any byte string round-trips: Decode(Encode(s)) == s, also for
// invalid UTF-8. Added (special) tokens are matched in the text before
// splitting and are never split.
//
// Encoding matches Hugging Face's tokenizers library on the same
// tokenizer.json (checked against its Rust crate and tokenizers.js in
// tokenizer_hf_compat_test.go). A Tokenizer is safe for concurrent use.
type Tokenizer struct {
	tokens  []string       // id -> token as written in tokenizer.json (byte-level alphabet, or an added token's content)
	raw     [][]byte       // id -> the bytes Decode writes
	vocab   map[string]int // tokens inverted, for the BPE model's entries
	byteIDs [256]int       // byte -> id of its single-byte token
	merges  map[uint64]bpeMerge
	// ignoreMerges takes a word that is itself in the vocab as one token
	// before applying merges (Hugging Face's BPE ignore_merges).
	ignoreMerges bool
	// split is the pre-tokenizer (GPT-2's unless tokenizer.json says
	// otherwise); normalize, if set, is applied to text between added tokens
	// before it.
	split     tokSplitter
	normalize func(string) string
	hf        hfPipeline

	added      []tokAdded     // added tokens, longest content first, for matching
	addedID    map[string]int // content -> id
	addedFirst [256]bool      // first bytes of added tokens

	mu    sync.RWMutex
	cache map[string][]int
}

// bpeMerge is one learnt merge: the pair's rank (lower merges first) and the
// id of the joined token.
type bpeMerge struct {
	rank int
	id   int
}

// tokAdded is an added token: its content and id, and whether Hugging Face
// marks it special.
type tokAdded struct {
	content string
	id      int
	special bool
}

// bpePairKey packs an ordered pair of token ids into a map key.
func bpePairKey(left, right int) uint64 {
	return uint64(uint32(left))<<32 | uint64(uint32(right))
}

// VocabSize returns the number of token ids, added tokens included; every
// id Encode returns is below it.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenID returns the id of an added token such as TokTerminate, and false
// if the tokenizer has no such token.
func (t *Tokenizer) TokenID(special string) (int, bool) {
	id, ok := t.addedID[special]
	return id, ok
}

// TokenBytes returns the bytes that id decodes to, or nil for an id outside
// the vocabulary. A token may hold part of a UTF-8 sequence; streaming callers
// join bytes until they form whole runes. The slice is shared: do not modify it.
func (t *Tokenizer) TokenBytes(id int) []byte {
	if id < 0 || id >= len(t.raw) {
		return nil
	}
	return t.raw[id]
}

// Decode joins the bytes of ids. Added tokens decode to their content (so
// Decode(Encode(s)) == s); ids outside the vocabulary are skipped. The result
// is the exact byte string, which is not valid UTF-8 when ids end inside a
// multi-byte rune.
func (t *Tokenizer) Decode(ids []int) string {
	n := 0
	for _, id := range ids {
		if id >= 0 && id < len(t.raw) {
			n += len(t.raw[id])
		}
	}
	var b strings.Builder
	b.Grow(n)
	for _, id := range ids {
		if id >= 0 && id < len(t.raw) {
			b.Write(t.raw[id])
		}
	}
	return b.String()
}

// Encode returns the token ids of text. Occurrences of added tokens such as
// TokEnd map to their ids; use EncodeOrdinary for untrusted text that must
// not produce control tokens.
func (t *Tokenizer) Encode(text string) []int {
	ids := make([]int, 0, len(text)/3+1)
	for len(text) > 0 {
		at, tok := t.nextAdded(text)
		ids = t.appendOrdinary(ids, text[:at])
		if tok == nil {
			break
		}
		ids = append(ids, tok.id)
		text = text[at+len(tok.content):]
	}
	return ids
}

// EncodeOrdinary returns the token ids of text with added tokens treated as
// plain text: "<|end|>" in text becomes ordinary tokens, never TokEnd's id.
func (t *Tokenizer) EncodeOrdinary(text string) []int {
	return t.appendOrdinary(make([]int, 0, len(text)/3+1), text)
}

// nextAdded finds the first added token in text: its offset and the token,
// or len(text) and nil if there is none. At one offset the longest wins, as
// in Hugging Face's leftmost-longest matching. It runs in linear time, so text
// full of special tokens cannot make Encode quadratic.
func (t *Tokenizer) nextAdded(text string) (int, *tokAdded) {
	for i := 0; i < len(text); i++ {
		if !t.addedFirst[text[i]] {
			continue
		}
		for j := range t.added {
			if strings.HasPrefix(text[i:], t.added[j].content) {
				return i, &t.added[j]
			}
		}
	}
	return len(text), nil
}

// appendOrdinary appends the ids of text, which holds no added tokens.
func (t *Tokenizer) appendOrdinary(ids []int, text string) []int {
	if text == "" {
		return ids
	}
	if t.normalize != nil {
		text = t.normalize(text)
	}
	var buf [64]string
	for _, w := range t.split(buf[:0], text) {
		ids = t.appendWord(ids, w)
	}
	return ids
}

// appendWord appends the ids of one pre-tokenized word, through the cache.
func (t *Tokenizer) appendWord(ids []int, w string) []int {
	if len(w) == 1 {
		return append(ids, t.byteIDs[w[0]])
	}
	if len(w) > tokCacheMaxWord {
		return t.bpe(ids, w)
	}
	t.mu.RLock()
	cached, ok := t.cache[w]
	t.mu.RUnlock()
	if ok {
		return append(ids, cached...)
	}
	start := len(ids)
	ids = t.bpe(ids, w)
	word := append([]int(nil), ids[start:]...)
	t.mu.Lock()
	if len(t.cache) >= tokCacheLimit {
		clear(t.cache)
	}
	t.cache[w] = word
	t.mu.Unlock()
	return ids
}

// bpe appends the ids of word w: its bytes, joined by merges lowest rank
// first and, within a rank, leftmost first, as Hugging Face's BPE does. It
// runs in O(n log n) for a word of n bytes, so long words cannot stall it.
func (t *Tokenizer) bpe(ids []int, w string) []int {
	if t.ignoreMerges {
		if id, ok := t.vocab[tokBytesToString([]byte(w))]; ok {
			return append(ids, id)
		}
	}
	n := len(w)
	sym := make([]bpeSymbol, n)
	for i := range n {
		sym[i] = bpeSymbol{id: t.byteIDs[w[i]], prev: i - 1, next: i + 1}
	}
	sym[n-1].next = -1
	q := make(bpeQueue, 0, n)
	for i := 0; i+1 < n; i++ {
		if m, ok := t.merges[bpePairKey(sym[i].id, sym[i+1].id)]; ok {
			q = append(q, bpeCandidate{rank: m.rank, pos: i, id: m.id})
		}
	}
	heap.Init(&q)
	for q.Len() > 0 {
		c := heap.Pop(&q).(bpeCandidate)
		s := &sym[c.pos]
		if s.dead || s.next < 0 {
			continue
		}
		right := &sym[s.next]
		m, ok := t.merges[bpePairKey(s.id, right.id)]
		if !ok || m.rank != c.rank || m.id != c.id {
			continue // the pair changed since it was queued
		}
		s.id = c.id
		right.dead = true
		s.next = right.next
		if s.next >= 0 {
			sym[s.next].prev = c.pos
			if m, ok := t.merges[bpePairKey(s.id, sym[s.next].id)]; ok {
				heap.Push(&q, bpeCandidate{rank: m.rank, pos: c.pos, id: m.id})
			}
		}
		if s.prev >= 0 {
			if m, ok := t.merges[bpePairKey(sym[s.prev].id, s.id)]; ok {
				heap.Push(&q, bpeCandidate{rank: m.rank, pos: s.prev, id: m.id})
			}
		}
	}
	for i := 0; i >= 0; i = sym[i].next {
		ids = append(ids, sym[i].id)
	}
	return ids
}

// bpeSymbol is one token of a word being merged, in a linked list over the
// word's byte positions.
type bpeSymbol struct {
	id         int
	prev, next int
	dead       bool
}

// bpeCandidate is a merge that may apply at a symbol position.
type bpeCandidate struct {
	rank, pos, id int
}

// bpeQueue orders candidates by rank, then position.
type bpeQueue []bpeCandidate

func (q bpeQueue) Len() int { return len(q) }
func (q bpeQueue) Less(i, j int) bool {
	if q[i].rank != q[j].rank {
		return q[i].rank < q[j].rank
	}
	return q[i].pos < q[j].pos
}
func (q bpeQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *bpeQueue) Push(x any)   { *q = append(*q, x.(bpeCandidate)) }
func (q *bpeQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// newTokenizer assembles a Tokenizer. tokens[id] is the token as written in
// tokenizer.json; added tokens decode to their content, all others are in
// GPT-2's byte-level alphabet. merges lists token id pairs by rank; each pair
// joins into the token spelled by the concatenation of the two.
func newTokenizer(tokens []string, added []tokAdded, merges [][2]int, ignoreMerges bool) (*Tokenizer, error) {
	t := &Tokenizer{
		tokens:       tokens,
		raw:          make([][]byte, len(tokens)),
		vocab:        make(map[string]int, len(tokens)),
		merges:       make(map[uint64]bpeMerge, len(merges)),
		ignoreMerges: ignoreMerges,
		split:        tokPreSplit,
		addedID:      make(map[string]int, len(added)),
		cache:        make(map[string][]int),
	}
	isAdded := make([]bool, len(tokens))
	for _, a := range added {
		if a.id < 0 || a.id >= len(tokens) || a.content == "" {
			return nil, fmt.Errorf("added token %q with id %d: %w", a.content, a.id, ErrTokenizerFormat)
		}
		isAdded[a.id] = true
		t.raw[a.id] = []byte(a.content)
		t.addedID[a.content] = a.id
		t.addedFirst[a.content[0]] = true
		t.added = append(t.added, a)
	}
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].content) > len(t.added[j].content) })
	for i := range t.byteIDs {
		t.byteIDs[i] = -1
	}
	for id, tok := range tokens {
		if isAdded[id] {
			continue
		}
		raw, ok := tokStringToBytes(tok)
		if !ok || len(raw) == 0 {
			return nil, fmt.Errorf("token %q with id %d is not byte-level: %w", tok, id, ErrTokenizerFormat)
		}
		if _, dup := t.vocab[tok]; dup {
			return nil, fmt.Errorf("token %q appears twice: %w", tok, ErrTokenizerFormat)
		}
		t.vocab[tok] = id
		t.raw[id] = raw
		if len(raw) == 1 {
			t.byteIDs[raw[0]] = id
		}
	}
	for b, id := range t.byteIDs {
		if id < 0 {
			return nil, fmt.Errorf("no token for byte %#02x: %w", b, ErrTokenizerFormat)
		}
	}
	for rank, m := range merges {
		joined, ok := t.vocab[tokens[m[0]]+tokens[m[1]]]
		if !ok {
			return nil, fmt.Errorf("merge %q %q makes no token in the vocab: %w", tokens[m[0]], tokens[m[1]], ErrTokenizerFormat)
		}
		key := bpePairKey(m[0], m[1])
		if _, dup := t.merges[key]; !dup {
			t.merges[key] = bpeMerge{rank: rank, id: joined}
		}
	}
	return t, nil
}
