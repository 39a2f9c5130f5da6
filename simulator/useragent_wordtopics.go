package simulator

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"

	"github.com/parleyhq/parley/schema"
)

// WordTopicsFile is the file of a user agent version that holds the
// WordTopics its calibration reads.
const WordTopicsFile = "word_topics.json"

// WordTopics groups the content words of players' messages into topics,
// learned without labels from which words players use together
// (LearnWordTopics). The calibration reads an NPC turn's relevance to the
// player through them (TurnFeatures and their Calibration weights):
// what the user agent's transformer does not learn to read at this size.
// Tone, when set, weighs the words of a player's message by how they
// change the odds of a quit after the next NPC turn (LearnTone): how the
// calibration reads the player's mood. Wording, when set, weighs the words
// of an NPC turn by how they change the odds of a quit after it
// (LearnWording).
type WordTopics struct {
	Words   map[string]int     `json:"words"`
	Tone    map[string]float64 `json:"tone,omitempty"`
	Wording map[string]float64 `json:"wording,omitempty"`
}

// WordTopicsConfig sizes LearnWordTopics: Topics clusters of word vectors
// with Dims dimensions, over the words in at least MinMessages of the
// players' messages and at most MaxShare of them and of the NPC's turns
// (more common words are function words or the NPC's stock phrases), the
// MaxWords most common of those (the SVD's cost grows with their cube). A
// word keeps its topic only when its vector's cosine to the topic's centre
// is at least MinCosine: words players use with every topic ("best",
// "love", "near") sit far from any centre and name none.
type WordTopicsConfig struct {
	Topics      int     `json:"topics"`
	Dims        int     `json:"dims"`
	MinMessages int     `json:"min_messages"`
	MaxShare    float64 `json:"max_share"`
	MaxWords    int     `json:"max_words"`
	MinCosine   float64 `json:"min_cosine"`
	Seed        uint64  `json:"seed"`
}

// DefaultWordTopicsConfig: 16 topics of 20-dimensional vectors over the
// 2,000 most common words in 5 players' messages or more and in at most 5 %
// of the players' messages and of the NPC's turns,
// each word within cosine 0.7 of its topic's centre.
func DefaultWordTopicsConfig() WordTopicsConfig {
	return WordTopicsConfig{Topics: 16, Dims: 20, MinMessages: 5, MaxShare: 0.05, MaxWords: 2000, MinCosine: 0.7, Seed: 1}
}

// Validate rejects sizes that learn nothing.
func (c WordTopicsConfig) Validate() error {
	if c.Topics < 2 || c.Dims < 1 || c.MinMessages < 1 || c.MaxShare <= 0 || c.MaxShare > 1 || c.MaxWords < max(c.Topics, c.Dims) ||
		c.MinCosine < 0 || c.MinCosine >= 1 {
		return fmt.Errorf("word topics: %d topics (≥ 2), %d dims (≥ 1), min %d messages (≥ 1), max share %g (in (0, 1]), max %d words (≥ topics and dims), min cosine %g (in [0, 1))",
			c.Topics, c.Dims, c.MinMessages, c.MaxShare, c.MaxWords, c.MinCosine)
	}
	return nil
}

// DialogueMessages are the players' messages and the NPC's turns of the
// dialogues, each in order: what LearnWordTopics learns from.
func DialogueMessages(ds []schema.Dialogue) (player, npc []string) {
	for _, d := range ds {
		for _, x := range d.Exchanges {
			player, npc = append(player, x.User), append(npc, x.NPC)
		}
	}
	return player, npc
}

// LearnWordTopics learns WordTopics from players' messages: the positive
// pointwise mutual information of two words appearing in one message, its
// rank-Dims factorisation (SVD) as word vectors, and spherical k-means of
// the vectors into Topics clusters from a seeded start; words further than
// MinCosine from their cluster's centre are left out. The NPC's turns
// only rule words out: one in more than MaxShare of them is part of how
// the NPC talks ("you", "best", "know"), not what about, however rarely
// players say it. It fails when fewer words than topics qualify.
func LearnWordTopics(player, npc []string, cfg WordTopicsConfig) (*WordTopics, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sets := make([]map[string]bool, len(player))
	df := map[string]int{}
	for i, m := range player {
		sets[i] = map[string]bool{}
		for _, w := range words(m) {
			if !sets[i][w] {
				sets[i][w] = true
				df[w]++
			}
		}
	}
	npcDF := map[string]int{}
	for _, m := range npc {
		for w := range set(words(m)) {
			npcDF[w]++
		}
	}
	index := map[string]int{}
	var vocab []string
	for w, n := range df {
		if n >= cfg.MinMessages && float64(n) <= cfg.MaxShare*float64(len(player)) && float64(npcDF[w]) <= cfg.MaxShare*float64(len(npc)) {
			vocab = append(vocab, w)
		}
	}
	if len(vocab) < max(cfg.Topics, cfg.Dims) {
		return nil, fmt.Errorf("learn word topics: %d words qualify in %d messages; need %d", len(vocab), len(player), max(cfg.Topics, cfg.Dims))
	}
	slices.SortFunc(vocab, func(a, b string) int { return cmp.Or(cmp.Compare(df[b], df[a]), cmp.Compare(a, b)) })
	vocab = vocab[:min(len(vocab), cfg.MaxWords)]
	for i, w := range vocab {
		index[w] = i
	}
	V := len(vocab)
	counts := mat.NewDense(V, V, nil)
	row := make([]float64, V)
	var total float64
	for _, s := range sets {
		var ids []int
		for w := range s {
			if i, ok := index[w]; ok {
				ids = append(ids, i)
			}
		}
		for _, a := range ids {
			for _, b := range ids {
				if a != b {
					counts.Set(a, b, counts.At(a, b)+1)
					row[a]++
					total++
				}
			}
		}
	}
	if total == 0 {
		return nil, errors.New("learn word topics: no two qualifying words share a message")
	}
	for a := range V {
		for b := range V {
			c := counts.At(a, b)
			pmi := 0.0
			if c > 0 {
				pmi = max(math.Log(c*total/(row[a]*row[b])), 0)
			}
			counts.Set(a, b, pmi)
		}
	}
	var svd mat.SVD
	if !svd.Factorize(counts, mat.SVDThin) {
		return nil, errors.New("learn word topics: SVD did not converge")
	}
	var u mat.Dense
	svd.UTo(&u)
	sv := svd.Values(nil)
	vecs := make([][]float64, V)
	for a := range V {
		v := make([]float64, cfg.Dims)
		for k := range v {
			v[k] = u.At(a, k) * math.Sqrt(sv[k])
		}
		vecs[a] = v
	}
	// Centre the vectors so that what all words share does not dominate.
	mean := make([]float64, cfg.Dims)
	for _, v := range vecs {
		for k, x := range v {
			mean[k] += x / float64(V)
		}
	}
	for _, v := range vecs {
		for k := range v {
			v[k] -= mean[k]
		}
		normalize(v)
	}
	assign := sphericalKMeans(vecs, cfg.Topics, cfg.Seed)
	centres := make([][]float64, cfg.Topics)
	for c := range centres {
		centres[c] = make([]float64, cfg.Dims)
	}
	for i, v := range vecs {
		floats.Add(centres[assign[i]], v)
	}
	for _, c := range centres {
		normalize(c)
	}
	t := &WordTopics{Words: make(map[string]int, V)}
	for i, w := range vocab {
		if floats.Dot(vecs[i], centres[assign[i]]) >= cfg.MinCosine {
			t.Words[w] = assign[i]
		}
	}
	return t, nil
}

// sphericalKMeans clusters unit vectors by cosine into k clusters: the best
// (highest total cosine to its centres) of kMeansRestarts runs, each
// started by k-means++ with seed and run for at most 100 rounds.
func sphericalKMeans(vecs [][]float64, k int, seed uint64) []int {
	rng := rand.New(rand.NewPCG(seed, 0x70b1c5))
	var best []int
	bestFit := math.Inf(-1)
	for range kMeansRestarts {
		assign, fit := kMeansRun(vecs, kMeansPlusPlus(vecs, k, rng), rng)
		if fit > bestFit {
			best, bestFit = assign, fit
		}
	}
	return best
}

const kMeansRestarts = 5

// kMeansPlusPlus draws k starting centres, each next one with probability
// proportional to the square of its cosine distance from the nearest
// centre drawn.
func kMeansPlusPlus(vecs [][]float64, k int, rng *rand.Rand) [][]float64 {
	centres := [][]float64{slices.Clone(vecs[rng.IntN(len(vecs))])}
	dist := make([]float64, len(vecs))
	for len(centres) < k {
		total := 0.0
		for i, v := range vecs {
			d := 1 - floats.Dot(v, centres[0])
			for _, c := range centres[1:] {
				d = min(d, 1-floats.Dot(v, c))
			}
			dist[i] = max(d, 0) * max(d, 0)
			total += dist[i]
		}
		pick := rng.IntN(len(vecs))
		if total > 0 {
			r := rng.Float64() * total
			for i, d := range dist {
				if r -= d; r <= 0 {
					pick = i
					break
				}
			}
		}
		centres = append(centres, slices.Clone(vecs[pick]))
	}
	return centres
}

// kMeansRun moves centres to the mean direction of their vectors until no
// vector changes cluster (at most 100 rounds); it returns each vector's
// cluster and the total cosine of the vectors to their centres.
func kMeansRun(vecs, centres [][]float64, rng *rand.Rand) ([]int, float64) {
	assign := make([]int, len(vecs))
	var fit float64
	for round := range 100 {
		moved := false
		fit = 0
		for i, v := range vecs {
			best, bc := math.Inf(-1), 0
			for c, m := range centres {
				if d := floats.Dot(v, m); d > best {
					best, bc = d, c
				}
			}
			fit += best
			if round == 0 || assign[i] != bc {
				assign[i], moved = bc, true
			}
		}
		if !moved {
			break
		}
		for c := range centres {
			clear(centres[c])
		}
		for i, v := range vecs {
			floats.Add(centres[assign[i]], v)
		}
		for c := range centres {
			if !normalize(centres[c]) {
				centres[c] = slices.Clone(vecs[rng.IntN(len(vecs))])
			}
		}
	}
	return assign, fit
}

// normalize scales v to unit length; false when v is zero.
func normalize(v []float64) bool {
	n := floats.Norm(v, 2)
	if n == 0 {
		return false
	}
	floats.Scale(1/n, v)
	return true
}

// topicsOf returns the topics of text's known words.
func (t *WordTopics) topicsOf(text string) map[int]bool {
	out := map[int]bool{}
	for _, w := range words(text) {
		if c, ok := t.Words[w]; ok {
			out[c] = true
		}
	}
	return out
}

// TurnFeatures are what the calibration reads of an NPC turn besides the
// user agent's logit, which the transformer does not learn to read at this
// size: Turn counts the player's messages so far; Repeat is the turn's
// largest overlap with an earlier NPC turn of the dialogue (the Jaccard
// similarity of their word sets) and Question 1 when the turn asks
// something. The others read the turn's topics against the player's (word
// topics), each 1 when it holds: OnLast, the turn names a topic of the
// player's last message; OnEarlier, one the player named before but not
// last; OffTopic, it names topics and none the player has named; NamesNew,
// it names at least one the player has not; NoTopic, it names none;
// AsksNamed, it asks and names one the player has named; NamesKnown, it
// names one the player has not named in this dialogue but did in an
// earlier one (the user agent's demos), a likely interest not yet told.
// Tone and PlayerTone read the player rather than the turn: Tone is the
// tone of the player's last message (WordTopics.Tone), PlayerTone the mean
// tone of the player's messages before it, in the demos and this dialogue
// (how the player talks: a player who insults or despairs in one session
// does in the next); each 0 without one. Wording is the summed weight of
// the turn's distinct words (WordTopics.Wording), 0 without one.
type TurnFeatures struct {
	Turn                int
	OnLast, OffTopic    float64
	Repeat              float64
	Question            float64
	OnEarlier, NamesNew float64
	NoTopic, AsksNamed  float64
	NamesKnown          float64
	Tone, PlayerTone    float64
	Wording             float64
}

// values are f's features in the order of Calibration.weights.
func (f TurnFeatures) values() [numFeatures]float64 {
	return [numFeatures]float64{f.OnLast, f.OffTopic, f.Repeat, f.Question, f.OnEarlier, f.NamesNew, f.NoTopic, f.AsksNamed, f.NamesKnown, f.Tone, f.PlayerTone, f.Wording}
}

// Features reads an NPC turn's features but Repeat against the player's
// messages in this dialogue, the last one last, and in earlier ones; nil t
// reads Turn and Question alone.
func (t *WordTopics) Features(earlier, player []string, npc string) TurnFeatures {
	f := TurnFeatures{Turn: len(player)}
	if strings.Contains(npc, "?") {
		f.Question = 1
	}
	if t == nil {
		return f
	}
	f.Wording = weightOf(t.Wording, npc)
	if len(player) == 0 {
		return f
	}
	f.Tone = weightOf(t.Tone, player[len(player)-1])
	if n := len(earlier) + len(player) - 1; n > 0 {
		sum := 0.0
		for _, m := range earlier {
			sum += weightOf(t.Tone, m)
		}
		for _, m := range player[:len(player)-1] {
			sum += weightOf(t.Tone, m)
		}
		f.PlayerTone = sum / float64(n)
	}
	turn := t.topicsOf(npc)
	last := t.topicsOf(player[len(player)-1])
	named, known := map[int]bool{}, map[int]bool{}
	for _, m := range player {
		for c := range t.topicsOf(m) {
			named[c] = true
		}
	}
	for _, m := range earlier {
		for c := range t.topicsOf(m) {
			known[c] = true
		}
	}
	onNamed := false
	for c := range turn {
		switch {
		case !named[c]:
			f.NamesNew = 1
			if known[c] {
				f.NamesKnown = 1
			}
		case last[c]:
			f.OnLast, onNamed = 1, true
		default:
			f.OnEarlier, onNamed = 1, true
		}
	}
	switch {
	case len(turn) == 0:
		f.NoTopic = 1
	case !onNamed:
		f.OffTopic = 1
	}
	if onNamed {
		f.AsksNamed = f.Question
	}
	return f
}

// featuresOf reads the features of the last NPC turn of q's dialogue, the
// player's earlier messages from its demos; nil t reads its turn, question
// and repetition alone.
func (t *WordTopics) featuresOf(q UserAgentQuery) TurnFeatures {
	d := q.Current
	n := len(d.Exchanges)
	if n == 0 {
		return TurnFeatures{}
	}
	player, earlier := make([]string, n), make([]string, n-1)
	for i, x := range d.Exchanges {
		player[i] = x.User
		if i < n-1 {
			earlier[i] = x.NPC
		}
	}
	var demos []string
	for _, demo := range q.Demos {
		for _, x := range demo.Exchanges {
			demos = append(demos, x.User)
		}
	}
	f := t.Features(demos, player, d.Exchanges[n-1].NPC)
	f.Repeat = overlap(d.Exchanges[n-1].NPC, earlier)
	return f
}

// overlap is the largest Jaccard similarity of text's word set with that
// of one of earlier; 0 when earlier is empty.
func overlap(text string, earlier []string) float64 {
	cur, best := set(words(text)), 0.0
	for _, e := range earlier {
		best = max(best, jaccard(cur, set(words(e))))
	}
	return best
}

// LoadWordTopics reads the WordTopics of the version in dir whose manifest
// is man; nil when the version has none.
func LoadWordTopics(dir string, man schema.Manifest) (*WordTopics, error) {
	if _, ok := man.Files[WordTopicsFile]; !ok {
		return nil, nil
	}
	raw, err := os.ReadFile(filepath.Join(dir, WordTopicsFile))
	if err != nil {
		return nil, fmt.Errorf("load word topics: %w", err)
	}
	var t WordTopics
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("load word topics: %s: %w", WordTopicsFile, err)
	}
	return &t, nil
}
