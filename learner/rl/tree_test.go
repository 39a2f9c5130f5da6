package rl

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

// countingPolicy names each sampled turn "t1", "t2", … in sampling order.
type countingPolicy struct {
	mu      sync.Mutex
	n       int
	batches []int
}

func (p *countingPolicy) GenerateBatch(_ context.Context, states []State) ([]Generation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.batches = append(p.batches, len(states))
	out := make([]Generation, len(states))
	for i := range out {
		p.n++
		out[i] = Generation{Text: fmt.Sprintf("t%d", p.n)}
	}
	return out, nil
}

// scriptEnv rewards turns by a function of their text.
type scriptEnv struct {
	reply func(t Turn) Reply
}

func (e scriptEnv) Respond(_ context.Context, _ int, turns []Turn) ([]Reply, error) {
	out := make([]Reply, len(turns))
	for i, t := range turns {
		out[i] = e.reply(t)
	}
	return out, nil
}

// patientEnv never terminates; its reward is a hash of the turn in (0, 1).
var patientEnv = scriptEnv{reply: func(t Turn) Reply {
	h := fnv.New32a()
	h.Write([]byte(t.NPC))
	r := float64(h.Sum32()%1000) / 1000
	return Reply{Text: "ok " + t.NPC, P: 1 - r, Reward: r}
}}

// moodyEnv terminates a third of the turns.
var moodyEnv = scriptEnv{reply: func(t Turn) Reply {
	h := fnv.New32a()
	h.Write([]byte(t.NPC))
	if h.Sum32()%3 == 0 {
		return Reply{Terminated: true, P: 0.9}
	}
	return Reply{Text: "ok", P: 0.2, Reward: 0.8}
}}

func TestBudgetAndNodeCountClosedForm(t *testing.T) {
	def := DefaultTreeConfig()
	if got := def.Budget(); got != 1744 {
		t.Errorf("Budget() of the paper's defaults = %d; want 1744", got)
	}
	var ls []int
	for i := 1; i <= def.Depth; i++ {
		ls = append(ls, def.Range(i))
	}
	if got, want := fmt.Sprint(ls), "[5 4 4 4 4 3 3 2 1 0]"; got != want {
		t.Errorf("ranges = %s; want %s", got, want)
	}
	chain := def
	chain.Shape = ShapeChain
	full := def
	full.Shape, full.Depth = ShapeFull, 4
	small := TreeConfig{Shape: ShapeAdaptive, W: 3, Width: 2, Gamma: 2, FixedRange: -1, Omega: 0.3, Aggregate: true, Depth: 3}
	fixed := def
	fixed.FixedRange = 3
	noAgg := def
	noAgg.Aggregate = false
	tests := []struct {
		name string
		cfg  TreeConfig
		want int
	}{
		{"paper defaults", def, 1606},
		{"W3 w2 L3", small, 25},
		{"chain", chain, 80},
		{"full W8 L4", full, 8 + 64 + 512 + 4096},
		{"fixed range 3", fixed, fixed.NodesWithoutTerminations()},
		{"aggregation off", noAgg, 80},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cfg.NodesWithoutTerminations(); got != tc.want {
				t.Errorf("NodesWithoutTerminations() = %d; want %d", got, tc.want)
			}
			b, err := NewBuilder(tc.cfg, &countingPolicy{}, patientEnv)
			if err != nil {
				t.Fatal(err)
			}
			tree, err := b.Build(context.Background(), &Prompt{ID: "p"}, 0, rand.New(rand.NewPCG(1, 2)))
			if err != nil {
				t.Fatal(err)
			}
			if tree.Nodes != tc.want {
				t.Errorf("built %d nodes; want %d", tree.Nodes, tc.want)
			}
			if tc.cfg.Shape != ShapeFull {
				if bound := tc.cfg.Budget() + tc.cfg.W*tc.cfg.Depth; tree.Nodes > bound {
					t.Errorf("built %d nodes; want at most S + W·L = %d", tree.Nodes, bound)
				}
				if len(tree.Groups) != tc.cfg.Depth {
					t.Errorf("%d groups; want %d", len(tree.Groups), tc.cfg.Depth)
				}
			}
			for _, g := range tree.Groups {
				if len(g.Nodes) != tc.cfg.W {
					t.Errorf("group at depth %d has %d nodes; want %d", g.Depth, len(g.Nodes), tc.cfg.W)
				}
			}
		})
	}
}

func TestTerminationsShrinkTheTree(t *testing.T) {
	// A chain keeps W per depth while any group node goes on, so only
	// trees with expansions must shrink.
	for _, shape := range []Shape{ShapeAdaptive, ShapeFull} {
		cfg := DefaultTreeConfig()
		cfg.Shape = shape
		if shape == ShapeFull {
			cfg.W, cfg.Depth = 4, 4
		}
		b, err := NewBuilder(cfg, &countingPolicy{}, moodyEnv)
		if err != nil {
			t.Fatal(err)
		}
		tree, err := b.Build(context.Background(), &Prompt{ID: "p"}, 0, rand.New(rand.NewPCG(3, 4)))
		if err != nil {
			t.Fatal(err)
		}
		if want := cfg.NodesWithoutTerminations(); tree.Nodes >= want {
			t.Errorf("%s: %d nodes with terminations; want fewer than %d", shape, tree.Nodes, want)
		}
		for _, g := range tree.Groups {
			for _, n := range g.Nodes {
				// r = 1 − p whatever the draw: the terminated turns' p is 0.9.
				if n.Reply.Terminated && math.Abs(n.Reply.Reward-0.1) > 1e-12 {
					t.Errorf("%s: terminated node has reward %g; want 1 − p = 0.1", shape, n.Reply.Reward)
				}
			}
		}
	}
}

func TestMainTrajectoryAndReuse(t *testing.T) {
	cfg := DefaultTreeConfig()
	b, err := NewBuilder(cfg, &countingPolicy{}, patientEnv)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := b.Build(context.Background(), &Prompt{ID: "p"}, 0, rand.New(rand.NewPCG(5, 6)))
	if err != nil {
		t.Fatal(err)
	}
	if len(tree.Main) != cfg.Depth-1 {
		t.Fatalf("main trajectory has %d nodes; want %d", len(tree.Main), cfg.Depth-1)
	}
	for i, g := range tree.Groups {
		wantReused := cfg.Width
		if i == 0 {
			wantReused = 0
		}
		if g.Reused != wantReused {
			t.Errorf("group %d reused %d; want %d", g.Depth, g.Reused, wantReused)
		}
		for _, n := range g.Nodes {
			if len(n.History()) != g.Depth {
				t.Errorf("group %d node history has %d exchanges; want %d", g.Depth, len(n.History()), g.Depth)
			}
			if i > 0 && n.Parent != tree.Main[i-1] {
				t.Errorf("group %d node is not a child of the main node", g.Depth)
			}
		}
		if i+1 < len(tree.Groups) && !contains(g.Nodes, tree.Main[i]) {
			t.Errorf("main node at depth %d is not in its group", g.Depth)
		}
	}
}

func contains(ns []*Node, x *Node) bool {
	for _, n := range ns {
		if n == x {
			return true
		}
	}
	return false
}

func TestReturnAndAdvantagesHandComputed(t *testing.T) {
	// n1 (r .8) → c1 (r .6) → d1 (r .4), d2 (r .2);  n1 → c2 (terminated);
	// n2 (r .5), a leaf by termination? no: a node without children.
	n1 := &Node{Depth: 1, Reply: Reply{Reward: 0.8}}
	c1 := &Node{Depth: 2, Parent: n1, Reply: Reply{Reward: 0.6}}
	c2 := &Node{Depth: 2, Parent: n1, Reply: Reply{Terminated: true}}
	d1 := &Node{Depth: 3, Parent: c1, Reply: Reply{Reward: 0.4}}
	d2 := &Node{Depth: 3, Parent: c1, Reply: Reply{Reward: 0.2}}
	n1.Children = []*Node{c1, c2}
	c1.Children = []*Node{d1, d2}
	tests := []struct {
		name     string
		n        *Node
		boundary int
		want     float64
	}{
		// c1 = .3·.6 + .7·(.4+.2)/2 = .39; n1 = .3·.8 + .7·(.39+0)/2 = .3765
		{"range 2", n1, 3, 0.3765},
		// c1 on the boundary: R = .6; n1 = .24 + .7·.3 = .45
		{"range 1", n1, 2, 0.45},
		{"range 0", n1, 1, 0.8},
		{"terminated", c2, 3, 0},
		{"depth L", d1, 9, 0.4},
	}
	for _, tc := range tests {
		if got := Return(tc.n, tc.boundary, 3, 0.3); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: Return = %.6f; want %.6f", tc.name, got, tc.want)
		}
	}
	// mean 2.5, population std √1.25.
	got := Advantages([]float64{1, 2, 3, 4}, 0)
	s := math.Sqrt(1.25) + 1e-6
	want := []float64{-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Errorf("Advantages[%d] = %.9f; want %.9f", i, got[i], want[i])
		}
	}
	if got := Advantages([]float64{0.7, 0.7, 0.7}, 0); math.Abs(got[0]) > 1e-6 || math.Abs(got[2]) > 1e-6 {
		t.Errorf("Advantages of equal returns = %v; want zeros", got)
	}
}

func TestBuildHandComputed(t *testing.T) {
	// W=2, w=1, L=2, γ=2: l_1 = round(2·ln 2) = 1, l_2 = 0. Sampling order:
	// t1, t2 (group 1), t3 under t1 and t4 under t2 (expansion), then t5
	// next to the reused child of the main node (group 2).
	rewards := map[string]float64{"t1": 0.9, "t2": 0.5, "t3": 0.1, "t4": 0.7}
	env := scriptEnv{reply: func(t Turn) Reply {
		r, ok := rewards[t.NPC]
		if !ok {
			return Reply{Terminated: true, P: 1}
		}
		return Reply{Text: "u", P: 1 - r, Reward: r}
	}}
	cfg := TreeConfig{Shape: ShapeAdaptive, W: 2, Width: 1, Gamma: 2, FixedRange: -1, Omega: 0.3, Aggregate: true, Depth: 2}
	pol := &countingPolicy{}
	b, err := NewBuilder(cfg, pol, env)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := b.Build(context.Background(), &Prompt{ID: "p"}, 0, rand.New(rand.NewPCG(7, 8)))
	if err != nil {
		t.Fatal(err)
	}
	if tree.Nodes != 5 || len(tree.Groups) != 2 {
		t.Fatalf("tree has %d nodes, %d groups; want 5, 2", tree.Nodes, len(tree.Groups))
	}
	if got, want := fmt.Sprint(pol.batches), "[2 2 1]"; got != want {
		t.Errorf("generation batches = %s; want %s (one batch per level)", got, want)
	}
	g1 := tree.Groups[0]
	// R(t1) = .3·.9 + .7·.1 = .34; R(t2) = .3·.5 + .7·.7 = .64
	for i, want := range []float64{0.34, 0.64} {
		if math.Abs(g1.Returns[i]-want) > 1e-12 {
			t.Errorf("group 1 return %d = %.6f; want %.6f", i, g1.Returns[i], want)
		}
	}
	a := 0.15 / (0.15 + 1e-6)
	for i, want := range []float64{-a, a} {
		if math.Abs(g1.Advantages[i]-want) > 1e-9 {
			t.Errorf("group 1 advantage %d = %.9f; want %.9f", i, g1.Advantages[i], want)
		}
	}
	g2 := tree.Groups[1]
	if g2.Reused != 1 || g2.Nodes[1].Gen.Text != "t5" {
		t.Fatalf("group 2 = reused %d, second node %q; want 1, t5", g2.Reused, g2.Nodes[1].Gen.Text)
	}
	reusedR := rewards[g2.Nodes[0].Gen.Text]
	if math.Abs(g2.Returns[0]-reusedR) > 1e-12 || g2.Returns[1] != 0 {
		t.Errorf("group 2 returns = %v; want [%g 0]", g2.Returns, reusedR)
	}
}

func TestTreeConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*TreeConfig)
		ok   bool
	}{
		{"default", func(*TreeConfig) {}, true},
		{"bad shape", func(c *TreeConfig) { c.Shape = "bush" }, false},
		{"group of one", func(c *TreeConfig) { c.W = 1 }, false},
		{"width above W", func(c *TreeConfig) { c.Width = 9 }, false},
		{"omega above 1", func(c *TreeConfig) { c.Omega = 1.5 }, false},
		{"no depth", func(c *TreeConfig) { c.Depth = 0 }, false},
		{"fixed range", func(c *TreeConfig) { c.FixedRange = 3 }, true},
	}
	for _, tc := range tests {
		c := DefaultTreeConfig()
		tc.edit(&c)
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v; want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// TestRewardIsOneMinusPWhateverTheDraw checks that a node's training reward
// is 1 − p whether the user went on or ended: two siblings with the same p
// earn the same reward and so the same advantage.
func TestRewardIsOneMinusPWhateverTheDraw(t *testing.T) {
	env := scriptEnv{reply: func(t Turn) Reply {
		if t.NPC == "t1" {
			return Reply{Terminated: true, P: 0.3}
		}
		return Reply{Text: "u", P: 0.3, Reward: 0.7}
	}}
	cfg := TreeConfig{Shape: ShapeChain, W: 2, Depth: 1}
	b, err := NewBuilder(cfg, &countingPolicy{}, env)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := b.Build(context.Background(), &Prompt{ID: "p"}, 0, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	g := tree.Groups[0]
	for i, n := range g.Nodes {
		if math.Abs(n.Reply.Reward-0.7) > 1e-12 || math.Abs(g.Returns[i]-0.7) > 1e-12 {
			t.Errorf("node %s (terminated %v): reward %g, return %g; want 1 − p = 0.7", n.Gen.Text, n.Reply.Terminated, n.Reply.Reward, g.Returns[i])
		}
		if g.Advantages[i] != 0 {
			t.Errorf("node %s: advantage %g; want 0 (same p)", n.Gen.Text, g.Advantages[i])
		}
	}
}

// TestAdvantagesStdFloor checks the floor under the group standard
// deviation: returns 0.50 and 0.51 (std 0.005) give ±0.1 with a floor of
// 0.05 instead of ±1.
func TestAdvantagesStdFloor(t *testing.T) {
	tests := []struct {
		name  string
		floor float64
		want  float64
	}{
		{"no floor", 0, 0.005 / (0.005 + 1e-6)},
		{"floor above the std", 0.05, 0.005 / (0.05 + 1e-6)},
		{"floor below the std", 0.001, 0.005 / (0.005 + 1e-6)},
	}
	for _, tc := range tests {
		got := Advantages([]float64{0.50, 0.51}, tc.floor)
		if math.Abs(got[0]+tc.want) > 1e-9 || math.Abs(got[1]-tc.want) > 1e-9 {
			t.Errorf("%s: Advantages = %v; want ±%.6f", tc.name, got, tc.want)
		}
	}
	if err := (TreeConfig{Shape: ShapeChain, W: 2, Depth: 1, StdFloor: -0.1}).Validate(); err == nil {
		t.Error("Validate accepted a negative std floor")
	}
}
