package inference

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

var tokUpdateHF = flag.Bool("update-hf", false, "rewrite testdata/tokenizer_go.json for testdata/tokenizer_hfcheck.js")

// tokHFFixture is testdata/tokenizer_hf_ids.json: texts and the ids that
// Hugging Face's tokenizers 0.22 gave them under tokenizer_go.json and
// tokenizer_hf.json (see testdata/tokenizer_hfcheck.js).
type tokHFFixture struct {
	Texts []string `json:"texts"`
	Go    [][]int  `json:"go"`
	HF    [][]int  `json:"hf"`
}

// TestTokenizerHFCompat checks both directions against Hugging Face: a
// tokenizer trained and saved here encodes as Hugging Face encodes it, and a
// tokenizer that Hugging Face trained loads here and encodes the same.
func TestTokenizerHFCompat(t *testing.T) {
	goPath := filepath.Join("testdata", "tokenizer_go.json")
	trained := tokTestTokenizer(t)
	if *tokUpdateHF {
		if err := trained.Save(goPath); err != nil {
			t.Fatalf("Save: %v", err)
		}
		t.Logf("wrote %s; now run testdata/tokenizer_hfcheck.js", goPath)
	}
	data, err := os.ReadFile(filepath.Join("testdata", "tokenizer_hf_ids.json"))
	if err != nil {
		t.Fatalf("read fixture: %v", err)
	}
	var fx tokHFFixture
	if err := json.Unmarshal(data, &fx); err != nil {
		t.Fatalf("parse fixture: %v", err)
	}
	if len(fx.Go) != len(fx.Texts) || len(fx.HF) != len(fx.Texts) {
		t.Fatalf("fixture has %d texts, %d go and %d hf encodings", len(fx.Texts), len(fx.Go), len(fx.HF))
	}

	// Training is deterministic, so the saved fixture is what training gives now.
	saved, err := os.ReadFile(goPath)
	if err != nil {
		t.Fatalf("read %s: %v", goPath, err)
	}
	now, err := trained.marshalHF()
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	if string(saved) != string(now) {
		t.Errorf("%s differs from what TrainTokenizer gives now; rerun with -update-hf and tokenizer_hfcheck.js", goPath)
	}

	for _, c := range []struct {
		file string
		want [][]int
	}{{"tokenizer_go.json", fx.Go}, {"tokenizer_hf.json", fx.HF}} {
		t.Run(c.file, func(t *testing.T) {
			tok, err := LoadTokenizer(filepath.Join("testdata", c.file))
			if err != nil {
				t.Fatalf("LoadTokenizer: %v", err)
			}
			for i, text := range fx.Texts {
				if got := tok.Encode(text); !slices.Equal(got, c.want[i]) {
					t.Errorf("Encode(%.60q) = %v;\nHugging Face gives %v", text, got, c.want[i])
				}
				if got := tok.Decode(c.want[i]); got != text {
					t.Errorf("Decode(Hugging Face ids of %.60q) = %.60q", text, got)
				}
			}
		})
	}
}
