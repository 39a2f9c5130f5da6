package inference

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// BenchmarkDecodeWeights times KV-cache decode steps of the Hugging Face
// checkpoint in $BENCH_HF_MODEL (skipped when unset) with the CPU
// decoder's matrices in float32 and in bfloat16, at batch 1, 8 and 32, at
// position 32 after a 32-token prefill. Besides tokens/s it reports the
// process CPU time per step, which other processes on a shared machine
// change far less than the wall clock; -count interleaves rounds:
//
//	BENCH_HF_MODEL=/tmp/qwen05b go test -run '^$' -bench DecodeWeights -benchtime 5x -count 3 ./inference
func BenchmarkDecodeWeights(b *testing.B) {
	dir := os.Getenv("BENCH_HF_MODEL")
	if dir == "" {
		b.Skip("BENCH_HF_MODEL names no checkpoint directory")
	}
	m, err := OpenHFModel(dir, DefaultBackendConfig())
	if err != nil {
		b.Fatal(err)
	}
	for _, w := range []DecodeWeights{DecodeWeightsF32, DecodeWeightsBF16} {
		for _, rows := range []int{1, 8, 32} {
			b.Run(fmt.Sprintf("%s/batch%d", w, rows), func(b *testing.B) {
				if err := m.SetDecodeWeights(w); err != nil {
					b.Fatal(err)
				}
				dec := newCPUDecoder(m)
				defer func() {
					dec.close()
					dec = nil
					runtime.GC() // one decoder's weights in memory at a time
				}()
				tps, cpu := timeDecodeSteps(b, dec, m.Config().VocabSize, rows, 32)
				b.ReportMetric(tps, "tokens/s")
				b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/step")
			})
		}
	}
}

// processCPU is the user and system CPU time of the process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
