package inference

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// BenchmarkDecodeStep times one KV-cache decode step of the default model
// at position 64 of a 128-position cache filled by a prefill of random
// prompts (the shape of parley bench inference), at several batch sizes,
// on each decoder, with the process's CPU time per step (both cores'),
// which a shared machine's load changes far less than the wall clock:
// go test -run '^$' -bench DecodeStep ./inference
func BenchmarkDecodeStep(b *testing.B) {
	bc := DefaultBackendConfig()
	bc.Options = os.Getenv("BENCH_GO_OPTS")
	m, err := NewModel(DefaultModelConfig(), bc, 1)
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{DecoderCPU, DecoderGoMLX} {
		for _, rows := range []int{1, 8, 32, 64} {
			b.Run(fmt.Sprintf("%s/batch%d", name, rows), func(b *testing.B) {
				dec := newDecoder(m, name, 0)
				defer dec.close()
				tps, cpu := timeDecodeSteps(b, dec, m.Config().VocabSize, rows, 64)
				b.ReportMetric(tps, "tokens/s")
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/step")
				b.ReportMetric(tps*DefaultModelConfig().FLOPsPerToken(65)/265e9*100, "%sgemm")
			})
		}
	}
}

// timeDecodeSteps prefills rows deterministic prompts of prompt tokens
// into dec's cache of 2·prompt positions, takes one untimed step, then
// times b.N steps at position prompt: tokens/s and the process's CPU time
// over them.
func timeDecodeSteps(b *testing.B, dec decoder, vocab, rows, prompt int) (float64, time.Duration) {
	src, ids, prompts := make([]int, rows), make([]int, rows), make([][]int, rows)
	for i := range rows {
		src[i], ids[i], prompts[i] = -1, i, make([]int, prompt)
		for j := range prompts[i] {
			prompts[i][j] = (7 + 31*i + 17*j) % vocab
		}
	}
	if err := dec.resize(src, rows, 2*prompt); err != nil {
		b.Fatal(err)
	}
	if _, _, err := dec.prefill(ids, prompts); err != nil {
		b.Fatal(err)
	}
	toks, pos, active := make([]int32, rows), make([]int32, rows), make([]bool, rows)
	for i := range pos {
		pos[i], active[i] = int32(prompt), true
	}
	if _, err := dec.step(toks, pos, active); err != nil {
		b.Fatal(err)
	}
	cpu0 := processCPU()
	b.ResetTimer()
	for range b.N {
		if _, err := dec.step(toks, pos, active); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	return float64(rows*b.N) / b.Elapsed().Seconds(), processCPU() - cpu0
}

// BenchmarkTrainStep times one AdamW step of the default model with the
// GoMLX trainer on benchBatch's 16×128 tokens, beside BenchmarkNativeTrainStep:
// go test -run - -bench TrainStep -benchtime 3x ./inference
func BenchmarkTrainStep(b *testing.B) {
	m, err := NewModel(DefaultModelConfig(), DefaultBackendConfig(), 1)
	if err != nil {
		b.Fatal(err)
	}
	tr, err := NewTrainer(m, DefaultTrainConfig())
	if err != nil {
		b.Fatal(err)
	}
	benchTrainStep(b, m.Config(), tr.Step)
}
