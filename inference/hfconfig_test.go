package inference

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// qwen25Config is Qwen2.5-0.5B-Instruct's config.json.
const qwen25Config = `{
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 21,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
}`

// llama32Config is Llama-3.2-1B-Instruct's config.json.
const llama32Config = `{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
}`

// smollm2Config is SmolLM2-135M-Instruct's config.json.
const smollm2Config = `{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 576,
  "initializer_range": 0.041666666666666664,
  "intermediate_size": 1536,
  "is_llama_config": true,
  "max_position_embeddings": 8192,
  "model_type": "llama",
  "num_attention_heads": 9,
  "num_hidden_layers": 30,
  "num_key_value_heads": 3,
  "pad_token_id": 2,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_interleaved": false,
  "rope_scaling": null,
  "rope_theta": 100000,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.42.3",
  "use_cache": true,
  "vocab_size": 49152
}`

func TestOpenWeightsConfigFamilies(t *testing.T) {
	tests := []struct {
		name, raw string
		want      ModelConfig
		params    int
	}{
		{"qwen2.5-0.5b", qwen25Config, ModelConfig{
			VocabSize: 151936, Dim: 896, Layers: 24, Heads: 14, FFNDim: 4864, MaxSeq: 32768,
			RopeBase: 1e6, NormEps: 1e-6, KVHeads: 2, QKVBias: true,
		}, 494032768},
		{"llama-3.2-1b", llama32Config, ModelConfig{
			VocabSize: 128256, Dim: 2048, Layers: 16, Heads: 32, FFNDim: 8192, MaxSeq: 131072,
			RopeBase: 500000, NormEps: 1e-5, KVHeads: 8,
			RopeScaling: &RopeScaling{RopeType: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPos: 8192},
		}, 1235814400},
		{"smollm2-135m", smollm2Config, ModelConfig{
			VocabSize: 49152, Dim: 576, Layers: 30, Heads: 9, FFNDim: 1536, MaxSeq: 8192,
			RopeBase: 100000, NormEps: 1e-5, KVHeads: 3,
		}, 134515008},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHFConfig([]byte(tc.raw))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseHFConfig =\n%+v\nwant\n%+v", got, tc.want)
			}
			// The published parameter counts of these models.
			if got.Params() != tc.params {
				t.Errorf("Params() = %d; want %d", got.Params(), tc.params)
			}
		})
	}
}

// TestOpenWeightsConfigRefusals checks that each unsupported field is
// refused with an error naming it.
func TestOpenWeightsConfigRefusals(t *testing.T) {
	tests := []struct{ name, from, to, mention string }{
		{"architecture", `"LlamaForCausalLM"`, `"MistralForCausalLM"`, "MistralForCausalLM"},
		{"activation", `"hidden_act": "silu"`, `"hidden_act": "gelu"`, "hidden_act"},
		{"rope yarn", `"rope_type": "llama3"`, `"rope_type": "yarn"`, "yarn"},
		{"llama attention bias", `"attention_bias": false`, `"attention_bias": true`, "attention_bias"},
		{"mlp bias", `"mlp_bias": false`, `"mlp_bias": true`, "mlp_bias"},
		{"dtype", `"torch_dtype": "bfloat16"`, `"torch_dtype": "float8_e4m3fn"`, "float8_e4m3fn"},
		{"quantized", `"use_cache": true`, `"use_cache": true, "quantization_config": {"quant_method": "gptq"}`, "quantization_config"},
		{"model type mismatch", `"model_type": "llama"`, `"model_type": "qwen2"`, "model_type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := strings.Replace(llama32Config, tc.from, tc.to, 1)
			if raw == llama32Config {
				t.Fatalf("%q not in the config", tc.from)
			}
			_, err := ParseHFConfig([]byte(raw))
			if !errors.Is(err, ErrUnsupportedConfig) || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("ParseHFConfig = %v; want ErrUnsupportedConfig naming %q", err, tc.mention)
			}
		})
	}
	raw := strings.Replace(qwen25Config, `"use_sliding_window": false`, `"use_sliding_window": true`, 1)
	if _, err := ParseHFConfig([]byte(raw)); !errors.Is(err, ErrUnsupportedConfig) || !strings.Contains(err.Error(), "use_sliding_window") {
		t.Fatalf("sliding window: %v; want ErrUnsupportedConfig naming use_sliding_window", err)
	}
	raw = strings.Replace(qwen25Config, `"num_key_value_heads": 2`, `"num_key_value_heads": 3`, 1)
	if _, err := ParseHFConfig([]byte(raw)); err == nil || !strings.Contains(err.Error(), "key/value heads 3") {
		t.Fatalf("14 heads over 3 key/value heads: %v; want an error", err)
	}
}

// TestOpenWeightsConfigOwnCheckpoint checks that Parley's own config.json
// reads back as the config it was written from.
func TestOpenWeightsConfigOwnCheckpoint(t *testing.T) {
	dir, m, _ := saveTiny(t)
	got, err := ReadHFConfig(dir + "/" + ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m.Config()) {
		t.Fatalf("ReadHFConfig = %+v; want %+v", got, m.Config())
	}
}
