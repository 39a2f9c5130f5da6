package securitytest

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/gateway"
)

// testOpenAISessions covers the OpenAI-compatible routes' keys and the
// X-Parley-Session header: a client reaches only its own sessions, through
// either API, and the header takes nothing but a UUID.
func testOpenAISessions(t *testing.T, e *env) {
	const path = "/v1/chat/completions"
	hdr := func(v string) map[string]string { return map[string]string{gateway.SessionHeader: v} }
	chat := func(user string) string {
		return `{"user":"` + user + `","messages":[{"role":"user","content":"hello there"}]}`
	}
	// Sessions of the game client: one started through the chat API, one native.
	chatSID := uuid.Must(uuid.NewV7()).String()
	e.run(t, []httpCase{{name: "chat session fixture", method: "POST", path: path, key: e.game, header: hdr(chatSID), body: chat("oa-owner"), status: 200}})
	nativeSID := e.createSession(t, e.game, "oa-native")
	rivalSID := e.createSession(t, e.rival, "oa-rival")
	ended := uuid.Must(uuid.NewV7()).String()
	e.run(t, []httpCase{
		{name: "ended fixture start", method: "POST", path: path, key: e.game, header: hdr(ended), body: chat("oa-ended"), status: 200},
		{name: "ended fixture end", method: "POST", path: "/v1/sessions/" + ended + "/end", key: e.game, status: 200},
	})

	e.run(t, []httpCase{
		// Who may list models and read the contract.
		{name: "models without key", method: "GET", path: "/v1/models", status: 401, code: "unauthorized"},
		{name: "models with revoked key", method: "GET", path: "/v1/models", key: e.revoked, status: 401, code: "unauthorized"},
		{name: "models with bad key", method: "GET", path: "/v1/models", key: "pk_not-a-key", status: 401, code: "unauthorized"},
		{name: "models", method: "GET", path: "/v1/models", key: e.game, status: 200},
		{name: "models by POST", method: "POST", path: "/v1/models", key: e.game, status: 405, code: "method_not_allowed"},
		{name: "openapi without key", method: "GET", path: "/openapi.json", status: 200},

		// Another client's session, through the header or the native API.
		{name: "rival continues a chat session", method: "POST", path: path, key: e.rival, header: hdr(chatSID), body: chat("oa-owner"), status: 403, code: "forbidden"},
		{name: "rival continues a native session", method: "POST", path: path, key: e.rival, header: hdr(nativeSID), body: chat("oa-native"), status: 403, code: "forbidden"},
		{name: "game continues the rival's session", method: "POST", path: path, key: e.game, header: hdr(rivalSID), body: chat("oa-rival"), status: 403, code: "forbidden"},
		{name: "rival reads a chat session", method: "GET", path: "/v1/sessions/" + chatSID, key: e.rival, status: 403, code: "forbidden"},
		{name: "rival ends a chat session", method: "POST", path: "/v1/sessions/" + chatSID + "/end", key: e.rival, status: 403, code: "forbidden"},
		{name: "owner reads its chat session", method: "GET", path: "/v1/sessions/" + chatSID, key: e.game, status: 200},
		{name: "no key with a session", method: "POST", path: path, header: hdr(chatSID), body: chat("oa-owner"), status: 401, code: "unauthorized"},
		{name: "another player in the session", method: "POST", path: path, key: e.game, header: hdr(chatSID), body: chat("oa-someone"), status: 400, code: "bad_request"},
		{name: "ended session", method: "POST", path: path, key: e.game, header: hdr(ended), body: chat("oa-ended"), status: 409, code: "session_ended"},
		{name: "new session without user", method: "POST", path: path, key: e.game, header: hdr(uuid.Must(uuid.NewV7()).String()),
			body: `{"messages":[{"role":"user","content":"hi"}]}`, status: 400, code: "bad_request"},

		// The header takes a UUID and nothing else.
		{name: "header not a uuid", method: "POST", path: path, key: e.game, header: hdr("session-1"), body: chat("oa-h1"), status: 400, code: "bad_request"},
		{name: "header glob", method: "POST", path: path, key: e.game, header: hdr("*"), body: chat("oa-h2"), status: 400, code: "bad_request"},
		{name: "header key injection", method: "POST", path: path, key: e.game, header: hdr(chatSID + "}:lock"), body: chat("oa-h3"), status: 400, code: "bad_request"},
		{name: "header path traversal", method: "POST", path: path, key: e.game, header: hdr("../../admin"), body: chat("oa-h4"), status: 400, code: "bad_request"},
		{name: "header huge", method: "POST", path: path, key: e.game, header: hdr(strings.Repeat("a", 4000)), body: chat("oa-h5"), status: 400, code: "bad_request"},

		// A declared length over the limit is refused before the body is read.
		{name: "8 MiB chat body", method: "POST", path: path, key: e.game, body: strings.Repeat("x", 8<<20), status: 413, code: "too_large"},
		{name: "8 MiB session body", method: "POST", path: "/v1/sessions", key: e.game, body: strings.Repeat("x", 8<<20), status: 413, code: "too_large"},
		{name: "8 MiB message body", method: "POST", path: "/v1/sessions/" + nativeSID + "/messages", key: e.game, body: strings.Repeat("x", 8<<20), status: 413, code: "too_large"},
		{name: "8 MiB without key", method: "POST", path: path, body: strings.Repeat("x", 8<<20), status: 413, code: "too_large"},
		{name: "8 MiB admin body", method: "POST", path: "/admin/v1/rollout/pause", key: e.admin, body: strings.Repeat("x", 8<<20), status: 413, code: "too_large"},
	})
}
