package gateway

import (
	"context"

	"github.com/parleyhq/parley/inference"
)

// InstantGenerator is a stand-in engine that answers every request at once
// with the same reply, token by token. Benchmarks serve it to measure the
// gateway's own overhead; it samples nothing.
type InstantGenerator struct {
	tok    *inference.Tokenizer
	pieces []string
	maxSeq int
}

var _ Generator = (*InstantGenerator)(nil)

// NewInstantGenerator answers with reply, split as tok splits it, and
// claims a context of maxSeq tokens.
func NewInstantGenerator(tok *inference.Tokenizer, reply string, maxSeq int) *InstantGenerator {
	g := &InstantGenerator{tok: tok, maxSeq: maxSeq}
	for _, id := range tok.EncodeOrdinary(reply) {
		g.pieces = append(g.pieces, string(tok.TokenBytes(id)))
	}
	return g
}

// Tokenizer returns the tokenizer the reply was split with.
func (g *InstantGenerator) Tokenizer() *inference.Tokenizer { return g.tok }

// MaxSeq returns the claimed context size.
func (g *InstantGenerator) MaxSeq() int { return g.maxSeq }

// Generate returns the canned reply, cut to req.MaxTokens tokens.
func (g *InstantGenerator) Generate(ctx context.Context, req GenerateRequest) (TokenStream, error) {
	n := min(len(g.pieces), req.MaxTokens)
	reason := "stop"
	if n < len(g.pieces) {
		reason = "length"
	}
	return &instantStream{ctx: ctx, pieces: g.pieces[:n], done: Completion{
		FinishReason: reason, PromptTokens: len(req.Prompt), CompletionTokens: n,
	}}, nil
}

type instantStream struct {
	ctx    context.Context
	pieces []string
	i      int
	done   Completion
}

func (s *instantStream) Next() (string, bool) {
	if s.i >= len(s.pieces) || s.ctx.Err() != nil {
		return "", false
	}
	s.i++
	return s.pieces[s.i-1], true
}

func (s *instantStream) Wait() (Completion, error) {
	if err := s.ctx.Err(); err != nil {
		s.done.FinishReason = "cancelled"
		return s.done, err
	}
	return s.done, nil
}
