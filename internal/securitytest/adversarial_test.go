package securitytest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// adversarialMessages are what the simulator's adversarial personas say
// (its default lexicon), each alone and after an ordinary sentence as the
// simulator writes them, with the safety verdict each must get.
func adversarialMessages() map[simulator.Kind]struct {
	phrases []string
	want    schema.Safety
} {
	lx := simulator.DefaultLexicon()
	var flips []string
	for i, f := range lx.Flip {
		flips = append(flips, strings.ReplaceAll(f, "{w}", []string{"fishing", "cooking", "dragons", "gold"}[i%4]))
	}
	return map[simulator.Kind]struct {
		phrases []string
		want    schema.Safety
	}{
		simulator.KindHighRisk:      {lx.SelfHarm, schema.SafetyCrisis},
		simulator.KindJailbreak:     {lx.Jailbreaks, schema.SafetyRefused},
		simulator.KindAggressive:    {lx.Insults, schema.SafetyNone},
		simulator.KindContradictory: {flips, schema.SafetyNone},
	}
}

// sentTurn is one message whose turn event must reach Kafka.
type sentTurn struct {
	text string
	want schema.Safety
}

func testAdversarial(t *testing.T, e *env) {
	sent := map[string][]sentTurn{} // session id → its turns in order
	for kind, m := range adversarialMessages() {
		for i, phrase := range m.phrases {
			texts := []string{phrase, "the river was calm today. " + phrase + " lol"}
			t.Run(fmt.Sprintf("%s/%d", kind, i), func(t *testing.T) {
				sid := e.createSession(t, e.game, fmt.Sprintf("adv-%s-%d", kind, i))
				for _, text := range texts {
					r := e.say(t, e.game, sid, text)
					checkVerdict(t, text, r.Reply, r.Safety, m.want)
					sent[sid] = append(sent[sid], sentTurn{text: text, want: m.want})
				}
				e.healthy(t)
			})
		}
	}

	t.Run("stream/high-risk", func(t *testing.T) {
		sid := e.createSession(t, e.game, "adv-stream")
		text := simulator.DefaultLexicon().SelfHarm[0]
		b, _ := json.Marshal(schema.MessageRequest{Text: text})
		r := e.do(t, httpCase{method: "POST", path: "/v1/sessions/" + sid + "/messages", key: e.game, body: string(b),
			header: map[string]string{"Accept": "text/event-stream"}})
		if r.status != 200 || !strings.Contains(string(r.body), "event: done") || !strings.Contains(string(r.body), `"safety":"crisis"`) ||
			!strings.Contains(string(r.body), "988") {
			t.Errorf("streamed high-risk message = %d %.500s; want a done event with the crisis reply", r.status, r.body)
		}
		sent[sid] = append(sent[sid], sentTurn{text: text, want: schema.SafetyCrisis})
	})

	t.Run("openai", func(t *testing.T) {
		lx := simulator.DefaultLexicon()
		for _, c := range []struct {
			name, text, reply, finish string
		}{
			{"jailbreak", lx.Jailbreaks[0], gateway.RefusalReply, "content_filter"},
			{"high-risk", lx.SelfHarm[1], gateway.CrisisReply, "content_filter"},
			{"aggressive", lx.Insults[0], "", "stop|length"},
		} {
			b, _ := json.Marshal(schema.ChatCompletionRequest{Messages: []schema.ChatMessage{{Role: "user", Content: c.text}}})
			r := e.do(t, httpCase{method: "POST", path: "/v1/chat/completions", key: e.game, body: string(b)})
			var cr schema.ChatCompletionResponse
			if r.status != 200 || json.Unmarshal(r.body, &cr) != nil || len(cr.Choices) != 1 {
				t.Errorf("%s: chat completion = %d %.300s; want 200 with one choice", c.name, r.status, r.body)
				continue
			}
			got := cr.Choices[0]
			if c.reply != "" && got.Message.Content != c.reply {
				t.Errorf("%s: reply %q; want %q", c.name, got.Message.Content, c.reply)
			}
			if c.reply == "" && (got.Message.Content == gateway.RefusalReply || got.Message.Content == gateway.CrisisReply) {
				t.Errorf("%s: reply %q; want a normal reply", c.name, got.Message.Content)
			}
			if !strings.Contains("|"+c.finish+"|", "|"+got.FinishReason+"|") {
				t.Errorf("%s: finish_reason %q; want %s", c.name, got.FinishReason, c.finish)
			}
		}
		b, _ := json.Marshal(schema.ChatCompletionRequest{Stream: true, Messages: []schema.ChatMessage{{Role: "user", Content: lx.Jailbreaks[2]}}})
		r := e.do(t, httpCase{method: "POST", path: "/v1/chat/completions", key: e.game, body: string(b)})
		if body := string(r.body); r.status != 200 || !strings.Contains(body, `"content_filter"`) || !strings.Contains(body, "data: [DONE]") ||
			!strings.Contains(body, "I can't help with that") {
			t.Errorf("streamed jailbreak = %d %.500s; want the refusal, content_filter and [DONE]", r.status, body)
		}
		e.healthy(t)
	})

	t.Run("kafka", func(t *testing.T) {
		checkTurnEvents(t, e, sent)
	})
}

// checkVerdict checks one reply against the verdict its message must get.
func checkVerdict(t *testing.T, text, reply string, got, want schema.Safety) {
	t.Helper()
	if got != want {
		t.Errorf("message %q: safety %q; want %q (reply %q)", text, got, want, reply)
	}
	switch want {
	case schema.SafetyCrisis:
		if reply != gateway.CrisisReply || !strings.Contains(reply, "988") || !strings.Contains(reply, "findahelpline.com") {
			t.Errorf("message %q: reply %q; want the crisis reply with crisis-line guidance", text, reply)
		}
	case schema.SafetyRefused:
		if reply != gateway.RefusalReply {
			t.Errorf("message %q: reply %q; want the refusal", text, reply)
		}
	default:
		if reply == gateway.RefusalReply || reply == gateway.CrisisReply {
			t.Errorf("message %q: reply %q; want a normal in-character reply", text, reply)
		}
	}
}

// checkTurnEvents reads the topic until every sent turn's event is found
// and checks its safety field and texts.
func checkTurnEvents(t *testing.T, e *env, sent map[string][]sentTurn) {
	t.Helper()
	want := 0
	for _, turns := range sent {
		want += len(turns)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.kafka.Addrs, Topic: e.topic, GroupID: e.kafka.Prefix + "security",
		StartOffset: kafka.FirstOffset, MaxWait: 200 * time.Millisecond})
	defer r.Close()
	found := 0
	seen := map[string]bool{}
	for found < want {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read turn events: found %d of %d: %v", found, want, err)
		}
		var ev schema.SessionEvent
		if err := json.Unmarshal(m.Value, &ev); err != nil {
			t.Fatalf("event %s is not JSON: %v", m.Value, err)
		}
		turns, ok := sent[ev.SessionID]
		if !ok || ev.Type != schema.TurnEvent || seen[ev.EventID] {
			continue
		}
		seen[ev.EventID] = true
		if err := ev.Validate(); err != nil {
			t.Errorf("turn event of %s: %v", ev.SessionID, err)
		}
		if ev.Turn < 1 || ev.Turn > len(turns) {
			t.Errorf("turn event of %s has turn %d; it had %d turns", ev.SessionID, ev.Turn, len(turns))
			continue
		}
		st := turns[ev.Turn-1]
		if ev.Safety != st.want || ev.UserText != st.text {
			t.Errorf("turn event %d of %s: safety %q user_text %q; want %q, %q", ev.Turn, ev.SessionID, ev.Safety, ev.UserText, st.want, st.text)
		}
		if st.want == schema.SafetyCrisis && ev.NPCText != gateway.CrisisReply {
			t.Errorf("turn event %d of %s: npc_text %q; want the crisis reply", ev.Turn, ev.SessionID, ev.NPCText)
		}
		if st.want == schema.SafetyRefused && ev.NPCText != gateway.RefusalReply {
			t.Errorf("turn event %d of %s: npc_text %q; want the refusal", ev.Turn, ev.SessionID, ev.NPCText)
		}
		found++
	}
}
