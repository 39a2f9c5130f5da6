package gateway

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/parleyhq/parley/schema"
)

// historySeeds are stored histories: what appendTurn writes, with the
// characters json.Marshal escapes, and forms only json.Unmarshal reads.
func historySeeds(t testing.TB) []string {
	t.Helper()
	written := [][]schema.Exchange{
		{},
		{{Turn: 1, User: "Hi! Where are we heading?", NPC: "North, to the river.", Safety: schema.SafetyNone}},
		{{Turn: 7, User: `say "hi" <b>&</b> \ back`, NPC: "Étienne's café — 日本語 \u2028 ok", Safety: schema.SafetyRefused},
			{Turn: 8, User: "tab\tand\nnewline", NPC: "", Safety: schema.SafetyCrisis}},
		{{Turn: 1, User: "invalid \xff utf-8", NPC: "x"}},
	}
	var seeds []string
	for _, h := range written {
		b, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, string(b))
	}
	return append(seeds, "null", "", "[]  ", " []", "[", `[{"turn":1}]`, `[{"turn":01,"user":"a","npc":"b"}]`,
		`[{"turn":-0,"user":"a","npc":"b"}]`, `[{"turn":1,"user":"a","npc":"b"},]`, `[{"Turn":2,"USER":"a","npc":"b"}]`,
		`[{"turn":1,"user":"a","npc":"b","safety":"none","extra":1}]`, `[{"turn":99999999999999999999,"user":"a","npc":"b"}]`,
		`[{"turn":1,"user":"a","npc":"b"} , {"turn":2,"user":"c","npc":"d"}]`, `[{"turn":1.5,"user":"a","npc":"b"}]`,
		`[{"turn":1,"user":"a\u0041","npc":"b"}]`, "[{\"turn\":1,\"user\":\"\xc3\",\"npc\":\"b\"}]")
}

// unmarshalHistory is how sessions' histories were decoded before
// decodeHistory: the reference it must match.
func unmarshalHistory(data string) ([]schema.Exchange, error) {
	var h []schema.Exchange
	err := json.Unmarshal([]byte(data), &h)
	return h, err
}

func checkDecodeHistory(t *testing.T, data string) {
	got, err := decodeHistory(data)
	want, wantErr := unmarshalHistory(data)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("decodeHistory(%q) error %v; json.Unmarshal's %v", data, err, wantErr)
	}
	if wantErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeHistory(%q) = %#v; json.Unmarshal gives %#v", data, got, want)
	}
}

func TestDecodeHistoryMatchesUnmarshal(t *testing.T) {
	for _, s := range historySeeds(t) {
		checkDecodeHistory(t, s)
	}
	// The common form takes the scanner, not the fallback.
	if _, ok := scanHistory(historySeeds(t)[1]); !ok {
		t.Error("scanHistory refused what appendTurn writes")
	}
}

func FuzzDecodeHistory(f *testing.F) {
	for _, s := range historySeeds(f) {
		f.Add(s)
	}
	f.Fuzz(checkDecodeHistory)
}
