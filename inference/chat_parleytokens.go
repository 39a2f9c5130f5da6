package inference

import (
	"encoding/json"
	"fmt"
)

// WithParleyTokens returns m and tok with the Parley chat and decision
// tokens (<|pad|>, <|sys|>, <|user|>, <|npc|>, <|end|>, [Continue],
// [Terminate]) that tok lacks added: the layout the user agent's prompts
// are in, so that an imported model can be fine-tuned into a user agent.
// The tokens are special added tokens after tok's last id. The returned
// model's token embedding (and untied head) rows of those ids are the mean
// of its rows for tok's own ids; its vocabulary grows only when it has no
// unused rows past the tokenizer's (Qwen pads its vocabulary, Llama 3 does
// not). m and tok are returned as they are when nothing is missing, and are
// never modified.
func WithParleyTokens(m *Model, tok *Tokenizer) (*Model, *Tokenizer, error) {
	var missing []string
	for _, s := range tokSpecials() {
		if _, ok := tok.TokenID(s); !ok {
			missing = append(missing, s)
		}
	}
	if len(missing) == 0 {
		return m, tok, nil
	}
	grown, err := tok.withAdded(missing)
	if err != nil {
		return nil, nil, fmt.Errorf("add parley tokens: %w", err)
	}
	vals, _, err := m.Weights()
	if err != nil {
		return nil, nil, fmt.Errorf("add parley tokens: %w", err)
	}
	cfg := m.cfg
	cfg.VocabSize = max(cfg.VocabSize, grown.VocabSize())
	first, d := tok.VocabSize(), cfg.Dim
	out, err := newModelFilled(cfg, m.bcfg, func(name string, dst []float32) error {
		src := vals[name]
		copy(dst, src)
		if name != "model.embed_tokens.weight" && name != "lm_head.weight" {
			return nil
		}
		mean := make([]float32, d)
		for id := range first {
			for j := range d {
				mean[j] += src[id*d+j] / float32(first)
			}
		}
		for id := first; id < grown.VocabSize(); id++ {
			copy(dst[id*d:(id+1)*d], mean)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("add parley tokens: %w", err)
	}
	return out, grown, nil
}

// withAdded returns a copy of t with contents added as special added
// tokens, in order, after its last id.
func (t *Tokenizer) withAdded(contents []string) (*Tokenizer, error) {
	raw, err := t.marshalHF()
	if err != nil {
		return nil, err
	}
	var doc hfTokenizerFile
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	for i, c := range contents {
		doc.AddedTokens = append(doc.AddedTokens, hfAddedToken{ID: t.VocabSize() + i, Content: c, Special: true})
	}
	if raw, err = json.Marshal(doc); err != nil {
		return nil, err
	}
	return parseHFTokenizer(raw)
}
