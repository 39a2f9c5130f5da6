package inference

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestRunBenchTiny(t *testing.T) {
	cfg := DefaultBenchConfig()
	cfg.Model = tinyConfig()
	cfg.Model.VocabSize = 512
	cfg.Model.MaxSeq = 64
	cfg.Batches = []int{1, 4}
	cfg.PromptTokens, cfg.DecodeTokens, cfg.NaiveTokens = 8, 8, 4
	cfg.TrainBatch, cfg.TrainSeq, cfg.TrainSteps = 2, 16, 1
	cfg.MinDecodeSeconds = 0
	var out bytes.Buffer
	rep, err := RunBench(context.Background(), cfg, &out)
	if err != nil {
		t.Fatalf("RunBench: %v", err)
	}
	if len(rep.Decode) != 2 || rep.Decode[1].Batch != 4 {
		t.Fatalf("decode rows = %+v; want batches 1 and 4", rep.Decode)
	}
	for _, d := range rep.Decode {
		if !(d.TokensPerSec > 0 && d.FLOPS > 0 && d.Fraction > 0 && d.Fraction < 1) {
			t.Errorf("decode batch %d: %+v; want positive rates and a fraction below 1", d.Batch, d)
		}
	}
	if rep.NaiveTokensPerSec <= 0 || rep.TTFTMillis <= 0 || rep.Train == nil || rep.Train.TokensPerSec <= 0 {
		t.Errorf("report %+v: want naive, TTFT and train figures", rep)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Errorf("json.Marshal(report): %v", err)
	}
	if !strings.Contains(out.String(), "decode batch 4") {
		t.Errorf("table lacks the batch-4 row:\n%s", out.String())
	}
	if len(rep.Decoders) != 2 || rep.Decoders[0].Decoder != DecoderCPU || rep.Decoders[1].Decoder != DecoderGoMLX || rep.Decoder != DecoderCPU {
		t.Fatalf("decoder runs = %+v; want cpu (headline) then gomlx", rep.Decoders)
	}
	for _, run := range rep.Decoders {
		if len(run.Decode) != 2 || len(run.HeadlineSpeedup) != 2 || !(run.HeadlineSpeedup[0] > 0) || run.TTFTMillis <= 0 {
			t.Errorf("decoder %s: %+v; want two decode rows, speedups and a TTFT", run.Decoder, run)
		}
	}
	if !strings.Contains(out.String(), "decoders compared") || !strings.Contains(out.String(), DecoderGoMLX) {
		t.Errorf("table lacks the decoder comparison:\n%s", out.String())
	}
}

// BenchmarkDecodeStep times one KV-cache decode step of the default model
// with 128 cached positions at several batch sizes, on each decoder:
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
				dec := newDecoder(m, name)
				defer dec.close()
				if err := dec.resize(make([]int, rows), rows, 128); err != nil {
					b.Fatal(err)
				}
				toks, pos, active := make([]int32, rows), make([]int32, rows), make([]bool, rows)
				for i := range pos {
					pos[i], active[i] = 64, true
				}
				if _, err := dec.step(toks, pos, active); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for range b.N {
					if _, err := dec.step(toks, pos, active); err != nil {
						b.Fatal(err)
					}
				}
				tps := float64(rows*b.N) / b.Elapsed().Seconds()
				b.ReportMetric(tps, "tokens/s")
				b.ReportMetric(tps*DefaultModelConfig().FLOPsPerToken(65)/265e9*100, "%sgemm")
			})
		}
	}
}

// BenchmarkTrainStep times one AdamW step of the default model on 16×128
// tokens: go test -run - -bench TrainStep -benchtime 3x ./inference
func BenchmarkTrainStep(b *testing.B) {
	m, err := NewModel(DefaultModelConfig(), DefaultBackendConfig(), 1)
	if err != nil {
		b.Fatal(err)
	}
	tr, err := NewTrainer(m, DefaultTrainConfig())
	if err != nil {
		b.Fatal(err)
	}
	batch := Batch{Tokens: make([][]int, 16)}
	for i := range batch.Tokens {
		batch.Tokens[i] = repeatedText(129)
	}
	if _, err := tr.Step(batch); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := tr.Step(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(16*128*b.N)/b.Elapsed().Seconds(), "tokens/s")
}
