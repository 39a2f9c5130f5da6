package inference

import (
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// TestOpenWeightsFineTuneGradient checks the gradient the GoMLX trainer
// takes of the weighted next-token loss on the imported architectures
// (grouped-query attention, head_dim unlike hidden/heads, q/k/v biases, an
// untied lm_head, llama3 rope scaling) against central finite differences
// of the forward: for every weight, the loss's derivative along its
// gradient g must be |g|, which holds only when g points the right way and
// has the right length.
func TestOpenWeightsFineTuneGradient(t *testing.T) {
	m, err := NewModel(gqaTestConfig(), DefaultBackendConfig(), 7)
	if err != nil {
		t.Fatal(err)
	}
	batch := Batch{
		Tokens:  [][]int{{1, 5, 9, 2, 33, 7, 7, 12}, {3, 3, 8, 21, 39}},
		Weights: [][]float32{{0, 0, 0, 1, 1, 1, 1, 1}, {0, 1, 1, 0, 1}}, // a loss mask, as SFT's
	}
	in, tg, w, err := nextTokenTensors(batch, m.cfg.MaxSeq)
	if err != nil {
		t.Fatal(err)
	}
	names := m.WeightNames()
	vars := make([]*context.Variable, len(names))
	for i, name := range names {
		scope, vname := weightScope(name)
		vars[i] = m.ctx.GetVariableByScopeAndName(scope, vname)
	}
	// Random init leaves attention near uniform, where queries and keys
	// barely matter: sharpen it so that their gradients are tested too.
	for i, name := range names {
		if !strings.Contains(name, "q_proj") && !strings.Contains(name, "k_proj") {
			continue
		}
		x, err := vars[i].Value()
		if err != nil {
			t.Fatal(err)
		}
		vals, err := tensors.CopyFlatData[float32](x)
		if err != nil {
			t.Fatal(err)
		}
		for k := range vals {
			vals[k] *= 6
		}
		if err := vars[i].SetValue(tensors.FromFlatDataAndDimensions(vals, x.Shape().Dimensions...)); err != nil {
			t.Fatal(err)
		}
	}
	loss := func(ctx *context.Context, x []*graph.Node) *graph.Node {
		return NextTokenLoss(m.TokenLogProbs(ctx, x[0], x[1]), x[2])
	}
	grads, err := m.newExec(func(ctx *context.Context, x []*graph.Node) []*graph.Node {
		l := loss(ctx, x)
		nodes := make([]*graph.Node, len(vars))
		for i, v := range vars {
			nodes[i] = v.ValueGraph(l.Graph())
		}
		return graph.Gradient(l, nodes...)
	})
	if err != nil {
		t.Fatal(err)
	}
	value, err := m.newExec(func(ctx *context.Context, x []*graph.Node) *graph.Node { return loss(ctx, x) })
	if err != nil {
		t.Fatal(err)
	}
	lossAt := func() float64 {
		out, err := value.Exec(in, tg, w)
		if err != nil {
			t.Fatal(err)
		}
		return float64(tensors.ToScalar[float32](out[0]))
	}
	gs, err := grads.Exec(in, tg, w)
	if err != nil {
		t.Fatal(err)
	}
	const eps = 1e-2
	worst, worstName := 0.0, ""
	for i, v := range vars {
		g, err := tensors.CopyFlatData[float32](gs[i])
		if err != nil {
			t.Fatal(err)
		}
		norm := 0.0
		for _, x := range g {
			norm += float64(x) * float64(x)
		}
		norm = math.Sqrt(norm)
		if norm == 0 {
			t.Errorf("%s: zero gradient", names[i])
			continue
		}
		orig, err := v.Value()
		if err != nil {
			t.Fatal(err)
		}
		w0, err := tensors.CopyFlatData[float32](orig)
		if err != nil {
			t.Fatal(err)
		}
		dims := orig.Shape().Dimensions
		moved := func(step float64) float64 {
			x := make([]float32, len(w0))
			for k := range x {
				x[k] = w0[k] + float32(step*float64(g[k])/norm)
			}
			if err := v.SetValue(tensors.FromFlatDataAndDimensions(x, dims...)); err != nil {
				t.Fatal(err)
			}
			return lossAt()
		}
		fd := (moved(eps) - moved(-eps)) / (2 * eps)
		if err := v.SetValue(tensors.FromFlatDataAndDimensions(w0, dims...)); err != nil {
			t.Fatal(err)
		}
		if rel := math.Abs(fd-norm) / norm; rel > worst {
			worst, worstName = rel, names[i]
		}
		if math.Abs(fd-norm) > 5e-5+0.03*norm {
			t.Errorf("%s: derivative along the gradient %.5f by finite differences; the gradient's norm is %.5f", names[i], fd, norm)
		}
	}
	t.Logf("%d weights: worst relative error %.2g (%s)", len(vars), worst, worstName)
}
