package inference

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tokDailyDialogDir is where the shared data sets lie, beside the checkout.
var tokDailyDialogDir = filepath.Join("..", "..", "shared", "data", "dailydialog")

// tokReadLines reads a DailyDialog split, or skips the test when the shared
// data is not there.
func tokReadLines(tb testing.TB, name string) []string {
	tb.Helper()
	path := filepath.Join(tokDailyDialogDir, name)
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Skipf("DailyDialog %s not available (%v); it lies in shared/data beside the checkout", name, err)
	}
	return strings.SplitAfter(string(data), "\n")
}

// TestTrainTokenizerDailyDialog trains on DailyDialog's validation split and
// reports compression there and on unseen dialogues from the train split.
func TestTrainTokenizerDailyDialog(t *testing.T) {
	val := tokReadLines(t, "validation.txt")
	tok, err := TrainTokenizer(val, 4096)
	if err != nil {
		t.Fatalf("TrainTokenizer: %v", err)
	}
	if tok.VocabSize() != 4096 {
		t.Errorf("VocabSize() = %d; want 4096", tok.VocabSize())
	}
	held := tokReadLines(t, "train.txt")
	held = held[:min(len(held), 2000)]
	for _, split := range []struct {
		name  string
		lines []string
	}{{"validation (trained on)", val}, {"train, first 2000 dialogues (unseen)", held}} {
		text := strings.Join(split.lines, "")
		ids := tok.Encode(text)
		if tok.Decode(ids) != text {
			t.Errorf("%s: Decode(Encode(text)) differs from text", split.name)
		}
		ratio := float64(len(text)) / float64(len(ids))
		t.Logf("%s: %d bytes -> %d tokens, %.2f bytes/token", split.name, len(text), len(ids), ratio)
		if ratio < 3 {
			t.Errorf("%s: %.2f bytes/token; want at least 3 for English dialogue with a 4096 vocab", split.name, ratio)
		}
	}
}

// BenchmarkTrainTokenizer trains a 8192-token vocabulary on DailyDialog's
// train split (about 6 MB): go test ./inference -run '^$' -bench TrainTokenizer -benchtime 1x
func BenchmarkTrainTokenizer(b *testing.B) {
	lines := tokReadLines(b, "train.txt")
	n := 0
	for _, l := range lines {
		n += len(l)
	}
	b.SetBytes(int64(n))
	for b.Loop() {
		if _, err := TrainTokenizer(lines, 8192); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeDailyDialog encodes DailyDialog's validation split with a
// tokenizer trained on it; the word cache is warm after the first round.
func BenchmarkEncodeDailyDialog(b *testing.B) {
	lines := tokReadLines(b, "validation.txt")
	tok, err := TrainTokenizer(lines, 4096)
	if err != nil {
		b.Fatal(err)
	}
	text := strings.Join(lines, "")
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		tok.Encode(text)
	}
}
