package inference

import (
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	"golang.org/x/text/unicode/norm"
)

// The pre-tokenizers and normalizers of tokenizer.json that the open-weight
// families use: Llama 3 and Qwen 2 split with a regex (Split, behavior
// Isolated) and then map bytes (ByteLevel without its own regex), SmolLM2
// isolates digits (Digits) before GPT-2's ByteLevel split, and Qwen
// normalizes to NFC. Anything else is refused with ErrTokenizerFormat.

// hfPreTokenizer is tokenizer.json's pre_tokenizer: ByteLevel, Split, Digits
// or a Sequence of them. Parley writes only the ByteLevel fields, in the
// order and with the values Hugging Face writes for GPT-2; the others are
// omitted when empty.
type hfPreTokenizer struct {
	Type             string           `json:"type"`
	AddPrefixSpace   bool             `json:"add_prefix_space"`
	TrimOffsets      bool             `json:"trim_offsets"`
	UseRegex         *bool            `json:"use_regex,omitempty"` // ByteLevel; Hugging Face defaults it to true
	Pretokenizers    []hfPreTokenizer `json:"pretokenizers,omitempty"`
	Pattern          *hfPattern       `json:"pattern,omitempty"`
	Behavior         string           `json:"behavior,omitempty"`
	Invert           bool             `json:"invert,omitempty"`
	IndividualDigits bool             `json:"individual_digits,omitempty"`
}

// hfPattern is a Split pattern: a regex or a literal string.
type hfPattern struct {
	Regex  *string `json:"Regex,omitempty"`
	String *string `json:"String,omitempty"`
}

// hfNormalizer is tokenizer.json's normalizer; only NFC is implemented.
type hfNormalizer struct {
	Type string `json:"type"`
}

// tokSplitter appends the pieces of s to dst. The pieces are substrings of s
// that cover it exactly, in order, so no byte is lost.
type tokSplitter func(dst []string, s string) []string

// splitter builds the pre-tokenizer's splitting function.
func (p *hfPreTokenizer) splitter() (tokSplitter, error) {
	switch p.Type {
	case "ByteLevel":
		if p.AddPrefixSpace {
			return nil, fmt.Errorf("pre_tokenizer ByteLevel add_prefix_space: %w", ErrTokenizerFormat)
		}
		if p.UseRegex != nil && !*p.UseRegex {
			return tokSplitNone, nil // only maps bytes, which BPE does on every piece
		}
		return tokPreSplit, nil
	case "Split":
		return p.regexSplitter()
	case "Digits":
		return tokSplitDigits(p.IndividualDigits), nil
	case "Sequence":
		steps := make([]tokSplitter, 0, len(p.Pretokenizers))
		for i := range p.Pretokenizers {
			s, err := p.Pretokenizers[i].splitter()
			if err != nil {
				return nil, err
			}
			steps = append(steps, s)
		}
		return tokSplitSequence(steps), nil
	default:
		return nil, fmt.Errorf("pre_tokenizer type %q: %w", p.Type, ErrTokenizerFormat)
	}
}

// regexSplitter builds a Split pre-tokenizer with behavior Isolated: every
// match is a piece, and so is the text between matches. The regex is run by
// regexp2, a backtracking engine with the lookahead these patterns use
// (`\s+(?!\S)`), which Go's regexp lacks.
func (p *hfPreTokenizer) regexSplitter() (tokSplitter, error) {
	if p.Behavior != "Isolated" || p.Invert {
		return nil, fmt.Errorf("pre_tokenizer Split behavior %q invert %v, want Isolated: %w", p.Behavior, p.Invert, ErrTokenizerFormat)
	}
	var expr string
	switch {
	case p.Pattern != nil && p.Pattern.Regex != nil:
		expr = *p.Pattern.Regex
	case p.Pattern != nil && p.Pattern.String != nil:
		expr = regexp2.Escape(*p.Pattern.String)
	default:
		return nil, fmt.Errorf("pre_tokenizer Split without a pattern: %w", ErrTokenizerFormat)
	}
	// No backtracking limit and no timeout: a match then cannot fail, and
	// the stack grows at most with the text.
	re, err := regexp2.Compile(expr, regexp2.None, regexp2.OptionMaxBacktrackingStackSize(-1))
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer Split pattern %q: %w: %w", expr, ErrTokenizerFormat, err)
	}
	return func(dst []string, s string) []string {
		matches, err := re.FindAllStringIndex(s, -1)
		if err != nil {
			// Unreachable without limits; keep the text whole rather than lose it.
			return append(dst, s)
		}
		at := 0
		for _, m := range matches {
			if m[0] == m[1] {
				continue
			}
			if m[0] > at {
				dst = append(dst, s[at:m[0]])
			}
			dst = append(dst, s[m[0]:m[1]])
			at = m[1]
		}
		if at < len(s) {
			dst = append(dst, s[at:])
		}
		return dst
	}, nil
}

// tokSplitNone keeps s as one piece.
func tokSplitNone(dst []string, s string) []string { return append(dst, s) }

// tokSplitDigits is Hugging Face's Digits pre-tokenizer: runs of numeric
// runes (Unicode category N, as Rust's char::is_numeric) are isolated from
// the text around them, each rune on its own when individual is set.
func tokSplitDigits(individual bool) tokSplitter {
	return func(dst []string, s string) []string {
		start, prevNum := 0, false
		for i := 0; i < len(s); {
			r, w := utf8.DecodeRuneInString(s[i:])
			num := unicode.IsNumber(r) && !(r == utf8.RuneError && w <= 1)
			if i > start && (num != prevNum || (num && individual)) {
				dst = append(dst, s[start:i])
				start = i
			}
			prevNum = num
			i += w
		}
		if start < len(s) {
			dst = append(dst, s[start:])
		}
		return dst
	}
}

// tokSplitSequence applies steps in order, each to every piece the one
// before made.
func tokSplitSequence(steps []tokSplitter) tokSplitter {
	return func(dst []string, s string) []string {
		pieces := []string{s}
		var next []string
		for _, step := range steps {
			next = next[:0]
			for _, p := range pieces {
				next = step(next, p)
			}
			pieces, next = next, pieces
		}
		return append(dst, pieces...)
	}
}

// hfNormalizerFunc returns the text normalization of tokenizer.json's normalizer,
// or nil for none.
func hfNormalizerFunc(raw json.RawMessage) (func(string) string, error) {
	if isJSONNull(raw) {
		return nil, nil
	}
	var n hfNormalizer
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, fmt.Errorf("normalizer %s: %w: %w", raw, ErrTokenizerFormat, err)
	}
	if n.Type != "NFC" {
		return nil, fmt.Errorf("normalizer %s: %w", raw, ErrTokenizerFormat)
	}
	return norm.NFC.String, nil
}
