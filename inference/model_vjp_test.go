package inference

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// TestDotGeneralVJP checks the replacement DotGeneral gradient against the
// gradient of the same product written as broadcast Mul + ReduceSum (what the
// stock VJP computes), on the einsum patterns the model uses and a few more.
func TestDotGeneralVJP(t *testing.T) {
	installDotGeneralVJP()
	b, err := newBackend(DefaultBackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	type pattern struct {
		name       string
		lhs, rhs   []int
		dot        func(a, b *graph.Node) *graph.Node
		broadcastD func(a, b *graph.Node) *graph.Node
	}
	tests := []pattern{
		{
			name: "linear btd,od->bto", lhs: []int{2, 3, 4}, rhs: []int{5, 4},
			dot: func(a, b *graph.Node) *graph.Node { return graph.DotGeneral(a, []int{2}, nil, b, []int{1}, nil) },
			broadcastD: func(a, b *graph.Node) *graph.Node {
				return graph.ReduceSum(graph.Mul(graph.Reshape(a, 2, 3, 1, 4), graph.Reshape(b, 1, 1, 5, 4)), 3)
			},
		},
		{
			name: "linearIn btd,do->bto", lhs: []int{2, 3, 4}, rhs: []int{4, 5},
			dot: func(a, b *graph.Node) *graph.Node { return graph.DotGeneral(a, []int{2}, nil, b, []int{0}, nil) },
			broadcastD: func(a, b *graph.Node) *graph.Node {
				return graph.ReduceSum(graph.Mul(graph.Reshape(a, 2, 3, 4, 1), graph.Reshape(b, 1, 1, 4, 5)), 2)
			},
		},
		{
			name: "scores bhqd,bhkd->bhqk", lhs: []int{2, 3, 4, 5}, rhs: []int{2, 3, 6, 5},
			dot: func(a, b *graph.Node) *graph.Node {
				return graph.DotGeneral(a, []int{3}, []int{0, 1}, b, []int{3}, []int{0, 1})
			},
			broadcastD: func(a, b *graph.Node) *graph.Node {
				return graph.ReduceSum(graph.Mul(graph.Reshape(a, 2, 3, 4, 1, 5), graph.Reshape(b, 2, 3, 1, 6, 5)), 4)
			},
		},
		{
			name: "values bhqk,bhkd->bhqd", lhs: []int{2, 3, 4, 6}, rhs: []int{2, 3, 6, 5},
			dot: func(a, b *graph.Node) *graph.Node {
				return graph.DotGeneral(a, []int{3}, []int{0, 1}, b, []int{2}, []int{0, 1})
			},
			broadcastD: func(a, b *graph.Node) *graph.Node {
				return graph.ReduceSum(graph.Mul(graph.Reshape(a, 2, 3, 4, 6, 1), graph.Reshape(b, 2, 3, 1, 6, 5)), 3)
			},
		},
		{
			name: "two unsorted contractions xyz,zyw->xw", lhs: []int{3, 4, 5}, rhs: []int{5, 4, 2},
			dot: func(a, b *graph.Node) *graph.Node {
				return graph.DotGeneral(a, []int{1, 2}, nil, b, []int{1, 0}, nil)
			},
			broadcastD: func(a, b *graph.Node) *graph.Node {
				bt := graph.Reshape(graph.TransposeAllAxes(b, 1, 0, 2), 1, 4, 5, 2)
				return graph.ReduceSum(graph.Mul(graph.Reshape(a, 3, 4, 5, 1), bt), 1, 2)
			},
		},
		{
			name: "batch axis not first xbk,bky->bxy", lhs: []int{3, 2, 4}, rhs: []int{2, 4, 5},
			dot: func(a, b *graph.Node) *graph.Node {
				return graph.DotGeneral(a, []int{2}, []int{1}, b, []int{1}, []int{0})
			},
			broadcastD: func(a, b *graph.Node) *graph.Node {
				at := graph.Reshape(graph.TransposeAllAxes(a, 1, 0, 2), 2, 3, 4, 1)
				return graph.ReduceSum(graph.Mul(at, graph.Reshape(b, 2, 1, 4, 5)), 2)
			},
		},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	randT := func(dims []int) *tensors.Tensor {
		n := 1
		for _, d := range dims {
			n *= d
		}
		v := make([]float64, n)
		for i := range v {
			v[i] = rng.NormFloat64()
		}
		return tensors.FromFlatDataAndDimensions(v, dims...)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := graph.NewExec(b, func(a, bb *graph.Node) []*graph.Node {
				d1 := tc.dot(a, bb)
				if _, ok := dotGeneralAxesOf(d1); !ok {
					t.Error("dotGeneralAxesOf could not read the axes: the stock VJP would be used")
				}
				d2 := tc.broadcastD(a, bb)
				// A non-uniform upstream gradient: weight each output element.
				w := graph.Cos(graph.Iota(a.Graph(), d1.Shape(), d1.Rank()-1))
				w = graph.Add(w, graph.Sin(graph.IotaFull(a.Graph(), d1.Shape())))
				l1 := graph.ReduceAllSum(graph.Mul(d1, w))
				l2 := graph.ReduceAllSum(graph.Mul(d2, w))
				g1 := graph.Gradient(l1, a, bb)
				g2 := graph.Gradient(l2, a, bb)
				return []*graph.Node{d1, d2, g1[0], g2[0], g1[1], g2[1]}
			})
			if err != nil {
				t.Fatal(err)
			}
			out, err := e.Exec(randT(tc.lhs), randT(tc.rhs))
			if err != nil {
				t.Fatal(err)
			}
			for i, what := range []string{"forward", "grad lhs", "grad rhs"} {
				got := tensors.MustCopyFlatData[float64](out[2*i])
				want := tensors.MustCopyFlatData[float64](out[2*i+1])
				if !out[2*i].Shape().Equal(out[2*i+1].Shape()) {
					t.Fatalf("%s: shape %s; want %s", what, out[2*i].Shape(), out[2*i+1].Shape())
				}
				for j := range got {
					if d := math.Abs(got[j] - want[j]); d > 1e-6 {
						t.Fatalf("%s[%d] = %g; want %g (diff %g)", what, j, got[j], want[j], d)
					}
				}
			}
		})
	}
}
