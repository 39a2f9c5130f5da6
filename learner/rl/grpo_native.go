package rl

import (
	"context"
	"fmt"
	"math"

	"github.com/parleyhq/parley/inference"
)

// nativeBatch is a minibatch for the native trainer: the sequences, where
// each one's response starts among its log-probs, the advantages, and the
// log-probs of the old and the reference policy.
type nativeBatch struct {
	seqs     [][]int
	starts   []int
	adv      []float64
	old, ref [][]float32
}

// updateNative is Update on the native trainer: the same minibatches,
// scores and loss as the GoMLX graph (tokenLoss, sequenceLoss), the loss
// given to the trainer as its derivative with respect to each token's
// log-prob (weigh).
func (u *Updater) updateNative(ctx context.Context, samples []Sample, order []int) (UpdateStats, error) {
	var batches []nativeBatch
	var st UpdateStats
	klSum := 0.0
	for lo := 0; lo < len(order); lo += u.cfg.MiniBatch {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		var b nativeBatch
		mb := make([]Sample, 0, u.cfg.MiniBatch)
		for _, i := range order[lo:min(lo+u.cfg.MiniBatch, len(order))] {
			mb = append(mb, samples[i])
			b.adv = append(b.adv, samples[i].Advantage)
		}
		var err error
		if b.seqs, b.starts, err = u.sequences(mb); err != nil {
			return st, fmt.Errorf("rl update: %w", err)
		}
		if b.old, err = u.native.LogProbs(b.seqs); err != nil {
			return st, fmt.Errorf("rl update: score the old policy: %w", err)
		}
		if b.ref, err = u.refNative.LogProbs(b.seqs); err != nil {
			return st, fmt.Errorf("rl update: score the reference policy: %w", err)
		}
		for i, old := range b.old {
			for t := b.starts[i]; t < len(old); t++ {
				d := float64(b.ref[i][t] - old[t])
				klSum += math.Exp(d) - d - 1
				st.Tokens++
			}
		}
		batches = append(batches, b)
	}
	if st.Tokens > 0 {
		st.KL = klSum / float64(st.Tokens)
	}
	return stepBatches(ctx, st, batches, func(b nativeBatch) (float32, error) {
		return u.native.StepWeighted(b.seqs, u.weigh(b))
	})
}

// weigh returns the loss of tokenLoss (or sequenceLoss with
// SequenceLevel) on the minibatch and its weights −∂loss/∂log p per token.
// With T a sequence's response tokens, R the minibatch's sequences and
// r the ratio: the surrogate min(r·A, clip(r)·A) contributes A·r/(T·R) to
// each token (r of the token, or r = exp(mean(log p − old)) of the
// sequence) while its unclipped branch is the active one (A > 0 and
// r < 1+ε, or A < 0 and r > 1−ε), else 0; β·k3 contributes
// β/(T·R)·(exp(ref − log p) − 1).
func (u *Updater) weigh(b nativeBatch) inference.TokenWeightsFunc {
	eps, beta := u.cfg.Epsilon, u.cfg.Beta
	surrogate := func(r, a float64) (value, slope float64) {
		clipped := min(max(r, 1-eps), 1+eps)
		if a > 0 && r < 1+eps || a < 0 && r > 1-eps {
			slope = a * r
		}
		return min(r*a, clipped*a), slope
	}
	return func(logp [][]float32) ([][]float32, float32, error) {
		rows := float64(len(logp))
		w := make([][]float32, len(logp))
		loss := 0.0
		for i, lp := range logp {
			w[i] = make([]float32, len(lp))
			start, a := b.starts[i], b.adv[i]
			n := float64(len(lp) - start)
			var meanDiff float64
			for t := start; t < len(lp); t++ {
				meanDiff += float64(lp[t]) - float64(b.old[i][t])
			}
			meanDiff /= n
			seqSurr, seqSlope := surrogate(math.Exp(meanDiff), a)
			perSeq := 0.0
			for t := start; t < len(lp); t++ {
				d := float64(b.ref[i][t]) - float64(lp[t])
				e := math.Exp(d)
				g := beta * (e - 1)
				perSeq += beta * (e - d - 1)
				if u.cfg.SequenceLevel {
					g += seqSlope
				} else {
					surr, slope := surrogate(math.Exp(float64(lp[t])-float64(b.old[i][t])), a)
					perSeq -= surr
					g += slope
				}
				w[i][t] = float32(g / (n * rows))
			}
			perSeq /= n
			if u.cfg.SequenceLevel {
				perSeq -= seqSurr
			}
			loss += perSeq
		}
		return w, float32(loss / rows), nil
	}
}
