package simulator

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/parleyhq/parley/schema"
)

func TestImportDailyDialog(t *testing.T) {
	in := "Hi , how are you ? __eou__ Fine , thanks . __eou__ Good . __eou__\n" +
		"Where is the bank ? __eou__ Over there . __eou__\r\n" +
		"One more . __eou__ Sure . __eou__\n" +
		"Last one ! __eou__ Ok . __eou__"
	opts := DefaultImportOptions()
	opts.DialoguesPerPlayer = 2
	var out bytes.Buffer
	stats, err := ImportDailyDialog(strings.NewReader(in), &out, opts)
	if err != nil {
		t.Fatalf("ImportDailyDialog: %v", err)
	}
	want := ImportStats{Lines: 4, Dialogues: 4, Players: 2, Exchanges: 5, Events: 4*2 + 5, TrailingUser: 1}
	if stats != want {
		t.Errorf("stats = %+v; want %+v", stats, want)
	}
	ds, err := ReadCorpus(&out)
	if err != nil {
		t.Fatalf("ReadCorpus: %v", err)
	}
	if len(ds) != 4 {
		t.Fatalf("read %d dialogues; want 4", len(ds))
	}
	first := ds[0]
	wantX := []schema.Exchange{{Turn: 1, User: "Hi, how are you?", NPC: "Fine, thanks."}, {Turn: 2, User: "Good."}}
	if len(first.Exchanges) != 2 || first.Exchanges[0] != wantX[0] || first.Exchanges[1] != wantX[1] {
		t.Errorf("first dialogue exchanges = %+v; want %+v", first.Exchanges, wantX)
	}
	players := []string{ds[0].PlayerID, ds[1].PlayerID, ds[2].PlayerID, ds[3].PlayerID}
	if wantP := []string{"dd-00000", "dd-00000", "dd-00001", "dd-00001"}; strings.Join(players, ",") != strings.Join(wantP, ",") {
		t.Errorf("players = %v; want %v", players, wantP)
	}
	for _, d := range ds {
		if d.Reason != schema.EndPlayerEnded || d.NPCID != opts.NPCID || d.PolicyVersion != opts.PolicyVersion {
			t.Errorf("dialogue %s: reason %q npc %q policy %q", d.SessionID, d.Reason, d.NPCID, d.PolicyVersion)
		}
	}
}

func TestImportDailyDialogMalformed(t *testing.T) {
	good := "A . __eou__ B . __eou__\n"
	tests := []struct {
		name     string
		in       string
		wantLine int
	}{
		{"empty line", good + "\n" + good, 2},
		{"no separator", good + good + "just text\n", 3},
		{"empty utterance", "A . __eou__  __eou__ B . __eou__\n", 1},
		{"text after the last separator", good + "A . __eou__ B .\n", 2},
		{"invalid utf-8", good + "A \xff . __eou__\n", 2},
		{"blank line of spaces", good + "   \n", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			_, err := ImportDailyDialog(strings.NewReader(tt.in), &out, DefaultImportOptions())
			var le *LineError
			if !errors.As(err, &le) {
				t.Fatalf("ImportDailyDialog(%q) error = %v; want a *LineError", tt.in, err)
			}
			if le.Line != tt.wantLine {
				t.Errorf("ImportDailyDialog(%q) error on line %d; want line %d (%v)", tt.in, le.Line, tt.wantLine, err)
			}
			if !strings.HasPrefix(err.Error(), "line ") {
				t.Errorf("error %q does not start with its line", err)
			}
		})
	}
}

func TestImportDailyDialogValidationSplit(t *testing.T) {
	const path = "../../shared/data/dailydialog/validation.txt"
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("%s is absent (DailyDialog is not in the repository; see ../shared/data/dailydialog/README.md)", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	stats, err := ImportDailyDialog(f, &out, DefaultImportOptions())
	if err != nil {
		t.Fatalf("ImportDailyDialog(%s): %v", path, err)
	}
	if stats.Dialogues != 1000 || stats.Lines != 1000 {
		t.Errorf("imported %d dialogues from %d lines; want 1000 and 1000", stats.Dialogues, stats.Lines)
	}
	ds, err := ReadCorpus(&out)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1000 {
		t.Errorf("ReadCorpus got %d dialogues; want 1000", len(ds))
	}
	t.Logf("%+v, %.2f exchanges per dialogue", stats, float64(stats.Exchanges)/float64(stats.Dialogues))
}

func TestImportJSONL(t *testing.T) {
	// A simple dialogue, then the events of a generated session, then another simple one.
	var events bytes.Buffer
	cfg := smallCorpusConfig()
	cfg.Players, cfg.DialoguesPerPlayer, cfg.Population.HeldOutRate = 1, 1, 0
	if _, err := GenerateCorpus(t.Context(), cfg, &events); err != nil {
		t.Fatal(err)
	}
	in := `{"player_id":"p1","turns":[{"user":"hi","npc":"hello"},{"user":"bye","npc":"see you"}]}` + "\n" +
		events.String() +
		`{"player_id":"p2","npc_id":"bard","session_id":"x9","reason":"max_turns","turns":[{"user":"sing","npc":"la"}]}` + "\n"
	var out bytes.Buffer
	stats, err := ImportJSONL(strings.NewReader(in), &out, DefaultImportOptions())
	if err != nil {
		t.Fatalf("ImportJSONL: %v", err)
	}
	if stats.Dialogues != 3 || stats.Players != 3 {
		t.Errorf("stats = %+v; want 3 dialogues of 3 players", stats)
	}
	ds, err := ReadCorpus(&out)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 3 || ds[0].PlayerID != "p1" || ds[2].SessionID != "x9" || ds[2].NPCID != "bard" || ds[2].Reason != schema.EndMaxTurns {
		t.Fatalf("dialogues out of order or mislabelled: %+v", ds)
	}
	if ds[0].Reason != schema.EndPlayerEnded || len(ds[0].Exchanges) != 2 || ds[0].Exchanges[1].NPC != "see you" {
		t.Errorf("simple dialogue = %+v", ds[0])
	}
}

func TestReadCorpusMalformed(t *testing.T) {
	var events bytes.Buffer
	cfg := smallCorpusConfig()
	cfg.Players, cfg.DialoguesPerPlayer, cfg.Population.HeldOutRate = 1, 1, 0
	if _, err := GenerateCorpus(t.Context(), cfg, &events); err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(events.String(), "\n")
	simple := `{"player_id":"p1","turns":[{"user":"hi","npc":"hello"}]}`
	tests := []struct {
		name     string
		in       string
		wantLine int
	}{
		{"not json", simple + "\n{oops\n", 2},
		{"empty line", simple + "\n\n" + simple, 2},
		{"neither kind", simple + "\n" + `{"hello":1}` + "\n", 2},
		{"event missing its id", strings.Replace(first, `"event_id"`, `"x"`, 1) + "\n", 1},
		{"wrong schema", strings.Replace(first, "parley.session_event/v1", "v0", 1) + "\n", 1},
		{"simple without player", simple + "\n" + `{"turns":[{"user":"a","npc":"b"}]}` + "\n", 2},
		{"simple without turns", `{"player_id":"p","turns":[]}` + "\n", 1},
		{"simple with an unknown reason", `{"player_id":"p","reason":"bored","turns":[{"user":"a"}]}`, 1},
		{"trailing data", simple + " {}\n", 1},
		{"same session twice", `{"player_id":"p","session_id":"s","turns":[{"user":"a"}]}` + "\n" +
			`{"player_id":"p","session_id":"s","turns":[{"user":"a"}]}` + "\n", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadCorpus(strings.NewReader(tt.in))
			var le *LineError
			if !errors.As(err, &le) {
				t.Fatalf("ReadCorpus error = %v; want a *LineError", err)
			}
			if le.Line != tt.wantLine {
				t.Errorf("ReadCorpus error on line %d; want %d (%v)", le.Line, tt.wantLine, err)
			}
		})
	}
}

func FuzzImportDailyDialog(f *testing.F) {
	f.Add("Hi . __eou__ Hello . __eou__\n")
	f.Add("a __eou__ b __eou__ c __eou__\r\nd __eou__\n")
	f.Add("\n")
	f.Add("x __eou__ __eou__")
	f.Fuzz(func(t *testing.T, in string) {
		var out bytes.Buffer
		stats, err := ImportDailyDialog(strings.NewReader(in), &out, DefaultImportOptions())
		if err != nil {
			return
		}
		ds, err := ReadCorpus(&out)
		if err != nil {
			t.Fatalf("ReadCorpus of ImportDailyDialog's output: %v", err)
		}
		if len(ds) != stats.Dialogues {
			t.Fatalf("read back %d dialogues; imported %d", len(ds), stats.Dialogues)
		}
	})
}

func FuzzReadCorpus(f *testing.F) {
	f.Add(`{"player_id":"p1","turns":[{"user":"hi","npc":"hello"}]}`)
	f.Add(`{"schema":"parley.session_event/v1","event_id":"0194a3b0-0000-7000-8000-000000000000","type":"turn","session_id":"s","player_id":"p","npc_id":"n","deployment":"d","policy_version":"v","ts":"2026-01-01T00:00:00Z","turn":1,"safety":"none"}`)
	f.Add("{}\n[]\nnull")
	f.Fuzz(func(t *testing.T, in string) {
		ds, err := ReadCorpus(strings.NewReader(in))
		if err != nil {
			return
		}
		var out bytes.Buffer
		if _, err := ImportJSONL(strings.NewReader(in), &out, DefaultImportOptions()); err != nil {
			// Readable input may still fail to convert (e.g. ids the events refuse);
			// it must say so rather than panic.
			return
		}
		again, err := ReadCorpus(&out)
		if err != nil {
			t.Fatalf("ReadCorpus of ImportJSONL's output: %v", err)
		}
		if len(again) != len(ds) {
			t.Fatalf("ImportJSONL kept %d of %d dialogues", len(again), len(ds))
		}
	})
}
