package gateway

import (
	"context"
	"errors"

	"github.com/parleyhq/parley/inference"
)

// Errors a Generator returns that the gateway answers specially.
var (
	// ErrOverloaded means the engine's queue is full: 429 with Retry-After.
	ErrOverloaded = errors.New("gateway: engine overloaded")
	// ErrUnavailable means no engine can serve now (closed, not loaded): 503.
	ErrUnavailable = errors.New("gateway: engine unavailable")
)

// GenerateRequest is what the gateway asks of the engine: a prompt in
// tokens and how to sample its continuation.
type GenerateRequest struct {
	Prompt      []int
	MaxTokens   int
	Temperature float32 // 0 is greedy
	TopK        int
	TopP        float32
	Stop        []int  // token ids that end the reply; they are not part of it
	Seed        uint64 // 0 is nondeterministic
}

// Completion is the outcome of a generation.
type Completion struct {
	FinishReason     string // "stop", "length" or "cancelled"
	PromptTokens     int
	CompletionTokens int
}

// TokenStream yields the text of a reply token by token.
type TokenStream interface {
	// Next blocks until the next token's text is ready; ok is false once
	// generation has finished. Text may hold a partial UTF-8 sequence.
	Next() (text string, ok bool)
	// Wait returns the outcome once Next has returned false.
	Wait() (Completion, error)
}

// Generator is the part of the inference engine the gateway calls
// (FromEngine adapts an *inference.Engine). Generate fails with an error
// wrapping ErrOverloaded or ErrUnavailable when the engine cannot take the
// request; cancelling ctx stops the generation. Chat is the model's chat
// format, which the gateway builds prompts and stop tokens with (its
// Tokenizer is Tokenizer's). MaxSeq is the model's context in tokens, prompt
// and reply together: the gateway drops the oldest exchanges of a
// conversation until its prompt fits.
type Generator interface {
	Generate(ctx context.Context, req GenerateRequest) (TokenStream, error)
	Tokenizer() *inference.Tokenizer
	Chat() *inference.ChatFormat
	MaxSeq() int
}
