package simulator

import (
	"regexp"
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
)

// token is one white-space separated piece of a well-formed reply: a word
// whose parts join with an apostrophe or hyphen, then at most one
// punctuation mark (an ellipsis, "!!" and "?!" count as one).
var token = regexp.MustCompile(`^[\p{L}\p{N}]+(?:['’-][\p{L}\p{N}]+)*(?:[.,!?;:]|\.\.\.|!!|\?!)?$`)

// Vocabulary is the set of words an NPC reply may use: the words of the
// corpus its policy was trained on, both roles, lowercase. A reply is
// well-formed when every token is a whole word of the vocabulary, no word
// or sentence repeats back to back, and it ends with a closing mark; see
// Check.
type Vocabulary struct {
	words map[string]bool
}

// NewVocabulary returns the words of texts.
func NewVocabulary(texts ...string) Vocabulary {
	v := Vocabulary{words: make(map[string]bool)}
	for _, t := range texts {
		v.add(t)
	}
	return v
}

// CorpusVocabulary returns the words of every turn of dialogues.
func CorpusVocabulary(dialogues []schema.Dialogue) Vocabulary {
	v := NewVocabulary()
	for _, d := range dialogues {
		for _, x := range d.Exchanges {
			v.add(x.User)
			v.add(x.NPC)
		}
	}
	return v
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
	if !strings.ContainsAny(reply[len(reply)-1:], ".!?") {
		return FlawUnfinished
	}
	var prev string
	sentences := make(map[string]bool)
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
		if strings.ContainsAny(tok[len(tok)-1:], ".!?") {
			key := strings.Join(sentence, " ")
			if sentences[key] {
				return FlawRepeat
			}
			sentences[key], sentence, prev = true, nil, ""
		}
	}
	return ""
}

// WellFormed reports whether reply has no flaw (see Check).
func (v Vocabulary) WellFormed(reply string) bool { return v.Check(reply) == "" }
