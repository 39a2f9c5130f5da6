package inference

import (
	"maps"
	"slices"
	"testing"
)

// openWeightsTrainConfigs are scaled-down shapes of the open-weight
// families, with sizes that are not multiples of the kernels' blocks.
func openWeightsTrainConfigs() map[string]ModelConfig {
	return map[string]ModelConfig{
		// Qwen2: grouped-query attention, q/k/v biases, untied head.
		"qwen2": {VocabSize: 101, Dim: 40, Layers: 2, Heads: 4, KVHeads: 2, FFNDim: 56, MaxSeq: 64,
			RopeBase: 1e6, NormEps: 1e-6, QKVBias: true, UntiedHead: true},
		// Llama 3: grouped-query attention, head dim ≠ dim/heads, rope
		// scaling whose smoothed and stretched bands both occur, tied.
		"llama3": {VocabSize: 97, Dim: 36, Layers: 2, Heads: 6, KVHeads: 2, HeadSize: 10, FFNDim: 60, MaxSeq: 64,
			RopeBase: 500000, NormEps: 1e-5,
			RopeScaling: &RopeScaling{RopeType: RopeTypeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPos: 16}},
		// SmolLM2: the Llama layout, 3 query heads per key/value head, tied.
		"smollm2": {VocabSize: 75, Dim: 36, Layers: 2, Heads: 9, KVHeads: 3, FFNDim: 50, MaxSeq: 64,
			RopeBase: 100000, NormEps: 1e-5},
	}
}

// TestOpenWeightsNativeGradientsMatchGoMLX checks every weight's gradient of
// the native trainer against GoMLX's autodiff on the open-weight shapes,
// with padded batches, a loss mask and negative weights, on every
// micro-kernel this CPU runs.
func TestOpenWeightsNativeGradientsMatchGoMLX(t *testing.T) {
	configs := openWeightsTrainConfigs()
	defer func(k microKernel) { trainKernel = k }(trainKernel)
	for _, kern := range trainKernels {
		trainKernel = kern
		for _, name := range slices.Sorted(maps.Keys(configs)) {
			t.Run(kern.name+"/"+name, func(t *testing.T) {
				checkNativeGradients(t, configs[name], uint64(len(name)))
			})
		}
	}
}

// TestOpenWeightsNativeStepsMatchGoMLX trains two copies of each open-weight
// shape, one with each trainer, on the same masked batches: the losses agree
// step by step.
func TestOpenWeightsNativeStepsMatchGoMLX(t *testing.T) {
	configs := openWeightsTrainConfigs()
	for _, name := range slices.Sorted(maps.Keys(configs)) {
		t.Run(name, func(t *testing.T) {
			m, err := NewModel(configs[name], DefaultBackendConfig(), 21)
			if err != nil {
				t.Fatal(err)
			}
			cfg := DefaultTrainConfig()
			cfg.LearningRate, cfg.WarmupSteps, cfg.Schedule, cfg.TotalSteps = 3e-3, 2, "cosine", 10
			checkNativeStepsMatch(t, m, cfg, 6)
		})
	}
}

// TestOpenWeightsNativeCheckpointServes round-trips a natively trained
// Qwen2-shaped checkpoint between the native trainer, GoMLX and the CPU
// decoder.
func TestOpenWeightsNativeCheckpointServes(t *testing.T) {
	checkNativeCheckpointRoundTrip(t, openWeightsTrainConfigs()["qwen2"])
}

// BenchmarkOpenWeightsTrainStep times a training step of a Qwen2-shaped
// model (d 256, 4 layers, 8 heads over 2 key/value heads, biases, untied
// head, vocabulary 4096, ≈5M weights) on 8×128 tokens with each trainer.
func BenchmarkOpenWeightsTrainStep(b *testing.B) {
	c := ModelConfig{VocabSize: 4096, Dim: 256, Layers: 4, Heads: 8, KVHeads: 2, FFNDim: 768, MaxSeq: 256,
		RopeBase: 1e6, NormEps: 1e-6, QKVBias: true, UntiedHead: true}
	batch := randomBatch(8, 128, c.VocabSize)
	b.Run("trainer=native", func(b *testing.B) {
		m, err := NewModel(c, DefaultBackendConfig(), 1)
		if err != nil {
			b.Fatal(err)
		}
		tr, err := NewNativeTrainer(m, DefaultTrainConfig())
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		benchTrainStepOn(b, c, batch, tr.Step)
	})
	b.Run("trainer=gomlx", func(b *testing.B) {
		m, err := NewModel(c, DefaultBackendConfig(), 1)
		if err != nil {
			b.Fatal(err)
		}
		tr, err := NewTrainer(m, DefaultTrainConfig())
		if err != nil {
			b.Fatal(err)
		}
		benchTrainStepOn(b, c, batch, tr.Step)
	})
}
