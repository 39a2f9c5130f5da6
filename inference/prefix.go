package inference

import "slices"

// prefixStore keeps the keys and values of sequences the CPU decoder
// finished, so that a prompt that starts with one of them (the next turn
// of the same conversation, whose prompt is the last one plus the reply
// and the player's new line, or any prompt behind the same persona card)
// is prefilled only from where the stored tokens stop matching. Without
// it every turn prefills the whole history again, and every prefill
// stalls the decode steps of the sequences already running.
//
// Entries are dropped least recently used first beyond max bytes, an
// entry whose tokens begin a newer one as soon as that one is kept, and
// all of them when the decoder's weights change (cpuDecoder.prepare).
type prefixStore struct {
	max, bytes int
	tick       uint64
	entries    []*prefixEntry
}

// prefixEntry is one kept sequence. Per layer l, k[l] holds for each
// key/value head the key tiles of its positions (cacheSlot(len(toks), hd)
// floats) and v[l] its values (len(toks)·hd floats), laid out as a cache
// row holds them.
type prefixEntry struct {
	toks []int
	k, v [][]float32
	used uint64
}

// minPrefix is the fewest tokens worth keeping.
const minPrefix = 16

// newPrefixStore returns a store of at most max bytes, or nil (no store)
// when max is 0.
func newPrefixStore(max int) *prefixStore {
	if max <= 0 {
		return nil
	}
	return &prefixStore{max: max}
}

// match returns the entry sharing the longest prefix with prompt and the
// number of positions to take from it: that prefix, less one when it is
// the whole prompt, since the prompt's last token must still be run for
// its logits.
func (s *prefixStore) match(prompt []int) (*prefixEntry, int) {
	if s == nil {
		return nil, 0
	}
	var best *prefixEntry
	n := 0
	for _, e := range s.entries {
		if l := commonPrefix(e.toks, prompt); l > n {
			best, n = e, l
		}
	}
	n = min(n, len(prompt)-1)
	if best == nil || n < 1 {
		return nil, 0
	}
	s.tick++
	best.used = s.tick
	return best, n
}

// keep keeps toks with the keys and values kv copies out, unless toks
// begin a kept entry (kv is then not called), drops the entries toks
// extend, and evicts the least recently used beyond the budget. The store
// holds on to toks.
func (s *prefixStore) keep(toks []int, kv func() (k, v [][]float32)) {
	s.tick++
	n := len(toks)
	for _, o := range s.entries {
		if len(o.toks) >= n && slices.Equal(o.toks[:n], toks) {
			o.used = s.tick
			return
		}
	}
	s.entries = slices.DeleteFunc(s.entries, func(o *prefixEntry) bool {
		if len(o.toks) < n && slices.Equal(toks[:len(o.toks)], o.toks) {
			s.bytes -= o.size()
			return true
		}
		return false
	})
	e := &prefixEntry{toks: toks, used: s.tick}
	e.k, e.v = kv()
	if e.size() > s.max {
		return
	}
	s.entries = append(s.entries, e)
	s.bytes += e.size()
	for s.bytes > s.max {
		i := 0
		for j, o := range s.entries {
			if o.used < s.entries[i].used {
				i = j
			}
		}
		s.bytes -= s.entries[i].size()
		s.entries = slices.Delete(s.entries, i, i+1)
	}
}

// clear drops every entry.
func (s *prefixStore) clear() {
	if s != nil {
		s.entries, s.bytes = nil, 0
	}
}

// size is the bytes the entry's keys and values take.
func (e *prefixEntry) size() int {
	n := 0
	for l := range e.k {
		n += len(e.k[l]) + len(e.v[l])
	}
	return 4*n + 8*len(e.toks)
}

// keep offers the first len(toks) positions of cache row r, which hold
// toks, to the decoder's prefix store, which copies them unless it holds
// them already and keeps toks itself.
func (d *cpuDecoder) keep(r int, toks []int) {
	n := len(toks)
	if d.prefixes == nil || n < minPrefix || n > d.length || d.k == nil {
		return
	}
	d.prefixes.keep(toks, func() (k, v [][]float32) {
		hd, kv := d.cfg.HeadDim(), d.cfg.KVHeadCount()
		slot, ks := cacheSlot(d.length, hd), cacheSlot(n, hd)
		k, v = make([][]float32, d.cfg.Layers), make([][]float32, d.cfg.Layers)
		for l := range d.cfg.Layers {
			k[l], v[l] = make([]float32, kv*ks), make([]float32, kv*n*hd)
			for h := range kv {
				from := (r*kv + h) * slot
				copy(k[l][h*ks:(h+1)*ks], d.k[l][from:from+ks])
				copy(v[l][h*n*hd:(h+1)*n*hd], d.v[l][from:from+n*hd])
			}
		}
		return k, v
	})
}

// loadRow copies the first n positions of e into cache row r.
func (d *cpuDecoder) loadRow(r int, e *prefixEntry, n int) {
	hd, kv := d.cfg.HeadDim(), d.cfg.KVHeadCount()
	slot, es, ks := cacheSlot(d.length, hd), cacheSlot(len(e.toks), hd), cacheSlot(n, hd)
	m := len(e.toks)
	for l := range d.cfg.Layers {
		for h := range kv {
			to := (r*kv + h) * slot
			// Whole key tiles: the positions from n on in the last one are
			// written by the prefill before any token reads them.
			copy(d.k[l][to:to+ks], e.k[l][h*es:h*es+ks])
			copy(d.v[l][to:to+n*hd], e.v[l][h*m*hd:h*m*hd+n*hd])
		}
	}
}
