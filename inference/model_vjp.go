package inference

import (
	"reflect"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// installDotGeneralVJP replaces GoMLX v0.26.0's DotGeneral gradient, which
// materialises the full broadcast product of both operands before reducing it
// (hundreds of millions of floats for an LM head), by one built from two
// DotGenerals and a Transpose. It runs once per process; the replacement is
// checked against the stock gradient in model_vjp_test.go.
var installDotGeneralVJP = sync.OnceFunc(func() {
	stock := graph.VJPRegistration[graph.NodeTypeDotGeneral]
	graph.VJPRegistration[graph.NodeTypeDotGeneral] = func(node *graph.Node, vs []*graph.Node, out shapes.Shape) []*graph.Node {
		axes, ok := dotGeneralAxesOf(node)
		if !ok {
			return stock(node, vs, out)
		}
		return dotGeneralVJP(node.Inputs()[0], node.Inputs()[1], vs[0], axes)
	}
})

// dotAxes are the contracting and batch axes of a DotGeneral node.
type dotAxes struct {
	lhsContract, lhsBatch, rhsContract, rhsBatch []int
}

// dotGeneralAxesOf reads the axes of a DotGeneral node. GoMLX keeps them in an
// unexported struct, so they are read by reflection; ok is false if its layout
// ever changes, and the caller then falls back to the stock gradient.
func dotGeneralAxesOf(node *graph.Node) (axes dotAxes, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	in := reflect.ValueOf(node).Elem().FieldByName("inputs")
	if !in.IsValid() || in.IsNil() {
		return axes, false
	}
	params := in.Elem()
	if params.Kind() == reflect.Pointer {
		params = params.Elem()
	}
	read := func(name string) ([]int, bool) {
		f := params.FieldByName(name)
		if !f.IsValid() || f.Kind() != reflect.Slice {
			return nil, false
		}
		s := make([]int, f.Len())
		for i := range s {
			s[i] = int(f.Index(i).Int())
		}
		return s, true
	}
	var ok1, ok2, ok3, ok4 bool
	axes.lhsContract, ok1 = read("lhsContractingAxes")
	axes.lhsBatch, ok2 = read("lhsBatchAxes")
	axes.rhsContract, ok3 = read("rhsContractingAxes")
	axes.rhsBatch, ok4 = read("rhsBatchAxes")
	return axes, ok1 && ok2 && ok3 && ok4
}

// crossAxes lists the axes of an operand of the given rank that are neither
// contracted nor batch axes, in order.
func crossAxes(rank int, contract, batch []int) []int {
	var cross []int
	for a := range rank {
		if !slices.Contains(contract, a) && !slices.Contains(batch, a) {
			cross = append(cross, a)
		}
	}
	return cross
}

// dotGeneralVJP returns the gradients of out = DotGeneral(lhs, rhs) with
// respect to lhs and rhs, given v = dLoss/dOut whose layout is
// [batch..., lhsCross..., rhsCross...].
func dotGeneralVJP(lhs, rhs, v *graph.Node, ax dotAxes) []*graph.Node {
	nb := len(ax.lhsBatch)
	lhsCross := crossAxes(lhs.Rank(), ax.lhsContract, ax.lhsBatch)
	rhsCross := crossAxes(rhs.Rank(), ax.rhsContract, ax.rhsBatch)
	vBatch := seq(0, nb)
	vLhsCross := seq(nb, len(lhsCross))
	vRhsCross := seq(nb+len(lhsCross), len(rhsCross))
	return []*graph.Node{
		gradOperand(lhs.Rank(), ax.lhsBatch, lhsCross, ax.lhsContract, ax.rhsContract,
			v, vRhsCross, vBatch, rhs, rhsCross, ax.rhsBatch),
		gradOperand(rhs.Rank(), ax.rhsBatch, rhsCross, ax.rhsContract, ax.lhsContract,
			v, vLhsCross, vBatch, lhs, lhsCross, ax.lhsBatch),
	}
}

// gradOperand computes the gradient of one operand ("this") of a DotGeneral:
// v contracted with the other operand over the other operand's cross axes,
// then transposed back into this operand's axis order.
func gradOperand(rank int, thisBatch, thisCross, thisContract, otherContract []int,
	v *graph.Node, vOtherCross, vBatch []int, other *graph.Node, otherCross, otherBatch []int) *graph.Node {
	// Result layout: [batch..., thisCross..., other's remaining axes in
	// increasing order (these are exactly otherContract, sorted)].
	g := graph.DotGeneral(v, vOtherCross, vBatch, other, otherCross, otherBatch)
	sortedOther := slices.Clone(otherContract)
	slices.Sort(sortedOther)
	nb := len(thisBatch)
	perm := make([]int, rank)
	for i, a := range thisBatch {
		perm[a] = i
	}
	for j, a := range thisCross {
		perm[a] = nb + j
	}
	for k, a := range thisContract {
		perm[a] = nb + len(thisCross) + slices.Index(sortedOther, otherContract[k])
	}
	if isIdentity(perm) {
		return g
	}
	return graph.TransposeAllAxes(g, perm...)
}

func seq(start, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = start + i
	}
	return s
}

func isIdentity(perm []int) bool {
	for i, p := range perm {
		if i != p {
			return false
		}
	}
	return true
}
