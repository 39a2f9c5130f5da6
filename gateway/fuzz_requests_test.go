package gateway

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
)

// safeIDRE is what a client-chosen id may hold once accepted: nothing that
// could split a Redis key, a log line or a header.
var safeIDRE = regexp.MustCompile(`^[A-Za-z0-9._:@-]{1,128}$`)

// FuzzCreateSessionRequest decodes the body of POST /v1/sessions as the
// handler does: any input is either accepted with safe ids or refused with
// ErrBadRequest.
func FuzzCreateSessionRequest(f *testing.F) {
	for _, s := range []string{
		`{"player_id":"p1"}`, `{"player_id":"p1","npc_id":"mira","client":{"game_build":"1.0","locale":"en"}}`,
		`{"player_id":"p\r\nFLUSHALL"}`, `{"player_id":"*"}`, `{"player_id":42}`, `{"player_id":"p"} x`, `null`, `[]`,
		"{\"player_id\":\"p\xff\"}", `{"player_id":"p","client":"x"}`, strings.Repeat("[", 11000), ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req schema.CreateSessionRequest
		err := decodeJSON(body, &req)
		if err == nil {
			if verr := req.Validate(); verr != nil {
				err = errors.Join(ErrBadRequest, verr)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("create session body %q: %v; want ErrBadRequest", body, err)
			}
			return
		}
		if !safeIDRE.MatchString(req.PlayerID) || (req.NPCID != "" && !safeIDRE.MatchString(req.NPCID)) {
			t.Fatalf("create session body %q accepted player %q npc %q", body, req.PlayerID, req.NPCID)
		}
	})
}

// FuzzEndSessionRequest parses the optional body of POST
// /v1/sessions/{id}/end as the handler does: any input is refused with
// ErrBadRequest or gives a reason a client may end a session with.
func FuzzEndSessionRequest(f *testing.F) {
	for _, s := range []string{
		``, ` `, `{}`, `{"reason":"max_turns"}`, `{"reason":"player_ended"}`, `{"reason":"safety"}`, `{"reason":""}`,
		`{"reason":7}`, `null`, `[]`, `{"reason":"max_turns"} x`, "{\"reason\":\"\xff\"}", strings.Repeat("{", 11000),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		reason, err := parseEndReason(body)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("end body %q: %v; want ErrBadRequest", body, err)
			}
			return
		}
		if reason != schema.EndPlayerEnded && reason != schema.EndMaxTurns {
			t.Fatalf("end body %q accepted reason %q", body, reason)
		}
	})
}

// FuzzChatCompletionRequest decodes an OpenAI chat request as the handler
// does and builds its prompt: any input is refused with ErrBadRequest or
// ErrTooLarge, or gives a prompt that leaves room for the reply.
func FuzzChatCompletionRequest(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"x","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"and?"}],"temperature":0.5,"top_p":0.9,"max_tokens":16,"stream":true,"user":"p1"}`,
		`{"messages":[]}`, `{"messages":[{"role":"root","content":"x"}]}`, `{"messages":[{"role":"user","content":42}]}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":99999999999999999999}`,
		`{"messages":[{"role":"user","content":"hi"}],"temperature":1e999}`, `{"messages":[{"role":"user","content":"hi"}],"user":"*"}`,
		`{"messages":[{"role":"system","content":"` + strings.Repeat("long ", 400) + `"},{"role":"user","content":"hi"}]}`,
		"{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}", strings.Repeat("[", 11000),
	} {
		f.Add([]byte(s))
	}
	tok := testTokenizer(f)
	const contextTokens, maxTokens = 256, 32
	f.Fuzz(func(t *testing.T, body []byte) {
		var req schema.ChatCompletionRequest
		err := decodeJSON(body, &req)
		if err == nil {
			if verr := req.Validate(); verr != nil {
				err = errors.Join(ErrBadRequest, verr)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("chat body %q: %v; want ErrBadRequest", body, err)
			}
			return
		}
		if req.User != "" && !safeIDRE.MatchString(req.User) {
			t.Fatalf("chat body %q accepted user %q", body, req.User)
		}
		prompt, err := chatPrompt(tok, inference.CompanionCard, req.Messages, contextTokens, maxTokens)
		if err != nil {
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("chatPrompt of %q: %v; want nil or ErrTooLarge", body, err)
			}
			return
		}
		if len(prompt) == 0 || len(prompt)+maxTokens > contextTokens {
			t.Fatalf("chatPrompt of %q: %d tokens; want 1..%d", body, len(prompt), contextTokens-maxTokens)
		}
	})
}
