package schema

import (
	"encoding/json"
	"fmt"
)

// StreamOptions are the options of a streaming chat completion.
type StreamOptions struct {
	// IncludeUsage adds a last chunk, before [DONE], with no choices and the
	// token usage of the completion.
	IncludeUsage bool `json:"include_usage,omitempty"`
}

// Unsupported holds the OpenAI chat parameters Parley does not implement.
// A request that sets one to anything but its default is refused with 400
// naming it, rather than answered as if it had not been sent.
type Unsupported struct {
	N                *int            `json:"n,omitempty" jsonschema:"description=Only 1 is supported"`
	Tools            json.RawMessage `json:"tools,omitempty" jsonschema:"description=Not supported; an empty list is accepted"`
	ToolChoice       json.RawMessage `json:"tool_choice,omitempty" jsonschema:"description=Not supported; none is accepted"`
	Functions        json.RawMessage `json:"functions,omitempty" jsonschema:"description=Not supported; an empty list is accepted"`
	FunctionCall     json.RawMessage `json:"function_call,omitempty" jsonschema:"description=Not supported; none is accepted"`
	ResponseFormat   json.RawMessage `json:"response_format,omitempty" jsonschema:"description=Only {\"type\":\"text\"} is supported"`
	Logprobs         *bool           `json:"logprobs,omitempty" jsonschema:"description=Only false is supported"`
	TopLogprobs      *int            `json:"top_logprobs,omitempty" jsonschema:"description=Not supported"`
	LogitBias        map[string]any  `json:"logit_bias,omitempty" jsonschema:"description=Not supported; an empty map is accepted"`
	PresencePenalty  *float64        `json:"presence_penalty,omitempty" jsonschema:"description=Only 0 is supported"`
	FrequencyPenalty *float64        `json:"frequency_penalty,omitempty" jsonschema:"description=Only 0 is supported"`
	Stop             json.RawMessage `json:"stop,omitempty" jsonschema:"description=Not supported; null or an empty list is accepted"`
	Modalities       []string        `json:"modalities,omitempty" jsonschema:"description=Only [\"text\"] is supported"`
	Audio            json.RawMessage `json:"audio,omitempty" jsonschema:"description=Not supported"`
	Prediction       json.RawMessage `json:"prediction,omitempty" jsonschema:"description=Not supported"`
}

// Validate names the first unsupported parameter set to anything but its default.
func (u Unsupported) Validate() error {
	empty := func(raw json.RawMessage, allowed ...string) bool {
		if len(raw) == 0 || string(raw) == "null" || string(raw) == "[]" {
			return true
		}
		for _, a := range allowed {
			if string(compactJSON(raw)) == a {
				return true
			}
		}
		return false
	}
	bad := ""
	switch {
	case u.N != nil && *u.N != 1:
		bad = fmt.Sprintf("n=%d (one choice only)", *u.N)
	case !empty(u.Tools):
		bad = "tools"
	case !empty(u.ToolChoice, `"none"`):
		bad = "tool_choice"
	case !empty(u.Functions):
		bad = "functions"
	case !empty(u.FunctionCall, `"none"`):
		bad = "function_call"
	case !empty(u.ResponseFormat, `{"type":"text"}`):
		bad = "response_format (text only)"
	case u.Logprobs != nil && *u.Logprobs:
		bad = "logprobs"
	case u.TopLogprobs != nil:
		bad = "top_logprobs"
	case len(u.LogitBias) > 0:
		bad = "logit_bias"
	case u.PresencePenalty != nil && *u.PresencePenalty != 0:
		bad = "presence_penalty (0 only)"
	case u.FrequencyPenalty != nil && *u.FrequencyPenalty != 0:
		bad = "frequency_penalty (0 only)"
	case !empty(u.Stop):
		bad = "stop"
	case len(u.Modalities) > 0 && (len(u.Modalities) != 1 || u.Modalities[0] != "text"):
		bad = "modalities (text only)"
	case !empty(u.Audio):
		bad = "audio"
	case !empty(u.Prediction):
		bad = "prediction"
	default:
		return nil
	}
	return fmt.Errorf("parameter %s is not supported by Parley", bad)
}

// compactJSON is raw without insignificant space (raw itself when invalid).
func compactJSON(raw json.RawMessage) []byte {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return raw
	}
	b, _ := json.Marshal(v)
	return b
}

// Model is one model a key may name, as OpenAI's GET /v1/models lists it.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ModelList answers GET /v1/models: the deployment, which lets its
// experiment choose the version, and each version it serves now.
type ModelList struct {
	Object string  `json:"object"` // "list"
	Data   []Model `json:"data"`
}
