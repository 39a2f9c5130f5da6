package bench

import (
	"context"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/inference"
)

// InstantGenerator is a stand-in engine that answers every request at once
// with the same reply, token by token. The gateway bench serves it to
// measure the gateway's own overhead, and tests of the player API serve it
// for replies that cost nothing; it samples nothing.
type InstantGenerator struct {
	tok    *inference.Tokenizer
	chat   *inference.ChatFormat
	pieces []string
	maxSeq int
}

var _ gateway.Generator = (*InstantGenerator)(nil)

// NewInstantGenerator answers with reply, split as tok splits it, and
// claims a context of maxSeq tokens.
func NewInstantGenerator(tok *inference.Tokenizer, reply string, maxSeq int) *InstantGenerator {
	g := &InstantGenerator{tok: tok, chat: inference.ParleyChatFormat(tok), maxSeq: maxSeq}
	for _, id := range tok.EncodeOrdinary(reply) {
		g.pieces = append(g.pieces, string(tok.TokenBytes(id)))
	}
	return g
}

// Tokenizer returns the tokenizer the reply was split with.
func (g *InstantGenerator) Tokenizer() *inference.Tokenizer { return g.tok }

// Chat returns Parley's chat format on the tokenizer.
func (g *InstantGenerator) Chat() *inference.ChatFormat { return g.chat }

// MaxSeq returns the claimed context size.
func (g *InstantGenerator) MaxSeq() int { return g.maxSeq }

// Generate returns the canned reply, cut to req.MaxTokens tokens.
func (g *InstantGenerator) Generate(ctx context.Context, req gateway.GenerateRequest) (gateway.TokenStream, error) {
	n := min(len(g.pieces), req.MaxTokens)
	reason := "stop"
	if n < len(g.pieces) {
		reason = "length"
	}
	return &instantStream{ctx: ctx, pieces: g.pieces[:n], done: gateway.Completion{
		FinishReason: reason, PromptTokens: len(req.Prompt), CompletionTokens: n,
	}}, nil
}

type instantStream struct {
	ctx    context.Context
	pieces []string
	i      int
	done   gateway.Completion
}

func (s *instantStream) Next() (string, bool) {
	if s.i >= len(s.pieces) || s.ctx.Err() != nil {
		return "", false
	}
	s.i++
	return s.pieces[s.i-1], true
}

func (s *instantStream) Wait() (gateway.Completion, error) {
	if err := s.ctx.Err(); err != nil {
		s.done.FinishReason = "cancelled"
		return s.done, err
	}
	return s.done, nil
}
