package inference

import (
	"container/heap"
	"fmt"
	"sort"
)

// TrainTokenizer learns a byte-level BPE tokenizer of at most vocabSize
// tokens from texts. Ids 0..6 are the chat template's special tokens (TokPad
// is 0), the next 256 ids are the single bytes, and learnt merges follow.
// Special-token strings in texts are cut out before counting, so no merge
// spans one. Merging stops early when no pair of tokens occurs twice, so
// VocabSize may come out below vocabSize.
//
// Training counts each distinct pre-tokenized word once with its frequency and
// updates pair counts incrementally after every merge, so a few megabytes of
// text train in seconds. Ties between equally frequent pairs go to the lower
// token ids, which makes training deterministic.
func TrainTokenizer(texts []string, vocabSize int) (*Tokenizer, error) {
	specials := tokSpecials()
	floor := len(specials) + 256
	if vocabSize < floor {
		return nil, fmt.Errorf("train tokenizer: vocab size %d is below %d (special tokens and single bytes)", vocabSize, floor)
	}
	tokens := make([]string, 0, vocabSize)
	added := make([]tokAdded, 0, len(specials))
	for id, s := range specials {
		tokens = append(tokens, s)
		added = append(added, tokAdded{content: s, id: id, special: true})
	}
	for b := range 256 {
		tokens = append(tokens, tokBytesToString([]byte{byte(b)}))
	}
	base, err := newTokenizer(tokens, added, nil, false)
	if err != nil {
		return nil, fmt.Errorf("train tokenizer: %w", err)
	}

	tr := bpeTrainerFromTexts(base, texts)
	merges := tr.run(&tokens, vocabSize)
	tok, err := newTokenizer(tokens, added, merges, false)
	if err != nil {
		return nil, fmt.Errorf("train tokenizer: %w", err)
	}
	return tok, nil
}

// bpeTrainer holds the state of one training run: the distinct words as
// token id sequences with their frequencies, how often each adjacent pair
// occurs (weighted by word frequency), and which words may hold each pair.
type bpeTrainer struct {
	words  []bpeWord
	counts map[uint64]int64
	where  map[uint64][]int32
	queue  bpePairQueue
}

// bpeWord is a distinct pre-tokenized word and how often it occurs.
type bpeWord struct {
	sym  []int32
	freq int64
}

// bpeTrainerFromTexts counts the words of texts as base pre-tokenizes them.
func bpeTrainerFromTexts(base *Tokenizer, texts []string) *bpeTrainer {
	freq := make(map[string]int64)
	var buf []string
	for _, text := range texts {
		for len(text) > 0 {
			at, tok := base.nextAdded(text)
			buf = tokPreSplit(buf[:0], text[:at])
			for _, w := range buf {
				freq[w]++
			}
			if tok == nil {
				break
			}
			text = text[at+len(tok.content):]
		}
	}
	keys := make([]string, 0, len(freq))
	for w := range freq {
		if len(w) > 1 { // a one-byte word holds no pair
			keys = append(keys, w)
		}
	}
	sort.Strings(keys)

	tr := &bpeTrainer{
		words:  make([]bpeWord, len(keys)),
		counts: make(map[uint64]int64),
		where:  make(map[uint64][]int32),
	}
	for wi, w := range keys {
		sym := make([]int32, len(w))
		for i := 0; i < len(w); i++ {
			sym[i] = int32(base.byteIDs[w[i]])
		}
		f := freq[w]
		tr.words[wi] = bpeWord{sym: sym, freq: f}
		for i := 0; i+1 < len(sym); i++ {
			k := bpePairKey(int(sym[i]), int(sym[i+1]))
			tr.counts[k] += f
			tr.addWhere(k, int32(wi))
		}
	}
	tr.queue = make(bpePairQueue, 0, len(tr.counts))
	for k, c := range tr.counts {
		tr.queue = append(tr.queue, bpePairCount{key: k, count: c})
	}
	heap.Init(&tr.queue)
	return tr
}

// addWhere records that word wi holds pair k; a word is listed once per pair
// because it is added while it is being visited.
func (tr *bpeTrainer) addWhere(k uint64, wi int32) {
	list := tr.where[k]
	if len(list) > 0 && list[len(list)-1] == wi {
		return
	}
	tr.where[k] = append(list, wi)
}

// run learns merges until tokens holds vocabSize tokens or no pair occurs
// twice. It appends new tokens to *tokens and returns the merges by rank.
func (tr *bpeTrainer) run(tokens *[]string, vocabSize int) [][2]int {
	index := make(map[string]int32, vocabSize)
	for id, s := range *tokens {
		index[s] = int32(id)
	}
	var merges [][2]int
	touched := make(map[uint64]struct{})
	for len(*tokens) < vocabSize {
		k, ok := tr.best()
		if !ok {
			break
		}
		a, b := int32(k>>32), int32(uint32(k))
		joined := (*tokens)[a] + (*tokens)[b]
		id, exists := index[joined]
		if !exists {
			id = int32(len(*tokens))
			*tokens = append(*tokens, joined)
			index[joined] = id
		}
		merges = append(merges, [2]int{int(a), int(b)})

		clear(touched)
		for _, wi := range tr.where[k] {
			tr.mergeWord(wi, a, b, id, touched)
		}
		delete(tr.where, k)
		delete(tr.counts, k)
		for tk := range touched {
			if c := tr.counts[tk]; c > 0 {
				heap.Push(&tr.queue, bpePairCount{key: tk, count: c})
			}
		}
	}
	return merges
}

// best pops the most frequent pair that occurs at least twice. Queued counts
// never fall below a pair's true count (they only drop, and pairs whose count
// grows are queued again), so a popped entry whose count is current is the
// maximum.
func (tr *bpeTrainer) best() (uint64, bool) {
	for tr.queue.Len() > 0 {
		top := heap.Pop(&tr.queue).(bpePairCount)
		c := tr.counts[top.key]
		if c == top.count {
			if c < 2 {
				return 0, false
			}
			return top.key, true
		}
		if c > 0 && c < top.count {
			heap.Push(&tr.queue, bpePairCount{key: top.key, count: c})
		}
	}
	return 0, false
}

// mergeWord joins every a,b in word wi into id, left to right, and moves the
// word's pair counts from its old pairs to its new ones. Pairs that hold the
// new token are recorded in touched so their counts can be queued.
func (tr *bpeTrainer) mergeWord(wi, a, b, id int32, touched map[uint64]struct{}) {
	w := &tr.words[wi]
	sym := w.sym
	found := false
	for i := 0; i+1 < len(sym); i++ {
		if sym[i] == a && sym[i+1] == b {
			found = true
			break
		}
	}
	if !found {
		return
	}
	for i := 0; i+1 < len(sym); i++ {
		tr.counts[bpePairKey(int(sym[i]), int(sym[i+1]))] -= w.freq
	}
	out := sym[:0]
	for i := 0; i < len(sym); i++ {
		if i+1 < len(sym) && sym[i] == a && sym[i+1] == b {
			out = append(out, id)
			i++
			continue
		}
		out = append(out, sym[i])
	}
	w.sym = out
	for i := 0; i+1 < len(out); i++ {
		k := bpePairKey(int(out[i]), int(out[i+1]))
		tr.counts[k] += w.freq
		if out[i] == id || out[i+1] == id {
			tr.addWhere(k, wi)
			touched[k] = struct{}{}
		}
	}
}

// bpePairCount is a queued pair with its count when it was queued.
type bpePairCount struct {
	key   uint64
	count int64
}

// bpePairQueue is a max-heap by count; ties go to the smaller key, that is
// the lower left id, then the lower right id.
type bpePairQueue []bpePairCount

func (q bpePairQueue) Len() int { return len(q) }
func (q bpePairQueue) Less(i, j int) bool {
	if q[i].count != q[j].count {
		return q[i].count > q[j].count
	}
	return q[i].key < q[j].key
}
func (q bpePairQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *bpePairQueue) Push(x any)   { *q = append(*q, x.(bpePairCount)) }
func (q *bpePairQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
