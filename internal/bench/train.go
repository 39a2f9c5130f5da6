package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/parleyhq/parley/inference"
)

// DefaultCeilingTool is the shared script that prints the machine's
// OpenBLAS sgemm ceiling, relative to the repository root.
const DefaultCeilingTool = "../shared/tools/sgemm-ceiling"

// TrainConfig configures RunTrain.
type TrainConfig struct {
	// Sizes are the models trained, the default size first.
	Sizes   []inference.ModelConfig `json:"sizes"`
	Backend inference.BackendConfig `json:"backend"`
	// Batch sequences of Seq tokens per step.
	Batch int `json:"batch"`
	Seq   int `json:"seq"`
	// Rounds interleave the trainers and sizes; the report gives medians.
	Rounds int `json:"rounds"`
	// NativeSteps and GoMLXSteps are timed per round at the first size;
	// GoMLXLargerSteps at the others (GoMLX takes tens of seconds per step
	// there), 0 skipping GoMLX at the larger sizes.
	NativeSteps      int `json:"native_steps"`
	GoMLXSteps       int `json:"gomlx_steps"`
	GoMLXLargerSteps int `json:"gomlx_larger_steps"`
	// CeilingTool is the sgemm-ceiling script run once per round; where it
	// is missing the ceiling is the native gemm kernel's peak instead.
	CeilingTool string `json:"ceiling_tool"`
	Seed        uint64 `json:"seed"`
}

// DefaultTrainConfig trains the default model and ones of about 5M and 15M
// parameters on batches of 16×128 tokens, three rounds.
func DefaultTrainConfig() TrainConfig {
	c5, c15 := inference.DefaultModelConfig(), inference.DefaultModelConfig()
	c5.Dim, c5.Layers, c5.Heads, c5.FFNDim = 256, 6, 8, 768
	c15.Dim, c15.Layers, c15.Heads, c15.FFNDim = 384, 8, 6, 1152
	return TrainConfig{
		Sizes:            []inference.ModelConfig{inference.DefaultModelConfig(), c5, c15},
		Backend:          inference.DefaultBackendConfig(),
		Batch:            16,
		Seq:              128,
		Rounds:           3,
		NativeSteps:      3,
		GoMLXSteps:       2,
		GoMLXLargerSteps: 1,
		CeilingTool:      DefaultCeilingTool,
		Seed:             1,
	}
}

// Validate reports a configuration RunTrain cannot run.
func (c TrainConfig) Validate() error {
	switch {
	case len(c.Sizes) == 0:
		return errors.New("bench train: no model sizes")
	case c.Batch < 1 || c.Seq < 2:
		return fmt.Errorf("bench train: batch %d×%d too small", c.Batch, c.Seq)
	case c.Rounds < 1 || c.NativeSteps < 1 || c.GoMLXSteps < 0 || c.GoMLXLargerSteps < 0:
		return fmt.Errorf("bench train: %d rounds of %d native, %d/%d GoMLX steps", c.Rounds, c.NativeSteps, c.GoMLXSteps, c.GoMLXLargerSteps)
	}
	for _, m := range c.Sizes {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("bench train: %w", err)
		}
	}
	return nil
}

// TrainReport is what RunTrain measured: medians over the rounds.
type TrainReport struct {
	Batch      int `json:"batch"`
	Seq        int `json:"seq"`
	Rounds     int `json:"rounds"`
	GOMAXPROCS int `json:"gomaxprocs"`
	// CeilingGFLOPS is the median of the rounds' ceilings; CeilingSource
	// says whether it is OpenBLAS sgemm or the native kernel's peak.
	CeilingGFLOPS float64     `json:"ceiling_gflops"`
	CeilingSource string      `json:"ceiling_source"`
	Sizes         []TrainSize `json:"sizes"`
}

// TrainSize is one model size's figures. FLOP/s count 6 FLOPs per weight
// per token plus attention (3× ModelConfig.FLOPsPerToken).
type TrainSize struct {
	Model                inference.ModelConfig `json:"model"`
	Params               int                   `json:"params"`
	NativeTokensPerSec   float64               `json:"native_tokens_per_s"`
	NativeGFLOPS         float64               `json:"native_gflops"`
	NativeShareOfCeiling float64               `json:"native_share_of_ceiling"`
	NativeSteps          int                   `json:"native_steps"`
	GoMLXTokensPerSec    float64               `json:"gomlx_tokens_per_s"`
	GoMLXGFLOPS          float64               `json:"gomlx_gflops"`
	GoMLXShareOfCeiling  float64               `json:"gomlx_share_of_ceiling"`
	GoMLXSteps           int                   `json:"gomlx_steps"`
	NativeOverGoMLX      float64               `json:"native_over_gomlx"`
	PeakRSSMB            float64               `json:"peak_rss_mb"`
	GoMLXPeakRSSMB       float64               `json:"gomlx_peak_rss_mb"`
}

// trainer is one training path at one size.
type trainer struct {
	step  func(inference.Batch) (float32, error)
	close func()
}

// RunTrain times training steps of the native trainer and GoMLX's at every
// size in interleaved rounds, measures the matmul ceiling once per round
// and writes a table to w (if not nil).
func RunTrain(ctx context.Context, cfg TrainConfig, w io.Writer) (TrainReport, error) {
	if err := cfg.Validate(); err != nil {
		return TrainReport{}, err
	}
	rep := TrainReport{Batch: cfg.Batch, Seq: cfg.Seq, Rounds: cfg.Rounds, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0))
	type sizeRun struct {
		native, gomlx         *trainer
		batch                 inference.Batch
		flops                 float64
		nativeRate, gomlxRate []float64
		nativePeak, gomlxPeak float64
		gomlxSteps, tokens    int
	}
	runs := make([]*sizeRun, len(cfg.Sizes))
	defer func() {
		for _, r := range runs {
			if r == nil {
				continue
			}
			r.native.close()
			if r.gomlx != nil {
				r.gomlx.close()
			}
		}
	}()
	for i, mc := range cfg.Sizes {
		seq := min(cfg.Seq, mc.MaxSeq+1)
		r := &sizeRun{batch: randomBatch(rng, cfg.Batch, seq, mc.VocabSize), flops: trainStepFLOPs(mc, cfg.Batch, seq), tokens: cfg.Batch * (seq - 1)}
		r.gomlxSteps = cfg.GoMLXSteps
		if i > 0 {
			r.gomlxSteps = cfg.GoMLXLargerSteps
		}
		var err error
		if r.native, err = newBenchTrainer(mc, cfg.Backend, inference.TrainerNative); err != nil {
			return rep, err
		}
		runs[i] = r
		if r.gomlxSteps > 0 {
			if r.gomlx, err = newBenchTrainer(mc, cfg.Backend, inference.TrainerGoMLX); err != nil {
				return rep, err
			}
		}
		for _, t := range []*trainer{r.native, r.gomlx} { // warm up: GoMLX compiles here
			if t == nil {
				continue
			}
			if _, err := t.step(r.batch); err != nil {
				return rep, fmt.Errorf("bench train: %w", err)
			}
		}
	}
	var ceilings []float64
	for range cfg.Rounds {
		c, src, err := MeasureCeiling(ctx, cfg.CeilingTool)
		if err != nil {
			return rep, err
		}
		ceilings, rep.CeilingSource = append(ceilings, c), src
		for _, r := range runs {
			rate, peak, err := timeSteps(ctx, r.native, r.batch, cfg.NativeSteps)
			if err != nil {
				return rep, err
			}
			r.nativeRate, r.nativePeak = append(r.nativeRate, float64(r.tokens)/rate), max(r.nativePeak, peak)
			if r.gomlxSteps == 0 {
				continue
			}
			rate, peak, err = timeSteps(ctx, r.gomlx, r.batch, r.gomlxSteps)
			if err != nil {
				return rep, err
			}
			r.gomlxRate, r.gomlxPeak = append(r.gomlxRate, float64(r.tokens)/rate), max(r.gomlxPeak, peak)
		}
	}
	rep.CeilingGFLOPS = median(ceilings) / 1e9
	for i, r := range runs {
		mc := cfg.Sizes[i]
		s := TrainSize{Model: mc, Params: mc.Params(), NativeTokensPerSec: median(r.nativeRate), NativeSteps: cfg.NativeSteps,
			GoMLXTokensPerSec: median(r.gomlxRate), GoMLXSteps: r.gomlxSteps, PeakRSSMB: r.nativePeak, GoMLXPeakRSSMB: r.gomlxPeak}
		perToken := r.flops / float64(r.tokens) / 1e9
		s.NativeGFLOPS, s.GoMLXGFLOPS = s.NativeTokensPerSec*perToken, s.GoMLXTokensPerSec*perToken
		s.NativeShareOfCeiling, s.GoMLXShareOfCeiling = s.NativeGFLOPS/rep.CeilingGFLOPS, s.GoMLXGFLOPS/rep.CeilingGFLOPS
		if s.GoMLXTokensPerSec > 0 {
			s.NativeOverGoMLX = s.NativeTokensPerSec / s.GoMLXTokensPerSec
		}
		rep.Sizes = append(rep.Sizes, s)
	}
	printTrain(w, rep)
	return rep, nil
}

// newBenchTrainer is a trainer of path (inference.TrainerNative or
// TrainerGoMLX) on a fresh random model of mc, seed 1.
func newBenchTrainer(mc inference.ModelConfig, b inference.BackendConfig, path string) (*trainer, error) {
	m, err := inference.NewModel(mc, b, 1)
	if err != nil {
		return nil, fmt.Errorf("bench train: model: %w", err)
	}
	if path == inference.TrainerNative {
		tr, err := inference.NewNativeTrainer(m, inference.DefaultTrainConfig())
		if err != nil {
			return nil, fmt.Errorf("bench train: %w", err)
		}
		return &trainer{step: tr.Step, close: tr.Close}, nil
	}
	tr, err := inference.NewTrainer(m, inference.DefaultTrainConfig())
	if err != nil {
		return nil, fmt.Errorf("bench train: %w", err)
	}
	return &trainer{step: tr.Step, close: func() {}}, nil
}

// randomBatch is batch sequences of seq random tokens below vocab.
func randomBatch(rng *rand.Rand, batch, seq, vocab int) inference.Batch {
	b := inference.Batch{Tokens: make([][]int, batch)}
	for i := range b.Tokens {
		b.Tokens[i] = make([]int, seq)
		for j := range b.Tokens[i] {
			b.Tokens[i][j] = rng.IntN(vocab)
		}
	}
	return b
}

// trainStepFLOPs is the FLOPs of one training step on batch sequences of
// seq tokens: forward and backward (3×) at every context length.
func trainStepFLOPs(mc inference.ModelConfig, batch, seq int) float64 {
	flops := 0.0
	for c := range seq - 1 {
		flops += 3 * mc.FLOPsPerToken(c+1) * float64(batch)
	}
	return flops
}

// timeSteps runs steps steps of t on b and returns the seconds per step
// and the process's peak RSS in MB while they ran (since the peak was
// reset, where Linux allows that; else the peak of the process so far).
func timeSteps(ctx context.Context, t *trainer, b inference.Batch, steps int) (float64, float64, error) {
	resetPeakRSS()
	start := time.Now()
	for range steps {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		if _, err := t.step(b); err != nil {
			return 0, 0, fmt.Errorf("bench train: %w", err)
		}
	}
	return time.Since(start).Seconds() / float64(steps), procStatusMB("self", "VmHWM"), nil
}

// resetPeakRSS resets the kernel's record of this process's peak RSS
// (VmHWM); it does nothing where /proc/self/clear_refs is not writable.
func resetPeakRSS() {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// MeasureCeiling returns the machine's float32 matmul ceiling in FLOP/s and
// where it comes from: OpenBLAS sgemm on all cores, as printed by tool (the
// shared sgemm-ceiling script), when tool exists, or else the peak of the
// native trainer's gemm kernel on a 1024² product ("native-avx512", …).
func MeasureCeiling(ctx context.Context, tool string) (float64, string, error) {
	if tool != "" {
		if _, err := os.Stat(tool); err == nil {
			out, err := exec.CommandContext(ctx, tool).Output()
			if err != nil {
				return 0, "", fmt.Errorf("bench ceiling: %s: %w", tool, err)
			}
			var r struct {
				GFLOPS  float64 `json:"sgemm_gflops"`
				Library string  `json:"library"`
			}
			if err := json.Unmarshal(out, &r); err != nil || r.GFLOPS <= 0 {
				return 0, "", fmt.Errorf("bench ceiling: %s printed %q: %v", tool, out, err)
			}
			return r.GFLOPS * 1e9, r.Library + "-sgemm", nil
		}
	}
	flops, kernel := inference.KernelGemmFLOPS(1024, 3)
	return flops, "native-" + kernel, nil
}

// median is the median of xs, 0 if there are none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func printTrain(w io.Writer, r TrainReport) {
	if w == nil {
		return
	}
	fmt.Fprintf(w, "batch %d×%d tokens, %d interleaved rounds (medians), GOMAXPROCS %d; ceiling %.0f GFLOP/s (%s)\n\n",
		r.Batch, r.Seq, r.Rounds, r.GOMAXPROCS, r.CeilingGFLOPS, r.CeilingSource)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "params\tnative tok/s\tGFLOP/s\tshare\tGoMLX tok/s\tGFLOP/s\tshare\tnative/GoMLX\tpeak RSS MB\tGoMLX steps/round\t")
	for _, s := range r.Sizes {
		fmt.Fprintf(tw, "%.2fM\t%.0f\t%.1f\t%.1f %%\t%.0f\t%.1f\t%.1f %%\t%.1f×\t%.0f\t%d\t\n", float64(s.Params)/1e6,
			s.NativeTokensPerSec, s.NativeGFLOPS, 100*s.NativeShareOfCeiling,
			s.GoMLXTokensPerSec, s.GoMLXGFLOPS, 100*s.GoMLXShareOfCeiling, s.NativeOverGoMLX, s.PeakRSSMB, s.GoMLXSteps)
	}
	_ = tw.Flush()
}
