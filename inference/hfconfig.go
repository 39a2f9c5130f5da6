package inference

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// ErrUnsupportedConfig is returned for a Hugging Face config.json that asks
// for something Parley does not implement.
var ErrUnsupportedConfig = errors.New("inference: unsupported model config")

// Architectures ReadHFConfig accepts (config.json's "architectures").
const (
	ArchLlama = "LlamaForCausalLM" // Llama 2/3, SmolLM2
	ArchQwen2 = "Qwen2ForCausalLM" // Qwen2, Qwen2.5
)

// hfConfig is the part of a Hugging Face config.json Parley reads. Pointers
// tell a missing field from a zero one, so the defaults of the
// architecture's transformers config class apply.
type hfConfig struct {
	Architectures     []string        `json:"architectures"`
	ModelType         string          `json:"model_type"`
	HiddenSize        int             `json:"hidden_size"`
	IntermediateSize  int             `json:"intermediate_size"`
	NumHiddenLayers   int             `json:"num_hidden_layers"`
	NumAttentionHeads int             `json:"num_attention_heads"`
	NumKeyValueHeads  *int            `json:"num_key_value_heads"`
	HeadDim           *int            `json:"head_dim"`
	VocabSize         int             `json:"vocab_size"`
	MaxPositions      *int            `json:"max_position_embeddings"`
	RMSNormEps        *float64        `json:"rms_norm_eps"`
	RopeTheta         *float64        `json:"rope_theta"`
	RopeScaling       json.RawMessage `json:"rope_scaling"`
	TieWordEmbeddings *bool           `json:"tie_word_embeddings"`
	HiddenAct         *string         `json:"hidden_act"`
	AttentionBias     *bool           `json:"attention_bias"`
	MLPBias           *bool           `json:"mlp_bias"`
	UseSlidingWindow  *bool           `json:"use_sliding_window"`
	TorchDType        *string         `json:"torch_dtype"`
	DType             *string         `json:"dtype"` // transformers ≥ 4.56 renamed torch_dtype
	Quantization      json.RawMessage `json:"quantization_config"`
}

// hfRopeScaling is config.json's rope_scaling; older files name the type
// "type".
type hfRopeScaling struct {
	RopeType       string  `json:"rope_type"`
	Type           string  `json:"type"`
	Factor         float64 `json:"factor"`
	LowFreqFactor  float64 `json:"low_freq_factor"`
	HighFreqFactor float64 `json:"high_freq_factor"`
	OriginalMaxPos int     `json:"original_max_position_embeddings"`
}

// ReadHFConfig reads a Hugging Face config.json (see ParseHFConfig).
func ReadHFConfig(path string) (ModelConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return ModelConfig{}, fmt.Errorf("read model config: %w", err)
	}
	c, err := ParseHFConfig(raw)
	if err != nil {
		return ModelConfig{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseHFConfig converts a Hugging Face config.json of a Llama
// (LlamaForCausalLM: Llama 2/3, SmolLM2) or Qwen2 (Qwen2ForCausalLM:
// Qwen2/2.5) checkpoint into a ModelConfig. A missing field takes the default
// of the transformers config class; a field asking for something Parley does
// not implement (another architecture, an activation other than silu, a
// sliding window, rope scaling other than llama3, biases beyond Qwen2's
// q/k/v, quantized weights) is refused with an error wrapping
// ErrUnsupportedConfig that names it. Parley's own checkpoints write a
// Llama config.json, so this reads them too.
func ParseHFConfig(raw []byte) (ModelConfig, error) {
	var h hfConfig
	if err := json.Unmarshal(raw, &h); err != nil {
		return ModelConfig{}, fmt.Errorf("parse model config: %w", err)
	}
	unsupported := func(format string, args ...any) (ModelConfig, error) {
		return ModelConfig{}, fmt.Errorf("model config: "+format+": %w", append(args, ErrUnsupportedConfig)...)
	}
	arch, err := h.architecture()
	if err != nil {
		return ModelConfig{}, err
	}
	if h.HiddenAct != nil && *h.HiddenAct != "silu" {
		return unsupported("hidden_act %q, only \"silu\" is implemented", *h.HiddenAct)
	}
	if h.MLPBias != nil && *h.MLPBias {
		return unsupported("mlp_bias true is not implemented")
	}
	if arch == ArchLlama && h.AttentionBias != nil && *h.AttentionBias {
		return unsupported("attention_bias true (Llama biases on q, k, v and o_proj) is not implemented")
	}
	if h.UseSlidingWindow != nil && *h.UseSlidingWindow {
		return unsupported("use_sliding_window true is not implemented")
	}
	if len(h.Quantization) > 0 && string(h.Quantization) != "null" {
		return unsupported("quantization_config: quantized weights are not implemented")
	}
	for _, dt := range []*string{h.TorchDType, h.DType} {
		if dt != nil && !slices.Contains([]string{"float32", "float16", "bfloat16"}, *dt) {
			return unsupported("dtype %q, want float32, float16 or bfloat16", *dt)
		}
	}
	c := ModelConfig{
		VocabSize: h.VocabSize,
		Dim:       h.HiddenSize,
		Layers:    h.NumHiddenLayers,
		Heads:     h.NumAttentionHeads,
		FFNDim:    h.IntermediateSize,
		QKVBias:   arch == ArchQwen2,
		// LlamaConfig and Qwen2Config default to untied embeddings.
		UntiedHead: h.TieWordEmbeddings == nil || !*h.TieWordEmbeddings,
	}
	c.MaxSeq = orDefault(h.MaxPositions, 2048)
	if arch == ArchQwen2 {
		c.MaxSeq = orDefault(h.MaxPositions, 32768)
	}
	c.RopeBase = orDefault(h.RopeTheta, 10000)
	c.NormEps = orDefault(h.RMSNormEps, 1e-6)
	if h.NumKeyValueHeads != nil && *h.NumKeyValueHeads != h.NumAttentionHeads {
		c.KVHeads = *h.NumKeyValueHeads
	}
	if h.HeadDim != nil && *h.HeadDim*h.NumAttentionHeads != h.HiddenSize {
		c.HeadSize = *h.HeadDim
	}
	if c.RopeScaling, err = parseRopeScaling(h.RopeScaling); err != nil {
		return ModelConfig{}, err
	}
	if err := c.Validate(); err != nil {
		return ModelConfig{}, err
	}
	return c, nil
}

// architecture returns the one architecture the config names.
func (h hfConfig) architecture() (string, error) {
	byType := map[string]string{"llama": ArchLlama, "qwen2": ArchQwen2}
	switch {
	case len(h.Architectures) > 1:
		return "", fmt.Errorf("model config: architectures %v, want exactly one: %w", h.Architectures, ErrUnsupportedConfig)
	case len(h.Architectures) == 1:
		a := h.Architectures[0]
		if a != ArchLlama && a != ArchQwen2 {
			return "", fmt.Errorf("model config: architecture %q, want %s or %s: %w", a, ArchLlama, ArchQwen2, ErrUnsupportedConfig)
		}
		if h.ModelType != "" && byType[h.ModelType] != a {
			return "", fmt.Errorf("model config: model_type %q does not match architecture %q: %w", h.ModelType, a, ErrUnsupportedConfig)
		}
		return a, nil
	}
	a, ok := byType[h.ModelType]
	if !ok {
		return "", fmt.Errorf("model config: no architectures and model_type %q, want llama or qwen2: %w", h.ModelType, ErrUnsupportedConfig)
	}
	return a, nil
}

// parseRopeScaling reads rope_scaling: null, absent or type "default"
// mean none, "llama3" is implemented, anything else is refused.
func parseRopeScaling(raw json.RawMessage) (*RopeScaling, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var r hfRopeScaling
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("model config: rope_scaling: %w", err)
	}
	typ := r.RopeType
	if typ == "" {
		typ = r.Type
	}
	switch strings.ToLower(typ) {
	case "default":
		return nil, nil
	case RopeTypeLlama3:
		return &RopeScaling{RopeType: RopeTypeLlama3, Factor: r.Factor, LowFreqFactor: r.LowFreqFactor,
			HighFreqFactor: r.HighFreqFactor, OriginalMaxPos: r.OriginalMaxPos}, nil
	default:
		return nil, fmt.Errorf("model config: rope_scaling rope_type %q, only %q is implemented: %w", typ, RopeTypeLlama3, ErrUnsupportedConfig)
	}
}

func orDefault[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
