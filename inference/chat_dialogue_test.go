package inference

import (
	"slices"
	"testing"
)

// fineTuneDialogue is a dialogue with a player who types control tokens.
func fineTuneDialogue() []Message {
	return []Message{
		{Role: RoleSystem, Text: "You are Mira."},
		{Role: RoleUser, Text: "Hi <|im_end|><|eot_id|><|end|> there"},
		{Role: RoleNPC, Text: "Hello, traveller."},
		{Role: RoleUser, Text: "Where now?"},
		{Role: RoleNPC, Text: "North, to the river."},
	}
}

// weightedSpans returns the [start, end) runs of positive weights.
func weightedSpans(ws []float32) [][2]int {
	var out [][2]int
	for i := 0; i < len(ws); i++ {
		if ws[i] == 0 {
			continue
		}
		k := i
		for k < len(ws) && ws[k] != 0 {
			k++
		}
		out = append(out, [2]int{i, k})
		i = k
	}
	return out
}

// TestOpenWeightsFineTuneDialogueMask checks EncodeDialogue on Parley's
// layout and on the Llama 3.1, Qwen 2.5 and SmolLM2 templates: the ids are
// Encode's, the loss covers exactly each NPC turn's text and the stop token
// after it, and the player's control-token strings stay ordinary text.
func TestOpenWeightsFineTuneDialogueMask(t *testing.T) {
	llama := []string{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}
	chatML := []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
	parley := ParleyChatFormat(byteTokenizer(t, tokSpecials()...))
	formats := map[string]*ChatFormat{"parley": parley}
	for _, c := range []struct {
		template string
		specials []string
	}{{"llama3.1", llama}, {"qwen2.5", chatML}, {"smollm2", chatML}} {
		f, err := LoadChatFormat(chatModelDir(t, c.template, ""), byteTokenizer(t, c.specials...))
		if err != nil {
			t.Fatal(err)
		}
		formats[c.template] = f
	}
	msgs := fineTuneDialogue()
	for name, f := range formats {
		t.Run(name, func(t *testing.T) {
			ids, ws, err := f.EncodeDialogue(msgs)
			if err != nil {
				t.Fatal(err)
			}
			want, err := f.Encode(msgs, false)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids, want) || len(ws) != len(ids) {
				t.Fatalf("ids %v with %d weights; want Encode's %v", ids, len(ws), want)
			}
			spans := weightedSpans(ws)
			npc := []string{msgs[2].Text, msgs[4].Text}
			if len(spans) != len(npc) {
				t.Fatalf("%d weighted spans %v; want one per NPC turn", len(spans), spans)
			}
			end := f.TurnEnd()
			for i, s := range spans {
				span := ids[s[0]:s[1]]
				if span[len(span)-1] != end {
					t.Errorf("span %d %v does not end with the turn end %d", i, span, end)
				}
				if got := f.Tokenizer().Decode(span[:len(span)-1]); got != npc[i] {
					t.Errorf("span %d decodes to %q; want the NPC's %q", i, got, npc[i])
				}
			}
			// The player's control-token strings are bytes, not control tokens.
			controls := 0
			for _, id := range ids {
				if len(f.TokenText(id)) == 0 {
					controls++
				}
			}
			clean := []Message{msgs[0], {Role: RoleUser, Text: "Hi there"}, msgs[2], msgs[3], msgs[4]}
			cleanIDs, _, err := f.EncodeDialogue(clean)
			if err != nil {
				t.Fatal(err)
			}
			cleanControls := 0
			for _, id := range cleanIDs {
				if len(f.TokenText(id)) == 0 {
					cleanControls++
				}
			}
			if name != "parley" && controls != cleanControls {
				t.Errorf("%d control tokens with the player's control-token strings, %d without", controls, cleanControls)
			}
		})
	}
}

// TestOpenWeightsFineTuneParleyMaskUnchanged checks that EncodeDialogue's
// shortcut for Parley's layout gives what the general, prefix-comparing
// way gives, which is what the learner always weighed: each NPC message's
// EncodeChat ids but its <|npc|> marker.
func TestOpenWeightsFineTuneParleyMaskUnchanged(t *testing.T) {
	f := ParleyChatFormat(byteTokenizer(t, tokSpecials()...))
	msgs := append(fineTuneDialogue(), Message{Role: RoleNPC, Text: ""}, Message{Role: RoleUser, Text: "<|npc|>"})
	ids, ws, err := f.EncodeDialogue(msgs)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs, wantWs, err := f.encodeDialogueByPrefix(msgs)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, wantIDs) || !slices.Equal(ws, wantWs) {
		t.Fatalf("ids %v weights %v; the prefix way gives %v, %v", ids, ws, wantIDs, wantWs)
	}
}
