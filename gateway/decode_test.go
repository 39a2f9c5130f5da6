package gateway

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/parleyhq/parley/schema"
)

func FuzzParseMessage(f *testing.F) {
	for _, s := range []string{
		`{"text":"hello"}`, `{"text":""}`, `{"text":42}`, `{"text":"caf\u00e9"}`, "{\"text\":\"caf\xe9\"}",
		`{"text":"a","extra":[1,2]}`, `[]`, `null`, `{"text":"` + strings.Repeat("x", 64) + `"}`, ``, `{"text":"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		const max = 32
		m, err := parseMessage(body, max)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("parseMessage(%q) = %v; want ErrBadRequest or ErrTooLarge", body, err)
			}
			return
		}
		if !utf8.ValidString(m.Text) || strings.TrimSpace(m.Text) == "" || len(m.Text) > max {
			t.Fatalf("parseMessage(%q) accepted text %q", body, m.Text)
		}
	})
}

// messageSeeds are bodies of player messages: what the client sends, and
// forms only json.Unmarshal reads or refuses.
var messageSeeds = []string{
	`{"text":"hello"}`, `{"text":""}`, `{"text":42}`, `{"text":"caf\u00e9"}`, "{\"text\":\"caf\xe9\"}",
	`{"text":"a","extra":[1,2]}`, `[]`, `null`, `{"text":"` + strings.Repeat("x", 64) + `"}`, ``, `{"text":"\ud800"}`,
	`{"text":"Étienne's <b>&</b> 日本語"}`, "{\"text\":\"tab\there\"}", `{"text":"a"}` + "\n", ` {"text":"a"}`,
	`{"Text":"a"}`, `{"text":"a","text":"b"}`, `{"text":"a"`, `{"text":"a\"}`,
}

// checkScanMessage checks that a body scanMessage reads decodes the same
// with decodeJSON, which reads every other body.
func checkScanMessage(t *testing.T, body string) {
	got, ok := scanMessage(body)
	if !ok {
		return
	}
	var want schema.MessageRequest
	if err := decodeJSON([]byte(body), &want); err != nil || got != want {
		t.Fatalf("scanMessage(%q) = %+v; decodeJSON gives %+v, %v", body, got, want, err)
	}
}

func TestScanMessageMatchesDecodeJSON(t *testing.T) {
	for _, s := range messageSeeds {
		checkScanMessage(t, s)
	}
	// What the client sends takes the scanner, not the fallback.
	if _, ok := scanMessage(`{"text":"Hi! Where are we heading today?"}`); !ok {
		t.Error("scanMessage refused what the client sends")
	}
}

func FuzzScanMessage(f *testing.F) {
	for _, s := range messageSeeds {
		f.Add(s)
	}
	f.Fuzz(checkScanMessage)
}

func TestUTF8Chunker(t *testing.T) {
	cases := []struct {
		name   string
		pieces []string
		want   []string
	}{
		{"ascii", []string{"ab", "c"}, []string{"ab", "c", ""}},
		{"split rune", []string{"caf\xc3", "\xa9!"}, []string{"caf", "é!", ""}},
		{"split three ways", []string{"\xe2", "\x82", "\xac"}, []string{"", "", "€", ""}},
		{"invalid byte", []string{"a\xffb"}, []string{"a\uFFFDb", ""}},
		{"truncated at end", []string{"x\xe2\x82"}, []string{"x", "\uFFFD"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ch utf8Chunker
			var got []string
			for _, p := range c.pieces {
				got = append(got, ch.push(p))
			}
			got = append(got, ch.flush())
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Errorf("chunks of %q = %q; want %q", c.pieces, got, c.want)
			}
		})
	}
}
