package learner

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// TestSoftDecisionsWeighHazard checks the soft-label diagnostic's
// instances against the hard-labelled ones of the same dialogues: the
// opening turn is unchanged, and every later decision is two targets at
// its position, [Terminate] weighted p·w and [Continue] (1−p)·w, the
// logged one keeping the turn's text and the other ending at the decision.
func TestSoftDecisionsWeighHazard(t *testing.T) {
	ds := generatedCorpus(t, 4, 3, 4, 3)
	tok := corpusTokenizer(t, ds)
	cont, _ := tok.TokenID(inference.TokContinue)
	term, _ := tok.TokenID(inference.TokTerminate)
	ua := simulator.DefaultUserAgentConfig()
	risks := simulator.TrainingRisks(ds, 4)
	const w = 20
	// A made-up hazard per session and exchange, so that every decision
	// has its own.
	hazard := func(d schema.Dialogue, k int) float64 { return float64(len(d.SessionID)%7+k+1) / 16 }
	hazards := func(d schema.Dialogue) ([]float64, error) {
		out := make([]float64, len(d.Exchanges))
		for k := range out {
			out[k] = hazard(d, k)
		}
		return out, nil
	}
	hard, err := buildInstances(RoleUser, tok, ua, npcPrompt{}, ds, risks, 4096, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	soft, err := buildInstances(RoleUser, tok, ua, npcPrompt{}, ds, risks, 4096, w, hazards)
	if err != nil {
		t.Fatal(err)
	}
	decision := func(in instance) int { return weightedSpans(in.weights)[0][0] + 1 }
	i, pairs, ended := 0, 0, 0
	for _, d := range ds {
		turns := len(d.Exchanges)
		if d.Reason.PlayerEnded() {
			turns++
		}
		for j := range turns {
			h := hard[0]
			hard = hard[1:]
			pos := decision(h)
			if h.weights[pos] != w {
				t.Fatalf("%s turn %d: hard decision weighted %g, want %d", d.SessionID, j+1, h.weights[pos], w)
			}
			if j == 0 {
				if !slices.Equal(soft[i].tokens, h.tokens) || !slices.Equal(soft[i].weights, h.weights) {
					t.Fatalf("%s: the opening turn changed", d.SessionID)
				}
				i++
				continue
			}
			logged, other := soft[i], soft[i+1]
			i += 2
			p := float32(hazard(d, j-1))
			want := map[int]float32{term: p * w, cont: (1 - p) * w}
			if !slices.Equal(logged.tokens, h.tokens) {
				t.Fatalf("%s turn %d: the logged copy's tokens differ", d.SessionID, j+1)
			}
			if got := logged.weights[pos]; got != want[h.tokens[pos]] {
				t.Errorf("%s turn %d: logged %d weighted %g, want %g", d.SessionID, j+1, h.tokens[pos], got, want[h.tokens[pos]])
			}
			for k := range h.weights {
				if k != pos && logged.weights[k] != h.weights[k] {
					t.Fatalf("%s turn %d: the logged copy's weight at %d moved", d.SessionID, j+1, k)
				}
			}
			if len(other.tokens) != pos+1 || !slices.Equal(other.tokens[:pos], h.tokens[:pos]) {
				t.Fatalf("%s turn %d: the other copy is not the prefix up to the decision", d.SessionID, j+1)
			}
			if o := other.tokens[pos]; o == h.tokens[pos] || other.weights[pos] != want[o] || other.weighted() != 1 {
				t.Errorf("%s turn %d: other copy %d weighted %g (%d weighted tokens), want the other decision weighted %g alone",
					d.SessionID, j+1, o, other.weights[pos], other.weighted(), want[o])
			}
			pairs++
			if h.tokens[pos] == term {
				ended++
			}
		}
	}
	if len(hard) != 0 || i != len(soft) {
		t.Fatalf("%d hard and %d soft instances left over", len(hard), len(soft)-i)
	}
	if pairs == 0 || ended == 0 {
		t.Fatalf("%d soft decisions, %d of them logged as [Terminate]: the corpus checks nothing", pairs, ended)
	}
}

// TestProductNeverTrainsOnHiddenHazard checks that only the diagnostic can
// train on soft labels: the default and JSON-read configurations carry
// none, and no non-test Go code of the module but sft.go's, where the
// option is declared and handed to buildInstances, names it.
func TestProductNeverTrainsOnHiddenHazard(t *testing.T) {
	for _, r := range []Role{RoleUser, RoleNPC} {
		if DefaultSFTConfig(r).SoftLabelDiagnostic != nil {
			t.Fatalf("DefaultSFTConfig(%s) trains on soft labels", r)
		}
	}
	raw, err := json.Marshal(DefaultSFTConfig(RoleUser))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(string(raw)), "soft") {
		t.Fatalf("the SFT config's JSON names the soft labels: %s", raw)
	}
	uses := map[string]int{}
	root := ".."
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case e.IsDir() && path != root && (strings.HasPrefix(e.Name(), ".") || e.Name() == "var" || e.Name() == "testdata"):
			return filepath.SkipDir
		case e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && id.Name == "SoftLabelDiagnostic" {
				uses[filepath.ToSlash(path)]++
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"../learner/sft.go": 2}; !maps.Equal(uses, want) {
		t.Fatalf("non-test code naming SoftLabelDiagnostic: %v, want %v (its declaration and TrainSFT's use)", uses, want)
	}
}
