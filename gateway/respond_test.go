package gateway

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/parleyhq/parley/schema"
)

// TestAppendMessageJSONMatchesEncoder checks appendMessageJSON against
// json.Encoder, what c.JSON writes with, and that it declines every
// response with a string the encoder escapes.
func TestAppendMessageJSONMatchesEncoder(t *testing.T) {
	replies := []string{"", "Hey, you're back! The road north is quiet tonight. Shall we camp by the river or push on?",
		`say "hi"`, `back\\slash`, "<b>", "a & b", "tab\there", "new\nline", "Étienne's café", "日本語", "\u2028", "\xff", "del\x7f", "~!@#$%^*()_+{}|:?`-=[];',./"}
	var resps []schema.MessageResponse
	for i, r := range replies {
		resps = append(resps, schema.MessageResponse{Reply: r, Turn: i + 1},
			schema.MessageResponse{Reply: r, Turn: 1 << 40, Safety: schema.SafetyRefused, Ended: schema.EndMaxTurns},
			schema.MessageResponse{Reply: r, Turn: -3, Safety: schema.SafetyCrisis})
	}
	fast := 0
	for _, resp := range resps {
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(resp); err != nil {
			t.Fatal(err)
		}
		got, ok := appendMessageJSON(nil, resp)
		if !ok {
			// Declined only for an escape, or a byte the fast path does not judge.
			if q, _ := json.Marshal(resp.Reply); string(q) == `"`+resp.Reply+`"` && printableASCII(resp.Reply) {
				t.Errorf("appendMessageJSON declined %+v, which the encoder writes without escapes", resp)
			}
			continue
		}
		fast++
		if !bytes.Equal(got, want.Bytes()) {
			t.Errorf("appendMessageJSON(%+v) = %s; json.Encoder writes %s", resp, got, want.Bytes())
		}
	}
	if fast == 0 {
		t.Error("appendMessageJSON declined every response")
	}
}

// printableASCII reports whether s holds only the bytes 0x20 to 0x7e.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
