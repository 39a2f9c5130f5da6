package inference

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// TrainConfig configures AdamW with a linear warm-up followed by a cosine or
// constant learning rate, and global-norm gradient clipping.
type TrainConfig struct {
	LearningRate float64 `json:"learning_rate"`
	// WarmupSteps ramps the rate linearly from 0 over this many steps.
	WarmupSteps int `json:"warmup_steps"`
	// Schedule is "cosine" (decays to MinLRRatio·LearningRate at TotalSteps)
	// or "constant".
	Schedule    string  `json:"schedule"`
	TotalSteps  int     `json:"total_steps"`
	MinLRRatio  float64 `json:"min_lr_ratio"`
	WeightDecay float64 `json:"weight_decay"` // decoupled; matrices only, not norms
	Beta1       float64 `json:"beta1"`
	Beta2       float64 `json:"beta2"`
	Epsilon     float64 `json:"epsilon"`
	// ClipNorm rescales the gradient when its global L2 norm exceeds it;
	// 0 disables clipping.
	ClipNorm float64 `json:"clip_norm"`
}

// DefaultTrainConfig suits the small default models (SFT from scratch).
func DefaultTrainConfig() TrainConfig {
	return TrainConfig{
		LearningRate: 1e-3,
		WarmupSteps:  20,
		Schedule:     "constant",
		MinLRRatio:   0.1,
		WeightDecay:  0.01,
		Beta1:        0.9,
		Beta2:        0.95,
		Epsilon:      1e-8,
		ClipNorm:     1.0,
	}
}

// Validate reports the first bad field.
func (c TrainConfig) Validate() error {
	switch {
	case c.LearningRate <= 0:
		return fmt.Errorf("train config: learning rate %g must be positive", c.LearningRate)
	case c.WarmupSteps < 0:
		return fmt.Errorf("train config: warmup steps %d is negative", c.WarmupSteps)
	case c.Schedule != "cosine" && c.Schedule != "constant":
		return fmt.Errorf("train config: schedule %q: want cosine or constant", c.Schedule)
	case c.Schedule == "cosine" && c.TotalSteps <= c.WarmupSteps:
		return fmt.Errorf("train config: cosine needs total steps %d > warmup %d", c.TotalSteps, c.WarmupSteps)
	case c.MinLRRatio < 0 || c.MinLRRatio > 1:
		return fmt.Errorf("train config: min lr ratio %g outside [0,1]", c.MinLRRatio)
	case c.WeightDecay < 0 || c.ClipNorm < 0 || c.Epsilon <= 0:
		return fmt.Errorf("train config: weight decay %g, clip norm %g, epsilon %g out of range",
			c.WeightDecay, c.ClipNorm, c.Epsilon)
	case c.Beta1 < 0 || c.Beta1 >= 1 || c.Beta2 < 0 || c.Beta2 >= 1:
		return fmt.Errorf("train config: betas %g, %g must be in [0,1)", c.Beta1, c.Beta2)
	}
	return nil
}

// LR is the learning rate at (0-based) step.
func (c TrainConfig) LR(step int) float64 {
	if step < c.WarmupSteps {
		return c.LearningRate * float64(step+1) / float64(c.WarmupSteps+1)
	}
	if c.Schedule == "constant" {
		return c.LearningRate
	}
	p := math.Min(1, float64(step-c.WarmupSteps)/float64(c.TotalSteps-c.WarmupSteps))
	minLR := c.LearningRate * c.MinLRRatio
	return minLR + (c.LearningRate-minLR)*0.5*(1+math.Cos(math.Pi*p))
}

// Batch is a batch of token sequences for next-token training. Weights[i][j]
// weighs the loss of predicting Tokens[i][j] from Tokens[i][:j] (j >= 1;
// Weights[i][0] is ignored); 0 means no loss. Nil Weights weigh all tokens 1.
type Batch struct {
	Tokens  [][]int
	Weights [][]float32
}

// LossFunc builds a scalar training loss from the model's weights at ctx and
// the step's inputs (in the order passed to Trainer.StepWith). Build model
// outputs with Model.Logits or Model.TokenLogProbs.
type LossFunc func(ctx *context.Context, inputs []*graph.Node) *graph.Node

// Trainer updates a Model's weights in place with AdamW. A Trainer is not
// safe for concurrent use; inference on the same Model while a step runs sees
// either the old or the new weights of each tensor.
type Trainer struct {
	m    *Model
	cfg  TrainConfig
	step int

	mu       sync.Mutex
	execs    map[string]*context.Exec
	lastNorm float32
}

// NewTrainer prepares AdamW state for every weight of m.
func NewTrainer(m *Model, cfg TrainConfig) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, err := m.weightsContext()
	if err != nil {
		return nil, fmt.Errorf("new trainer: %w", err)
	}
	for _, name := range m.names {
		scope, vname := weightScope(name)
		v := ctx.GetVariableByScopeAndName(scope, vname)
		for _, mom := range []string{"m", "v"} {
			octx := ctx.InAbsPath("/adamw" + scope)
			mname := momentName(mom, vname)
			if octx.GetVariableByScopeAndName(octx.Scope(), mname) != nil {
				continue
			}
			octx.VariableWithValue(mname, tensors.FromShape(v.Shape())).SetTrainable(false)
		}
	}
	sctx := ctx.InAbsPath("/adamw")
	if sctx.GetVariableByScopeAndName("/adamw", "step") == nil {
		sctx.VariableWithValue("step", float32(0)).SetTrainable(false)
	}
	return &Trainer{m: m, cfg: cfg, execs: map[string]*context.Exec{}}, nil
}

// momentName is the name of AdamW moment mom ("m" or "v") of the variable
// vname, kept under "/adamw" plus the variable's scope: mom itself for a
// weight, suffixed for a bias, which shares its weight's scope.
func momentName(mom, vname string) string {
	if vname == "weight" {
		return mom
	}
	return mom + "_" + vname
}

// Steps is the number of steps taken so far.
func (t *Trainer) Steps() int { return t.step }

// LastGradNorm is the global gradient norm (before clipping) of the last step.
func (t *Trainer) LastGradNorm() float32 { return t.lastNorm }

// Step takes one AdamW step on the weighted next-token cross-entropy of the
// batch (the mean over weighted tokens) and returns the loss before the step.
func (t *Trainer) Step(batch Batch) (float32, error) {
	in, tg, w, err := nextTokenTensors(batch, t.m.cfg.MaxSeq)
	if err != nil {
		return 0, fmt.Errorf("train step: %w", err)
	}
	return t.StepWith("next_token", func(ctx *context.Context, x []*graph.Node) *graph.Node {
		return NextTokenLoss(t.m.TokenLogProbs(ctx, x[0], x[1]), x[2])
	}, in, tg, w)
}

// NextTokenLoss is -Σ w·logp / Σ w for per-token log-probs and weights of the
// same shape.
func NextTokenLoss(logp, weights *graph.Node) *graph.Node {
	num := graph.ReduceAllSum(graph.Mul(logp, weights))
	den := graph.MaxScalar(graph.ReduceAllSum(weights), 1e-6)
	return graph.Neg(graph.Div(num, den))
}

// StepWith takes one AdamW step on a custom loss. name identifies the loss
// function: the graph is built once per name and input shapes, so reuse the
// same name for the same function. Inputs are tensors or Go slices.
func (t *Trainer) StepWith(name string, loss LossFunc, inputs ...any) (float32, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.execs[name]
	if !ok {
		var err error
		e, err = t.m.newExec(func(ctx *context.Context, x []*graph.Node) []*graph.Node {
			return t.buildStep(ctx, x[0], loss(ctx, x[1:]))
		})
		if err != nil {
			return 0, fmt.Errorf("build train step %q: %w", name, err)
		}
		t.execs[name] = e
	}
	args := append([]any{float32(t.cfg.LR(t.step))}, inputs...)
	out, err := e.Exec(args...)
	if err != nil {
		return 0, fmt.Errorf("train step %q: %w", name, err)
	}
	t.step++
	t.lastNorm = tensors.ToScalar[float32](out[1])
	l := tensors.ToScalar[float32](out[0])
	if math.IsNaN(float64(l)) || math.IsInf(float64(l), 0) {
		return l, fmt.Errorf("train step %q: loss is %g", name, l)
	}
	return l, nil
}

// buildStep builds the AdamW update of every trainable model weight and
// returns the loss and the global gradient norm.
func (t *Trainer) buildStep(ctx *context.Context, lr, loss *graph.Node) []*graph.Node {
	g := loss.Graph()
	c := t.cfg
	vars := make([]*context.Variable, 0, len(t.m.names))
	nodes := make([]*graph.Node, 0, len(t.m.names))
	for _, name := range t.m.names {
		scope, vname := weightScope(name)
		v := ctx.GetVariableByScopeAndName(scope, vname)
		vars = append(vars, v)
		nodes = append(nodes, v.ValueGraph(g))
	}
	grads := graph.Gradient(loss, nodes...)
	sq := graph.Scalar(g, dtypes.Float32, 0)
	for _, gr := range grads {
		sq = graph.Add(sq, graph.ReduceAllSum(graph.Square(gr)))
	}
	norm := graph.Sqrt(sq)
	scale := graph.Scalar(g, dtypes.Float32, 1)
	if c.ClipNorm > 0 {
		scale = graph.Min(scale, graph.Div(graph.Scalar(g, dtypes.Float32, c.ClipNorm), graph.AddScalar(norm, 1e-6)))
	}
	stepVar := ctx.GetVariableByScopeAndName("/adamw", "step")
	step := graph.AddScalar(stepVar.ValueGraph(g), 1)
	stepVar.SetValueGraph(step)
	bc1 := graph.OneMinus(graph.Exp(graph.MulScalar(step, math.Log(c.Beta1))))
	bc2 := graph.OneMinus(graph.Exp(graph.MulScalar(step, math.Log(c.Beta2))))
	for i, v := range vars {
		gr := graph.Mul(grads[i], scale)
		mv := ctx.GetVariableByScopeAndName("/adamw"+v.Scope(), momentName("m", v.Name()))
		vv := ctx.GetVariableByScopeAndName("/adamw"+v.Scope(), momentName("v", v.Name()))
		m1 := graph.Add(graph.MulScalar(mv.ValueGraph(g), c.Beta1), graph.MulScalar(gr, 1-c.Beta1))
		v1 := graph.Add(graph.MulScalar(vv.ValueGraph(g), c.Beta2), graph.MulScalar(graph.Square(gr), 1-c.Beta2))
		mv.SetValueGraph(m1)
		vv.SetValueGraph(v1)
		upd := graph.Div(graph.Div(m1, bc1), graph.AddScalar(graph.Sqrt(graph.Div(v1, bc2)), c.Epsilon))
		w := nodes[i]
		if c.WeightDecay > 0 && w.Rank() >= 2 {
			upd = graph.Add(upd, graph.MulScalar(w, c.WeightDecay))
		}
		v.SetValueGraph(graph.Sub(w, graph.Mul(upd, lr)))
	}
	return []*graph.Node{loss, norm}
}

// nextTokenTensors turns a Batch into right-padded inputs, targets and
// weights [B, T] where T is the bucketed longest length minus one.
func nextTokenTensors(b Batch, maxSeq int) (in, tg, w *tensors.Tensor, err error) {
	if len(b.Tokens) == 0 {
		return nil, nil, nil, errors.New("empty batch")
	}
	if b.Weights != nil && len(b.Weights) != len(b.Tokens) {
		return nil, nil, nil, fmt.Errorf("%d weight rows for %d sequences", len(b.Weights), len(b.Tokens))
	}
	longest := 0
	for i, s := range b.Tokens {
		if len(s) < 2 {
			return nil, nil, nil, fmt.Errorf("sequence %d has %d tokens, need at least 2", i, len(s))
		}
		if b.Weights != nil && len(b.Weights[i]) != len(s) {
			return nil, nil, nil, fmt.Errorf("sequence %d: %d weights for %d tokens", i, len(b.Weights[i]), len(s))
		}
		longest = max(longest, len(s)-1)
	}
	if longest > maxSeq {
		return nil, nil, nil, fmt.Errorf("sequence of %d tokens exceeds %d: %w", longest+1, maxSeq+1, ErrTooLong)
	}
	t := padBucket(longest, maxSeq)
	n := len(b.Tokens)
	ins, tgs, ws := make([]int32, n*t), make([]int32, n*t), make([]float32, n*t)
	for i, s := range b.Tokens {
		for j := 0; j+1 < len(s); j++ {
			ins[i*t+j] = int32(s[j])
			tgs[i*t+j] = int32(s[j+1])
			ws[i*t+j] = 1
			if b.Weights != nil {
				ws[i*t+j] = b.Weights[i][j+1]
			}
		}
	}
	return tensors.FromFlatDataAndDimensions(ins, n, t),
		tensors.FromFlatDataAndDimensions(tgs, n, t),
		tensors.FromFlatDataAndDimensions(ws, n, t), nil
}
