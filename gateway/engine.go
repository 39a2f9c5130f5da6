package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/parleyhq/parley/inference"
)

var _ Generator = engineGenerator{}

// FromEngine serves replies from an inference engine. The engine's Run must
// be running; its ErrQueueFull becomes ErrOverloaded (429) and ErrClosed
// ErrUnavailable (503).
func FromEngine(e *inference.Engine) Generator { return engineGenerator{e: e} }

// engineGenerator adapts *inference.Engine, whose Stream a stub could not
// build, to Generator.
type engineGenerator struct{ e *inference.Engine }

func (g engineGenerator) Tokenizer() *inference.Tokenizer { return g.e.Tokenizer() }

func (g engineGenerator) Chat() *inference.ChatFormat { return g.e.Chat() }

func (g engineGenerator) MaxSeq() int { return g.e.MaxSeq() }

func (g engineGenerator) Generate(ctx context.Context, req GenerateRequest) (TokenStream, error) {
	st, err := g.e.Generate(ctx, inference.Request{
		Prompt: req.Prompt, MaxTokens: req.MaxTokens, Temperature: req.Temperature,
		TopK: req.TopK, TopP: req.TopP, Stop: req.Stop, Seed: req.Seed,
	})
	if err != nil {
		return nil, engineError(err)
	}
	return engineStream{st}, nil
}

func engineError(err error) error {
	switch {
	case errors.Is(err, inference.ErrQueueFull):
		return fmt.Errorf("%w: %w", ErrOverloaded, err)
	case errors.Is(err, inference.ErrClosed):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case errors.Is(err, inference.ErrTooLong):
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	return err
}

type engineStream struct{ st *inference.Stream }

func (s engineStream) Next() (string, bool) {
	t, ok := <-s.st.Tokens()
	return t.Text, ok
}

func (s engineStream) Wait() (Completion, error) {
	res, err := s.st.Wait()
	c := Completion{FinishReason: res.FinishReason, PromptTokens: res.PromptTokens, CompletionTokens: len(res.Tokens)}
	if err != nil {
		return c, engineError(err)
	}
	return c, nil
}
