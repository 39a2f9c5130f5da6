package modelpool

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/parleyhq/parley/inference"
)

// InferenceFactory builds inference.Engines: Load reads a version with
// inference.LoadCheckpoint, which verifies the sha256 of every file and
// refuses a mismatch (inference.ErrChecksum), and its chat format with
// inference.LoadChatFormat (an imported model's chat template, else
// Parley's layout), and starts the engine's batching loop; Warmup decodes
// warmupTokens greedily after a one-line chat prompt, so that the first
// player does not pay for graph compilation;
// Close stops the engine.
// Each engine labels its metrics with the version it serves.
func InferenceFactory(backend inference.BackendConfig, engine inference.EngineConfig, warmupTokens int, log *slog.Logger) Factory[*inference.Engine] {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return Factory[*inference.Engine]{
		Load: func(ctx context.Context, version, dir string) (*inference.Engine, error) {
			m, tok, _, err := inference.LoadCheckpoint(dir, backend)
			if err != nil {
				return nil, err
			}
			chat, err := inference.LoadChatFormat(dir, tok)
			if err != nil {
				return nil, err
			}
			ec := engine
			ec.ModelVersion, ec.Chat = version, chat
			e, err := inference.NewEngine(m, tok, ec, log.With("version", version))
			if err != nil {
				return nil, fmt.Errorf("new engine for %s: %w", version, err)
			}
			e.Start() // Factory.Close closes the engine, which ends its Run
			return e, nil
		},
		Warmup: func(ctx context.Context, e *inference.Engine) error {
			prompt, err := e.Chat().Encode([]inference.Message{{Role: inference.RoleUser, Text: "Hello!"}}, true)
			if err != nil {
				return err
			}
			s, err := e.Generate(ctx, inference.Request{Prompt: prompt, MaxTokens: warmupTokens, Stop: []int{}})
			if err != nil {
				return err
			}
			_, err = s.Wait()
			return err
		},
		Close: func(e *inference.Engine) error { return e.Close() },
	}
}
