package rl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// Shape is how a rollout tree grows.
type Shape string

// Rollout shapes.
const (
	// ShapeAdaptive is AT-GRPO's tree: a group of W per depth of the main
	// trajectory, each non-leaf group node expanded w-ary over its
	// adaptive observation range.
	ShapeAdaptive Shape = "adaptive"
	// ShapeChain is GRPO's (and GSPO's) rollout: a group of W per depth,
	// no expansion, immediate rewards.
	ShapeChain Shape = "chain"
	// ShapeFull is TreeRPO's rollout: every non-leaf node down to depth L
	// has W children; every set of siblings is a group.
	ShapeFull Shape = "full"
)

// TreeConfig is the geometry of a rollout tree (DESIGN.md §7).
type TreeConfig struct {
	Shape Shape `json:"shape"`
	// W is the group size; Width (w) the branching of the expansion.
	W     int `json:"group_size"`
	Width int `json:"width"`
	// Gamma scales the adaptive observation range l_i = round(γ·ln(L−i+1)).
	Gamma float64 `json:"gamma"`
	// FixedRange, when non-negative, replaces the adaptive range by a
	// constant (still capped at L−i): the "fixed range" ablation. −1 keeps
	// the adaptive range.
	FixedRange int `json:"fixed_range"`
	// Omega weighs the immediate reward against the children's mean in
	// R(n) = ω·r_n + (1−ω)·mean R(c).
	Omega float64 `json:"omega"`
	// Aggregate off uses the immediate reward as the return of every group
	// node (the "tree aggregation off" ablation). The expansion then has
	// nothing to feed, so it is skipped: the rollouts are GRPO's.
	Aggregate bool `json:"aggregate"`
	// Depth is L, the number of exchanges of the longest dialogue.
	Depth int `json:"depth"`
	// StdFloor bounds the group standard deviation from below in the
	// advantage normalisation, so that return differences far smaller than
	// the floor (noise) stay small advantages instead of becoming ±1.
	StdFloor float64 `json:"std_floor"`
}

// DefaultTreeConfig returns the paper's AT-GRPO tree: W=8, w=2, γ=2,
// ω=0.3, L=10, with a group-std floor of 0.05 (returns lie in [0, 1]).
func DefaultTreeConfig() TreeConfig {
	return TreeConfig{Shape: ShapeAdaptive, W: 8, Width: 2, Gamma: 2, FixedRange: -1, Omega: 0.3, Aggregate: true, Depth: 10, StdFloor: 0.05}
}

// Validate reports the first inconsistent field.
func (c TreeConfig) Validate() error {
	switch {
	case c.Shape != ShapeAdaptive && c.Shape != ShapeChain && c.Shape != ShapeFull:
		return fmt.Errorf("tree config: shape %q: want adaptive, chain or full", c.Shape)
	case c.W < 2:
		return fmt.Errorf("tree config: group size %d must be at least 2", c.W)
	case c.Shape == ShapeAdaptive && (c.Width < 1 || c.Width > c.W):
		return fmt.Errorf("tree config: width %d must be in [1, group size %d]", c.Width, c.W)
	case c.Gamma < 0 || math.IsNaN(c.Gamma):
		return fmt.Errorf("tree config: gamma %g must be non-negative", c.Gamma)
	case c.Omega < 0 || c.Omega > 1:
		return fmt.Errorf("tree config: omega %g must be in [0, 1]", c.Omega)
	case c.Depth < 1:
		return fmt.Errorf("tree config: depth %d must be at least 1", c.Depth)
	case c.FixedRange < -1:
		return fmt.Errorf("tree config: fixed range %d must be -1 (adaptive) or non-negative", c.FixedRange)
	case c.StdFloor < 0 || math.IsNaN(c.StdFloor):
		return fmt.Errorf("tree config: std floor %g must be non-negative", c.StdFloor)
	}
	return nil
}

// Range is the observation range l_i of the group at depth i (1-based):
// round(γ·ln(L−i+1)) or the fixed range, capped at L−i; 0 for chains and
// when aggregation is off; L−i for full trees.
func (c TreeConfig) Range(i int) int {
	switch {
	case c.Shape == ShapeChain || !c.Aggregate:
		return 0
	case c.Shape == ShapeFull:
		return c.Depth - i
	}
	l := c.FixedRange
	if l < 0 {
		l = int(math.Round(c.Gamma * math.Log(float64(c.Depth-i+1))))
	}
	return min(l, c.Depth-i)
}

// subtreeSize is Σ_{t=1}^{l} w^t, the nodes of a full w-ary subtree l
// levels deep below its root.
func subtreeSize(w, l int) int {
	n, p := 0, 1
	for range l {
		p *= w
		n += p
	}
	return n
}

// Budget is the paper's rollout budget per tree without terminations,
// S = Σ_{i=1}^{L} W·Σ_{t=1}^{l_i} w^t: every group node pays for a full
// expansion of its own. It does not count the W·L group nodes. For chains
// it is 0; for full trees it is the W^2+…+W^L nodes below the first group.
func (c TreeConfig) Budget() int {
	if c.Shape == ShapeFull {
		return subtreeSize(c.W, c.Depth) - c.W
	}
	s := 0
	for i := 1; i <= c.Depth; i++ {
		s += c.W * subtreeSize(c.Width, c.Range(i))
	}
	return s
}

// NodesWithoutTerminations is the exact number of nodes a Builder creates
// for one tree when no user ever terminates.
//
// Adaptive trees reuse, at depth i ≥ 2, the w children of the chosen node
// together with the subtrees already grown below them (l_{i−1}−1 levels
// deep); such a reused node is counted once, where it was first sampled.
// Each depth therefore adds its W − w new group nodes (W at depth 1),
// a full l_i-level expansion below each new group node, and below each
// reused node only the levels its old subtree lacks:
//
//	N = W + (L−1)(W−w)
//	  + Σ_{i=1}^{L} (W − w·[i>1])·E(l_i)
//	  + Σ_{i=2}^{L} w·(E(l_i) − E(min(l_i, l_{i−1}−1))),   E(l) = Σ_{t=1}^{l} w^t.
//
// With the paper's defaults (W=8, w=2, γ=2, L=10; l = 5,4,4,4,4,3,3,2,1,0)
// N = 62 + 1,432 + 112 = 1,606, below S + W·L = 1,744 + 80 = 1,824, which
// counts every group node and its expansion as if nothing were reused.
// Chains create W·L nodes, full trees W + W² + … + W^L.
func (c TreeConfig) NodesWithoutTerminations() int {
	if c.Shape == ShapeFull {
		return subtreeSize(c.W, c.Depth)
	}
	n := 0
	for i := 1; i <= c.Depth; i++ {
		l := c.Range(i)
		reused := 0
		if i > 1 && c.Range(i-1) >= 1 {
			reused = c.Width
		}
		n += c.W - reused
		n += (c.W - reused) * subtreeSize(c.Width, l)
		if reused > 0 {
			have := min(l, c.Range(i-1)-1)
			n += reused * (subtreeSize(c.Width, l) - subtreeSize(c.Width, have))
		}
	}
	return n
}

// Node is one exchange in a rollout tree: the NPC's turn at Depth and the
// user's reply. The node's Reply.Reward is the training reward 1 − P
// whatever the termination draw decided: the draw only decides whether the
// dialogue goes on below the node (Leaf), so two siblings with the same P
// earn the same reward.
type Node struct {
	Depth    int
	Parent   *Node // nil at depth 1
	Children []*Node
	Gen      Generation
	Reply    Reply
}

// Leaf reports whether the dialogue ends at n: the user terminated or n is
// at the last depth.
func (n *Node) Leaf(depth int) bool { return n.Reply.Terminated || n.Depth >= depth }

// History is the dialogue up to and including n.
func (n *Node) History() []Exchange {
	h := make([]Exchange, n.Depth)
	for x := n; x != nil; x = x.Parent {
		h[x.Depth-1] = Exchange{NPC: x.Gen.Text, User: x.Reply.Text, Risk: x.Reply.P}
	}
	return h
}

// Group is a set of W sibling nodes that share a context, with their
// returns and group-normalised advantages.
type Group struct {
	Depth int
	// Range is the observation range l_i the returns were aggregated over.
	Range      int
	Nodes      []*Node
	Returns    []float64
	Advantages []float64
	// Reused is how many of Nodes were sampled before this group formed.
	Reused int
}

// Tree is the rollout of one prompt.
type Tree struct {
	Prompt *Prompt
	Groups []Group
	// Nodes counts every node created (each NPC turn sampled and answered).
	Nodes int
	// Main is the main trajectory: the node chosen at each depth.
	Main []*Node
}

// Stats summarise a tree's group nodes.
func (t *Tree) Stats() (groupNodes int, meanReward float64) {
	s := 0.0
	for _, g := range t.Groups {
		for _, n := range g.Nodes {
			s += n.Reply.Reward
			groupNodes++
		}
	}
	if groupNodes == 0 {
		return 0, 0
	}
	return groupNodes, s / float64(groupNodes)
}

// Return computes R(n) over a range whose boundary is at depth boundary:
// r_n for a leaf, a node on the boundary or one without children, otherwise
// ω·r_n + (1−ω)·mean over children of R(c).
func Return(n *Node, boundary, depth int, omega float64) float64 {
	r := n.Reply.Reward
	if n.Leaf(depth) || n.Depth >= boundary || len(n.Children) == 0 {
		return r
	}
	s := 0.0
	for _, c := range n.Children {
		s += Return(c, boundary, depth, omega)
	}
	return omega*r + (1-omega)*s/float64(len(n.Children))
}

// Advantages normalises returns within a group:
// (R − mean)/(max(std, floor) + 1e-6), with the population standard
// deviation. A floor of 0 is GRPO's plain normalisation.
func Advantages(returns []float64, floor float64) []float64 {
	if len(returns) == 0 {
		return nil
	}
	mean := 0.0
	for _, r := range returns {
		mean += r
	}
	mean /= float64(len(returns))
	v := 0.0
	for _, r := range returns {
		v += (r - mean) * (r - mean)
	}
	std := math.Sqrt(v / float64(len(returns)))
	out := make([]float64, len(returns))
	for i, r := range returns {
		out[i] = (r - mean) / (max(std, floor) + 1e-6)
	}
	return out
}

// ErrShortBatch is returned when a Policy or Environment answers a batch
// with the wrong number of results.
var ErrShortBatch = errors.New("rl: batch answered with the wrong number of results")

// Builder grows rollout trees, batching generation and the user's answers
// across every node of a level.
type Builder struct {
	cfg    TreeConfig
	policy Policy
	env    Environment
}

// NewBuilder checks cfg and returns a Builder.
func NewBuilder(cfg TreeConfig, policy Policy, env Environment) (*Builder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if policy == nil || env == nil {
		return nil, errors.New("new builder: policy and environment are required")
	}
	return &Builder{cfg: cfg, policy: policy, env: env}, nil
}

// Config returns the tree geometry.
func (b *Builder) Config() TreeConfig { return b.cfg }

// Build grows one tree for prompt. step is passed to the Environment (the
// dynamic threshold's step); rng picks the main trajectory.
func (b *Builder) Build(ctx context.Context, prompt *Prompt, step int, rng *rand.Rand) (*Tree, error) {
	t := &Tree{Prompt: prompt}
	if b.cfg.Shape == ShapeFull {
		if err := b.buildFull(ctx, t, step); err != nil {
			return nil, fmt.Errorf("build tree %q: %w", prompt.ID, err)
		}
		return t, nil
	}
	var main *Node
	var reused []*Node
	for i := 1; i <= b.cfg.Depth; i++ {
		fresh, err := b.sample(ctx, t, prompt, step, []*Node{main}, b.cfg.W-len(reused), i)
		if err != nil {
			return nil, fmt.Errorf("build tree %q depth %d: %w", prompt.ID, i, err)
		}
		nodes := append(append([]*Node(nil), reused...), fresh...)
		l := b.cfg.Range(i)
		var open []*Node
		for _, n := range nodes {
			if !n.Leaf(b.cfg.Depth) {
				open = append(open, n)
			}
		}
		if err := b.expand(ctx, t, prompt, step, open, l, b.cfg.Width); err != nil {
			return nil, fmt.Errorf("build tree %q depth %d: %w", prompt.ID, i, err)
		}
		g := Group{Depth: i, Range: l, Nodes: nodes, Reused: len(reused)}
		for _, n := range nodes {
			g.Returns = append(g.Returns, Return(n, i+l, b.cfg.Depth, b.cfg.Omega))
		}
		g.Advantages = Advantages(g.Returns, b.cfg.StdFloor)
		t.Groups = append(t.Groups, g)
		if len(open) == 0 {
			break
		}
		main = open[rng.IntN(len(open))]
		t.Main = append(t.Main, main)
		reused = append([]*Node(nil), main.Children...)
	}
	return t, nil
}

// sample creates k children of each parent (nil parent: the prompt's root)
// at depth, generating every NPC turn in one batch and answering them in
// one batch.
func (b *Builder) sample(ctx context.Context, t *Tree, prompt *Prompt, step int, parents []*Node, k, depth int) ([]*Node, error) {
	if k <= 0 || len(parents) == 0 {
		return nil, nil
	}
	states := make([]State, 0, len(parents)*k)
	owners := make([]*Node, 0, len(parents)*k)
	for _, p := range parents {
		var h []Exchange
		if p != nil {
			h = p.History()
		}
		for range k {
			states = append(states, State{Prompt: prompt, History: h})
			owners = append(owners, p)
		}
	}
	gens, err := b.policy.GenerateBatch(ctx, states)
	if err != nil {
		return nil, fmt.Errorf("generate %d turns: %w", len(states), err)
	}
	if len(gens) != len(states) {
		return nil, fmt.Errorf("generate %d turns, got %d: %w", len(states), len(gens), ErrShortBatch)
	}
	turns := make([]Turn, len(states))
	for j := range states {
		turns[j] = Turn{State: states[j], NPC: gens[j].Text}
	}
	replies, err := b.env.Respond(ctx, step, turns)
	if err != nil {
		return nil, fmt.Errorf("answer %d turns: %w", len(turns), err)
	}
	if len(replies) != len(turns) {
		return nil, fmt.Errorf("answer %d turns, got %d: %w", len(turns), len(replies), ErrShortBatch)
	}
	out := make([]*Node, len(states))
	for j := range states {
		r := replies[j]
		r.Reward = 1 - r.P
		n := &Node{Depth: depth, Parent: owners[j], Gen: gens[j], Reply: r}
		if owners[j] != nil {
			owners[j].Children = append(owners[j].Children, n)
		}
		out[j] = n
	}
	t.Nodes += len(out)
	return out, nil
}

// expand grows each root into a width-ary subtree levels deep, one batch
// per level across all roots. Children that already exist (a reused
// subtree) are kept and only the missing ones are sampled.
func (b *Builder) expand(ctx context.Context, t *Tree, prompt *Prompt, step int, roots []*Node, levels, width int) error {
	frontier := roots
	for range levels {
		var need []*Node
		var counts []int
		for _, n := range frontier {
			if !n.Leaf(b.cfg.Depth) && len(n.Children) < width {
				need = append(need, n)
				counts = append(counts, width-len(n.Children))
			}
		}
		if err := b.sampleEach(ctx, t, prompt, step, need, counts); err != nil {
			return err
		}
		var next []*Node
		for _, n := range frontier {
			if !n.Leaf(b.cfg.Depth) {
				next = append(next, n.Children...)
			}
		}
		if len(next) == 0 {
			return nil
		}
		frontier = next
	}
	return nil
}

// sampleEach samples counts[j] children of parents[j] in one batch.
func (b *Builder) sampleEach(ctx context.Context, t *Tree, prompt *Prompt, step int, parents []*Node, counts []int) error {
	if len(parents) == 0 {
		return nil
	}
	var flat []*Node
	for j, p := range parents {
		for range counts[j] {
			flat = append(flat, p)
		}
	}
	// sample with k=1 per listed parent keeps a single batch.
	_, err := b.sample(ctx, t, prompt, step, flat, 1, flat[0].Depth+1)
	return err
}

// buildFull grows TreeRPO's full W-ary tree level by level; every set of
// siblings is a group whose returns aggregate down to the leaves.
func (b *Builder) buildFull(ctx context.Context, t *Tree, step int) error {
	top, err := b.sample(ctx, t, t.Prompt, step, []*Node{nil}, b.cfg.W, 1)
	if err != nil {
		return err
	}
	level := top
	sets := [][]*Node{top}
	for d := 2; d <= b.cfg.Depth; d++ {
		var open []*Node
		for _, n := range level {
			if !n.Leaf(b.cfg.Depth) {
				open = append(open, n)
			}
		}
		if len(open) == 0 {
			break
		}
		if _, err := b.sample(ctx, t, t.Prompt, step, open, b.cfg.W, d); err != nil {
			return err
		}
		level = level[:0:0]
		for _, n := range open {
			sets = append(sets, n.Children)
			level = append(level, n.Children...)
		}
	}
	for _, s := range sets {
		d := s[0].Depth
		g := Group{Depth: d, Range: b.cfg.Depth - d, Nodes: s}
		for _, n := range s {
			g.Returns = append(g.Returns, Return(n, b.cfg.Depth, b.cfg.Depth, b.cfg.Omega))
		}
		g.Advantages = Advantages(g.Returns, b.cfg.StdFloor)
		t.Groups = append(t.Groups, g)
	}
	return nil
}
