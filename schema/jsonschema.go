package schema

import (
	"encoding/json"
	"fmt"

	"github.com/invopop/jsonschema"
)

// wireTypes lists every type whose JSON Schema is published in schema/jsonschema,
// by file name.
func wireTypes() map[string]any {
	return map[string]any{
		"session_event.json":            SessionEvent{},
		"create_session_request.json":   CreateSessionRequest{},
		"create_session_response.json":  CreateSessionResponse{},
		"end_session_request.json":      EndSessionRequest{},
		"message_request.json":          MessageRequest{},
		"message_response.json":         MessageResponse{},
		"session_view.json":             SessionView{},
		"error_body.json":               ErrorBody{},
		"chat_completion_request.json":  ChatCompletionRequest{},
		"chat_completion_response.json": ChatCompletionResponse{},
		"chat_completion_chunk.json":    ChatCompletionChunk{},
		"model_list.json":               ModelList{},
		"manifest.json":                 Manifest{},
		"rollout_state.json":            RolloutState{},
		"canary_request.json":           CanaryRequest{},
		"rollout_change.json":           RolloutChange{},
		"curves.json":                   Curves{},
		"dialogue.json":                 Dialogue{},
	}
}

// JSONSchemas returns the JSON Schema document of every wire type, keyed by
// the file name it is published under in schema/jsonschema.
func JSONSchemas() (map[string][]byte, error) {
	r := &jsonschema.Reflector{}
	out := make(map[string][]byte)
	for name, v := range wireTypes() {
		b, err := json.MarshalIndent(r.Reflect(v), "", "  ")
		if err != nil {
			return nil, fmt.Errorf("generate json schema %s: %w", name, err)
		}
		out[name] = append(b, '\n')
	}
	return out, nil
}
