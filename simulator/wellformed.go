package simulator

import (
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/parleyhq/parley/schema"
)

// Flaw is why an NPC reply is not well-formed; "" means it is.
type Flaw string

// The flaws of a reply, in the order Vocabulary.Check looks for them.
const (
	// FlawEmpty: nothing but white space.
	FlawEmpty Flaw = "empty"
	// FlawUnfinished: the reply does not end with ".", "!" or "?".
	FlawUnfinished Flaw = "unfinished"
	// FlawFragment: a token is not a word with at most one punctuation
	// mark after it ("it's,.", "??x", a lone "-").
	FlawFragment Flaw = "fragment"
	// FlawUnknownWord: a word the vocabulary does not hold, such as a
	// stutter ("it's's'se") or a word cut short ("inte").
	FlawUnknownWord Flaw = "unknown_word"
	// FlawRepeat: the same word twice in a row within a sentence, or the
	// same sentence twice.
	FlawRepeat Flaw = "repeat"
	// FlawUnknownSentence: a sentence no NPC turn of the corpus has, even
	// with up to MaxSlot words in a row replaced: known words strung into
	// no sentence the NPC learned ("Ah, back to do you usually go for
	// bait?").
	FlawUnknownSentence Flaw = "unknown_sentence"
)

// MaxSlot is the longest run of words a known sentence may have replaced
// (the player's word or phrase a scripted line repeats).
const MaxSlot = 3

// token is one white-space separated piece of a well-formed reply: a word
// whose parts join with an apostrophe or hyphen, then at most one
// punctuation mark (an ellipsis, "!!" and "?!" count as one).
var token = regexp.MustCompile(`^[\p{L}\p{N}]+(?:['’-][\p{L}\p{N}]+)*(?:[.,!?;:]|\.\.\.|!!|\?!)?$`)

// Vocabulary is the set of words an NPC reply may use: the words of the
// corpus its policy was trained on, both roles, lowercase; and, from a
// corpus, the sentences of its NPC turns. A reply is well-formed when
// every token is a whole word of the vocabulary, no word or sentence
// repeats back to back, every sentence is one of the corpus's NPC
// sentences up to a slot of at most MaxSlot words, and it ends with a
// closing mark; see Check.
type Vocabulary struct {
	words map[string]bool
	// shapes are the NPC sentences' word sequences, each also with every
	// run of 1 to MaxSlot words replaced by a slot; nil checks no
	// sentence.
	shapes map[string]bool
}

// NewVocabulary returns the words of texts.
func NewVocabulary(texts ...string) Vocabulary {
	v := Vocabulary{words: make(map[string]bool)}
	for _, t := range texts {
		v.add(t)
	}
	return v
}

// CorpusVocabulary returns the words of every turn of dialogues and the
// sentences of their NPC turns.
func CorpusVocabulary(dialogues []schema.Dialogue) Vocabulary {
	v := NewVocabulary()
	v.shapes = make(map[string]bool)
	for _, d := range dialogues {
		for _, x := range d.Exchanges {
			v.add(x.User)
			v.add(x.NPC)
			for _, sent := range sentences(x.NPC) {
				if v.shapes[strings.Join(sent, " ")] {
					continue // a sentence seen before: its shapes are in
				}
				for _, sh := range shapes(sent) {
					v.shapes[sh] = true
				}
			}
		}
	}
	return v
}

// With returns v with the words of texts added (the sentences stay the
// corpus's): the vocabulary of replies to a player who typed texts.
func (v Vocabulary) With(texts ...string) Vocabulary {
	out := Vocabulary{words: maps.Clone(v.words), shapes: v.shapes}
	for _, t := range texts {
		out.add(t)
	}
	return out
}

// slot stands for the replaced words in a sentence's shape.
const slot = "_"

// endsSentence reports whether text (not empty) ends with ".", "!" or "?".
func endsSentence(text string) bool { return strings.ContainsAny(text[len(text)-1:], ".!?") }

// sentences splits text into its sentences' words: a sentence ends at a
// token that endsSentence.
func sentences(text string) [][]string {
	var out [][]string
	var cur []string
	for _, tok := range strings.Fields(text) {
		cur = append(cur, words(tok)...)
		if endsSentence(tok) && len(cur) > 0 {
			out, cur = append(out, cur), nil
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// shapes returns the sentence's words joined, and joined with every run of
// 1 to MaxSlot of them replaced by the slot.
func shapes(sent []string) []string {
	out := []string{strings.Join(sent, " ")}
	for i := range sent {
		for j := i + 1; j <= min(len(sent), i+MaxSlot); j++ {
			out = append(out, strings.Join(slices.Concat(sent[:i], []string{slot}, sent[j:]), " "))
		}
	}
	return out
}

func (v Vocabulary) add(text string) {
	for _, w := range words(text) {
		v.words[w] = true
	}
}

// Len returns the number of words.
func (v Vocabulary) Len() int { return len(v.words) }

// Check returns the first flaw of reply, or "" when it is well-formed: not
// empty, ending with ".", "!" or "?", every white-space separated token a
// word (letters and digits, parts joined by an apostrophe or a hyphen)
// with at most one punctuation mark after it, every word in the
// vocabulary (case-insensitive), no word twice in a row within a sentence and
// no sentence twice.
func (v Vocabulary) Check(reply string) Flaw {
	reply = strings.TrimSpace(reply)
	if reply == "" {
		return FlawEmpty
	}
	if !endsSentence(reply) {
		return FlawUnfinished
	}
	var prev string
	seen := make(map[string]bool)
	var sentence []string
	for _, tok := range strings.Fields(reply) {
		if !token.MatchString(tok) {
			return FlawFragment
		}
		for _, w := range words(tok) {
			if !v.words[w] {
				return FlawUnknownWord
			}
			if w == prev {
				return FlawRepeat
			}
			prev = w
			sentence = append(sentence, w)
		}
		if endsSentence(tok) {
			key := strings.Join(sentence, " ")
			if seen[key] {
				return FlawRepeat
			}
			if !v.knows(sentence) {
				return FlawUnknownSentence
			}
			seen[key], sentence, prev = true, nil, ""
		}
	}
	return ""
}

// knows reports whether sent is an NPC sentence of the corpus up to a
// slot (always, for a vocabulary of words only).
func (v Vocabulary) knows(sent []string) bool {
	if v.shapes == nil {
		return true
	}
	return slices.ContainsFunc(shapes(sent), func(sh string) bool { return v.shapes[sh] })
}

// WellFormed reports whether reply has no flaw (see Check).
func (v Vocabulary) WellFormed(reply string) bool { return v.Check(reply) == "" }
