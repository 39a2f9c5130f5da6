package rl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/parleyhq/parley/inference"
)

// refScope is the context scope of the frozen reference policy's weights.
const refScope = "rl_ref"

// UpdateConfig configures the policy update of one RL step.
type UpdateConfig struct {
	// Epsilon clips the ratio to [1−ε, 1+ε].
	Epsilon float64 `json:"epsilon"`
	// Beta weighs the k3 KL estimate against the reference policy.
	Beta float64 `json:"beta"`
	// SequenceLevel switches to GSPO: one length-normalised ratio
	// exp(mean_t log π_θ/π_θold) per sequence, clipped per sequence.
	SequenceLevel bool `json:"sequence_level"`
	// MiniBatch is the number of sequences per gradient step; a step's
	// samples are shuffled and cut into minibatches, all scored against the
	// log-probs of the policy as it was before the first of them.
	MiniBatch int `json:"mini_batch"`
	// Train is the optimiser (AdamW): learning rate, clipping, decay.
	Train inference.TrainConfig `json:"train"`
	// Trainer is "native" (the CPU trainer), "gomlx" (GoMLX's graph), or
	// empty: native on the "go" backend, gomlx on "xla".
	Trainer string `json:"trainer,omitempty"`
	// Temperature is the policy's sampling temperature: ratios and KL use
	// log-probs at it, log softmax(z/T), the distribution the rollouts
	// were sampled from (before top-k). 0 or 1 scores at T = 1.
	Temperature float64 `json:"temperature"`
}

// DefaultUpdateConfig returns the paper's update: ε=0.2, β=0.01, AdamW at
// 1e-5, constant after no warm-up, log-probs at the default sampling
// temperature 0.7.
func DefaultUpdateConfig() UpdateConfig {
	tc := inference.DefaultTrainConfig()
	tc.LearningRate = 1e-5
	tc.WarmupSteps = 0
	tc.Schedule = "constant"
	tc.WeightDecay = 0.01
	return UpdateConfig{Epsilon: 0.2, Beta: 0.01, MiniBatch: 64, Train: tc,
		Temperature: float64(inference.DefaultSampling().Temperature)}
}

// Validate reports the first bad field.
func (c UpdateConfig) Validate() error {
	switch {
	case c.Epsilon <= 0 || c.Epsilon >= 1:
		return fmt.Errorf("update config: epsilon %g must be in (0, 1)", c.Epsilon)
	case c.Beta < 0:
		return fmt.Errorf("update config: beta %g is negative", c.Beta)
	case c.MiniBatch < 1:
		return fmt.Errorf("update config: mini batch %d must be positive", c.MiniBatch)
	case c.Temperature < 0 || math.IsNaN(c.Temperature):
		return fmt.Errorf("update config: temperature %g must not be negative", c.Temperature)
	}
	if err := c.Train.Validate(); err != nil {
		return fmt.Errorf("update config: %w", err)
	}
	if _, err := inference.ResolveTrainer(c.Trainer, inference.DefaultBackendConfig()); err != nil {
		return fmt.Errorf("update config: %w", err)
	}
	return nil
}

// Sample is one trained sequence: a prompt, the NPC turn sampled after it
// and the turn's advantage.
type Sample struct {
	Prompt    []int
	Tokens    []int
	Advantage float64
}

// UpdateStats summarise one Update.
type UpdateStats struct {
	// Loss is the mean minibatch loss.
	Loss float64
	// KL is the mean per-token k3 estimate of KL(π_θ‖π_ref) before the update.
	KL float64
	// GradSteps is the number of optimiser steps taken.
	GradSteps int
	// Tokens is the number of trained (response) tokens.
	Tokens int
}

// ErrNoSamples is returned by Update for an empty batch.
var ErrNoSamples = errors.New("rl: no samples to train on")

// Updater applies the clipped-surrogate update with a k3 KL penalty to a
// model's weights in place, with the native trainer (native, scoring the
// reference policy with refNative on a frozen copy of the model) or with
// GoMLX's graph (tr, scoring with score). It is not safe for concurrent use.
type Updater struct {
	m     *inference.Model
	tr    *inference.Trainer
	cfg   UpdateConfig
	score *mlctx.Exec
	mu    sync.Mutex

	native, refNative *inference.NativeTrainer
}

// NewUpdater freezes the model's current weights as the reference policy
// and prepares AdamW.
func NewUpdater(m *inference.Model, cfg UpdateConfig) (*Updater, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	kind, err := inference.ResolveTrainer(cfg.Trainer, m.BackendConfig())
	if err != nil {
		return nil, fmt.Errorf("new updater: %w", err)
	}
	if kind == inference.TrainerNative {
		return newNativeUpdater(m, cfg)
	}
	if _, err := m.CloneWeights(refScope); err != nil {
		return nil, fmt.Errorf("new updater: %w", err)
	}
	if err := scaleLogits(m.Context(), "/"+refScope, 1/cfg.temperature()); err != nil {
		return nil, fmt.Errorf("new updater: %w", err)
	}
	tr, err := inference.NewTrainer(m, cfg.Train)
	if err != nil {
		return nil, fmt.Errorf("new updater: %w", err)
	}
	score, err := mlctx.NewExecAny(m.Backend(), m.Context(), func(ctx *mlctx.Context, in, tg *graph.Node) (*graph.Node, *graph.Node) {
		return m.TokenLogProbs(ctx, in, tg), m.TokenLogProbs(ctx.InAbsPath("/"+refScope), in, tg)
	})
	if err != nil {
		return nil, fmt.Errorf("new updater: build scoring graph: %w", err)
	}
	score.SetMaxCache(256)
	return &Updater{m: m, tr: tr, cfg: cfg, score: score}, nil
}

// newNativeUpdater freezes a copy of the model as the reference policy and
// prepares the native trainer.
func newNativeUpdater(m *inference.Model, cfg UpdateConfig) (*Updater, error) {
	ref, err := m.Clone()
	if err != nil {
		return nil, fmt.Errorf("new updater: freeze the reference policy: %w", err)
	}
	if err := scaleLogits(ref.Context(), "", 1/cfg.temperature()); err != nil {
		return nil, fmt.Errorf("new updater: %w", err)
	}
	refNative, err := inference.NewNativeTrainer(ref, cfg.Train)
	if err != nil {
		return nil, fmt.Errorf("new updater: %w", err)
	}
	native, err := inference.NewNativeTrainer(m, cfg.Train)
	if err != nil {
		refNative.Close()
		return nil, fmt.Errorf("new updater: %w", err)
	}
	return &Updater{m: m, cfg: cfg, native: native, refNative: refNative}, nil
}

// Close stops the native trainer's goroutines; the Updater is not used
// after.
func (u *Updater) Close() {
	if u.native != nil {
		u.native.Close()
		u.refNative.Close()
	}
}

// Config returns the update configuration.
func (u *Updater) Config() UpdateConfig { return u.cfg }

// temperature is the temperature log-probs are taken at: Temperature, or 1
// when it is 0.
func (c UpdateConfig) temperature() float64 {
	if c.Temperature == 0 {
		return 1
	}
	return c.Temperature
}

// scaleLogits multiplies the final norm's gain of the weights under scope
// ("" for the live model) by factor. The LM head has no bias and nothing
// follows the norm, so every logit is multiplied by factor: with 1/T the
// model's log-probs become those of its logits at temperature T.
func scaleLogits(ctx *mlctx.Context, scope string, factor float64) error {
	if factor == 1 {
		return nil
	}
	v := ctx.GetVariableByScopeAndName(scope+"/model/norm", "weight")
	if v == nil {
		return fmt.Errorf("scale logits: no final norm under %q", scope)
	}
	t, err := v.Value()
	if err != nil {
		return fmt.Errorf("scale logits: %w", err)
	}
	w, err := tensors.CopyFlatData[float32](t)
	if err != nil {
		return fmt.Errorf("scale logits: %w", err)
	}
	for i := range w {
		w[i] = float32(float64(w[i]) * factor)
	}
	if err := v.SetValuePreservingOld(tensors.FromFlatDataAndDimensions(w, t.Shape().Dimensions...)); err != nil {
		return fmt.Errorf("scale logits: %w", err)
	}
	return nil
}

// atTemperature runs f with the live model's logits divided by the
// sampling temperature, and restores the scale after, keeping whatever f's
// optimiser steps did to the (scaled) gain. The caller holds mu; nothing
// may generate from the model meanwhile.
func (u *Updater) atTemperature(f func() error) error {
	t := u.cfg.temperature()
	if err := scaleLogits(u.m.Context(), "", 1/t); err != nil {
		return err
	}
	ferr := f()
	return errors.Join(ferr, scaleLogits(u.m.Context(), "", t))
}

// packed is a minibatch as tensors [B, T] (and [B] for the advantages).
type packed struct {
	in, tg, mask, adv *tensors.Tensor
	rows, tokens      int
}

// pack right-pads prompt+response sequences into next-token inputs,
// targets and a mask on the response targets, with empty rows (mask 0) up
// to rows so that every minibatch has the same batch size and only the
// (bucketed) length varies: each new shape compiles a new graph. Prompts
// that do not fit the model's context lose their oldest tokens.
func (u *Updater) pack(samples []Sample, rows int) (packed, error) {
	maxSeq := u.m.Config().MaxSeq
	seqs, starts, err := u.sequences(samples)
	if err != nil {
		return packed{}, err
	}
	longest := 0
	for _, s := range seqs {
		longest = max(longest, len(s)-1)
	}
	t := bucket(longest, maxSeq)
	n := max(rows, len(samples))
	in, tg := make([]int32, n*t), make([]int32, n*t)
	mask, adv := make([]float32, n*t), make([]float32, n)
	tokens := 0
	for i, s := range seqs {
		for j := 0; j+1 < len(s); j++ {
			in[i*t+j], tg[i*t+j] = int32(s[j]), int32(s[j+1])
			if j >= starts[i] {
				mask[i*t+j] = 1
				tokens++
			}
		}
		adv[i] = float32(samples[i].Advantage)
	}
	return packed{
		in:   tensors.FromFlatDataAndDimensions(in, n, t),
		tg:   tensors.FromFlatDataAndDimensions(tg, n, t),
		mask: tensors.FromFlatDataAndDimensions(mask, n, t),
		adv:  tensors.FromFlatDataAndDimensions(adv, n),
		rows: len(samples), tokens: tokens,
	}, nil
}

// sequences joins each sample's prompt and response, the prompt losing its
// oldest tokens when the two do not fit the model's context, and returns
// where each response starts: the first input position (log-prob index)
// whose target is a response token.
func (u *Updater) sequences(samples []Sample) (seqs [][]int, starts []int, err error) {
	maxSeq := u.m.Config().MaxSeq
	seqs, starts = make([][]int, len(samples)), make([]int, len(samples))
	for i, s := range samples {
		if len(s.Tokens) == 0 || len(s.Prompt) == 0 {
			return nil, nil, fmt.Errorf("pack sample %d: empty prompt or response", i)
		}
		if len(s.Tokens) >= maxSeq {
			return nil, nil, fmt.Errorf("pack sample %d: response of %d tokens: %w", i, len(s.Tokens), inference.ErrTooLong)
		}
		p := s.Prompt
		if over := len(p) + len(s.Tokens) - (maxSeq + 1); over > 0 {
			p = p[over:]
		}
		seqs[i] = append(append([]int(nil), p...), s.Tokens...)
		starts[i] = len(p) - 1
	}
	return seqs, starts, nil
}

// bucket rounds a length up to a power of two from 16, capped at max, so
// few graph shapes are compiled.
func bucket(n, max int) int {
	b := 16
	for b < n {
		b *= 2
	}
	return min(max, b)
}

// Update takes one RL step on samples: it scores them under the current
// (old) and the reference policy once, then takes one AdamW step per
// minibatch on the clipped surrogate minus β·k3, averaged over the tokens of
// each sequence and then over sequences. Every log-prob is taken at the
// sampling temperature (UpdateConfig.Temperature).
func (u *Updater) Update(ctx context.Context, samples []Sample, rng *rand.Rand) (UpdateStats, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(samples) == 0 {
		return UpdateStats{}, ErrNoSamples
	}
	order := rng.Perm(len(samples))
	var st UpdateStats
	err := u.atTemperature(func() error {
		var err error
		if u.native != nil {
			st, err = u.updateNative(ctx, samples, order)
		} else {
			st, err = u.updateGoMLX(ctx, samples, order)
		}
		return err
	})
	return st, err
}

// updateGoMLX is Update with GoMLX's graph.
func (u *Updater) updateGoMLX(ctx context.Context, samples []Sample, order []int) (UpdateStats, error) {
	type batch struct {
		p        packed
		old, ref *tensors.Tensor
	}
	var batches []batch
	var st UpdateStats
	klSum := 0.0
	for lo := 0; lo < len(order); lo += u.cfg.MiniBatch {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		mb := make([]Sample, 0, u.cfg.MiniBatch)
		for _, i := range order[lo:min(lo+u.cfg.MiniBatch, len(order))] {
			mb = append(mb, samples[i])
		}
		p, err := u.pack(mb, u.cfg.MiniBatch)
		if err != nil {
			return st, fmt.Errorf("rl update: %w", err)
		}
		out, err := u.score.Exec(p.in, p.tg)
		if err != nil {
			return st, fmt.Errorf("rl update: score old and reference policy: %w", err)
		}
		klSum += k3Sum(out[0], out[1], p.mask)
		st.Tokens += p.tokens
		batches = append(batches, batch{p: p, old: out[0], ref: out[1]})
	}
	if st.Tokens > 0 {
		st.KL = klSum / float64(st.Tokens)
	}
	name, loss := "rl_token", u.tokenLoss
	if u.cfg.SequenceLevel {
		name, loss = "rl_sequence", u.sequenceLoss
	}
	return stepBatches(ctx, st, batches, func(b batch) (float32, error) {
		return u.tr.StepWith(name, loss, b.p.in, b.p.tg, b.p.mask, b.old, b.ref, b.p.adv)
	})
}

// stepBatches takes one gradient step per minibatch, in order, and records
// in st how many it took and their mean loss.
func stepBatches[B any](ctx context.Context, st UpdateStats, batches []B, step func(B) (float32, error)) (UpdateStats, error) {
	lossSum := 0.0
	for _, b := range batches {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		l, err := step(b)
		if err != nil {
			return st, fmt.Errorf("rl update: %w", err)
		}
		lossSum += float64(l)
		st.GradSteps++
	}
	st.Loss = lossSum / float64(st.GradSteps)
	return st, nil
}

// k3Sum is Σ mask·(exp(ref−old) − (ref−old) − 1) over a minibatch.
func k3Sum(old, ref, mask *tensors.Tensor) float64 {
	o := tensors.MustCopyFlatData[float32](old)
	r := tensors.MustCopyFlatData[float32](ref)
	m := tensors.MustCopyFlatData[float32](mask)
	s := 0.0
	for i := range o {
		if m[i] == 0 {
			continue
		}
		d := float64(r[i] - o[i])
		s += math.Exp(d) - d - 1
	}
	return s
}

// k3 builds the per-token estimate exp(ref−logp) − (ref−logp) − 1 of
// KL(π_θ‖π_ref), non-negative and unbiased for samples of π_θ.
func k3(logp, ref *graph.Node) *graph.Node {
	d := graph.Sub(ref, logp)
	return graph.Sub(graph.Sub(graph.Exp(d), d), graph.OnesLike(d))
}

// maskedMean averages x [B, T] over the masked tokens of each row: [B].
func maskedMean(x, mask *graph.Node) *graph.Node {
	num := graph.ReduceSum(graph.Mul(x, mask), 1)
	return graph.Div(num, graph.MaxScalar(graph.ReduceSum(mask, 1), 1))
}

// rowsMean averages per-sequence losses over the rows that have tokens.
func rowsMean(perSeq, mask *graph.Node) *graph.Node {
	has := graph.MinScalar(graph.ReduceSum(mask, 1), 1)
	return graph.Div(graph.ReduceAllSum(graph.Mul(perSeq, has)), graph.MaxScalar(graph.ReduceAllSum(has), 1))
}

// surrogate is min(ρ·Â, clip(ρ, 1−ε, 1+ε)·Â).
func (u *Updater) surrogate(ratio, adv *graph.Node) *graph.Node {
	clipped := graph.ClipScalar(ratio, 1-u.cfg.Epsilon, 1+u.cfg.Epsilon)
	return graph.Min(graph.Mul(ratio, adv), graph.Mul(clipped, adv))
}

// tokenLoss is GRPO's: token ratios, each clipped, minus β·k3 per token.
func (u *Updater) tokenLoss(ctx *mlctx.Context, x []*graph.Node) *graph.Node {
	in, tg, mask, old, ref, adv := x[0], x[1], x[2], x[3], x[4], x[5]
	logp := u.m.TokenLogProbs(ctx, in, tg)
	ratio := graph.Exp(graph.Sub(logp, old))
	a := graph.ExpandAxes(adv, -1)
	perTok := graph.Sub(graph.MulScalar(k3(logp, ref), u.cfg.Beta), u.surrogate(ratio, a))
	return rowsMean(maskedMean(perTok, mask), mask)
}

// sequenceLoss is GSPO's: one length-normalised ratio per sequence, clipped
// per sequence, minus β times the sequence's mean k3.
func (u *Updater) sequenceLoss(ctx *mlctx.Context, x []*graph.Node) *graph.Node {
	in, tg, mask, old, ref, adv := x[0], x[1], x[2], x[3], x[4], x[5]
	logp := u.m.TokenLogProbs(ctx, in, tg)
	ratio := graph.Exp(maskedMean(graph.Sub(logp, old), mask))
	perSeq := graph.Sub(graph.MulScalar(maskedMean(k3(logp, ref), mask), u.cfg.Beta), u.surrogate(ratio, adv))
	return rowsMean(perSeq, mask)
}

// LogProbs returns each sample's per-token log-probabilities of its
// response under the current policy at temperature 1 (perplexity).
func (u *Updater) LogProbs(samples []Sample) ([][]float32, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.logProbs(samples)
}

// SamplingLogProbs returns each sample's per-token log-probabilities of its
// response under the current policy at the sampling temperature: the
// log-probs Update's ratios start from.
func (u *Updater) SamplingLogProbs(samples []Sample) ([][]float32, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var lp [][]float32
	err := u.atTemperature(func() error {
		var err error
		lp, err = u.logProbs(samples)
		return err
	})
	return lp, err
}

// logProbs scores samples under the live weights; the caller holds mu.
func (u *Updater) logProbs(samples []Sample) ([][]float32, error) {
	if u.native != nil {
		seqs, starts, err := u.sequences(samples)
		if err != nil {
			return nil, err
		}
		lp, err := u.native.LogProbs(seqs)
		if err != nil {
			return nil, fmt.Errorf("score samples: %w", err)
		}
		for i := range lp {
			lp[i] = lp[i][starts[i]:]
		}
		return lp, nil
	}
	p, err := u.pack(samples, 0)
	if err != nil {
		return nil, err
	}
	out, err := u.score.Exec(p.in, p.tg)
	if err != nil {
		return nil, fmt.Errorf("score samples: %w", err)
	}
	lp := tensors.MustCopyFlatData[float32](out[0])
	m := tensors.MustCopyFlatData[float32](p.mask)
	t := p.in.Shape().Dimensions[1]
	res := make([][]float32, p.rows)
	for i := range res {
		for j := range t {
			if m[i*t+j] != 0 {
				res[i] = append(res[i], lp[i*t+j])
			}
		}
	}
	return res, nil
}
