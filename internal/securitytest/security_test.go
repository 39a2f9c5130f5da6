package securitytest

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// TestSecurity runs every group of cases against one gateway process.
func TestSecurity(t *testing.T) {
	e := startGateway(t)
	t.Run("auth", func(t *testing.T) { testAuth(t, e) })
	t.Run("input", func(t *testing.T) { testInput(t, e) })
	t.Run("openai", func(t *testing.T) { testOpenAIInput(t, e) })
	t.Run("openai sessions", func(t *testing.T) { testOpenAISessions(t, e) })
	t.Run("injection", func(t *testing.T) { testInjection(t, e) })
	t.Run("raw", func(t *testing.T) { testRaw(t, e) })
	t.Run("adversarial", func(t *testing.T) { testAdversarial(t, e) })
	t.Run("ratelimit", func(t *testing.T) { testRateLimit(t, e) })
	// Last: a change the admin API wrongly accepts changes what is served.
	t.Run("admin", func(t *testing.T) { testAdminInput(t, e) })
	if logs := e.logs.String(); strings.Contains(logs, "panic") {
		t.Errorf("the gateway logged a panic:\n%s", grepLines(logs, "panic"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// escapeAll %-escapes every byte of s, as a client that encodes too much would.
func escapeAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

func testAuth(t *testing.T, e *env) {
	sid := e.createSession(t, e.game, "auth-owner")
	ended := e.createSession(t, e.game, "auth-ended")
	e.run(t, []httpCase{{name: "end fixture", method: "POST", path: "/v1/sessions/" + ended + "/end", key: e.game, status: 200}})
	unknown := uuid.Must(uuid.NewV7()).String()
	msg := `{"text":"hello there"}`
	sess, msgs, end := "/v1/sessions/"+sid, "/v1/sessions/"+sid+"/messages", "/v1/sessions/"+sid+"/end"

	e.run(t, []httpCase{
		// Who may call at all.
		{name: "no key", method: "GET", path: sess, status: 401, code: "unauthorized"},
		{name: "no key create", method: "POST", path: "/v1/sessions", body: `{"player_id":"p"}`, status: 401, code: "unauthorized"},
		{name: "no key openai", method: "POST", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"hi"}]}`, status: 401, code: "unauthorized"},
		{name: "basic scheme", method: "GET", path: sess, header: map[string]string{"Authorization": "Basic " + e.game}, status: 401, code: "unauthorized"},
		{name: "bearer without key", method: "GET", path: sess, header: map[string]string{"Authorization": "Bearer "}, status: 401, code: "unauthorized"},
		{name: "bearer only", method: "GET", path: sess, header: map[string]string{"Authorization": "Bearer"}, status: 401, code: "unauthorized"},
		{name: "key without scheme", method: "GET", path: sess, header: map[string]string{"Authorization": e.game}, status: 401, code: "unauthorized"},
		{name: "lower-case scheme", method: "GET", path: sess, header: map[string]string{"Authorization": "bearer " + e.game}, status: 401, code: "unauthorized"},
		{name: "unknown key", method: "GET", path: sess, key: "pk_not-a-key", status: 401, code: "unauthorized"},
		{name: "key hash as key", method: "GET", path: sess, key: strings.Repeat("0", 64), status: 401, code: "unauthorized"},
		{name: "key prefix", method: "GET", path: sess, key: e.game[:len(e.game)-1], status: 401, code: "unauthorized"},
		{name: "glob key", method: "GET", path: sess, key: "*", status: 401, code: "unauthorized"},
		{name: "very long key", method: "GET", path: sess, key: strings.Repeat("k", 100<<10), status: 401, code: "unauthorized"},
		{name: "revoked key", method: "GET", path: sess, key: e.revoked, status: 401, code: "unauthorized"},
		{name: "revoked key create", method: "POST", path: "/v1/sessions", key: e.revoked, body: `{"player_id":"p"}`, status: 401, code: "unauthorized"},

		// The owner.
		{name: "owner reads", method: "GET", path: sess, key: e.game, status: 200},
		// The router matches ids as written: an id with needless escapes is
		// no session (404), for its owner and for everyone else.
		{name: "owner reads over-escaped id", method: "GET", path: "/v1/sessions/" + escapeAll(sid), key: e.game, status: 404, code: "not_found"},

		// Another client's session: 403 whatever the spelling of its id.
		{name: "rival reads", method: "GET", path: sess, key: e.rival, status: 403, code: "forbidden"},
		{name: "rival messages", method: "POST", path: msgs, key: e.rival, body: msg, status: 403, code: "forbidden"},
		{name: "rival ends", method: "POST", path: end, key: e.rival, status: 403, code: "forbidden"},
		{name: "rival reads over-escaped id", method: "GET", path: "/v1/sessions/" + escapeAll(sid), key: e.rival, status: 404, code: "not_found"},
		{name: "rival messages path-escaped id", method: "POST", path: "/v1/sessions/" + url.PathEscape(sid) + "/messages", key: e.rival, body: msg, status: 403, code: "forbidden"},
		{name: "rival messages over-escaped id", method: "POST", path: "/v1/sessions/" + escapeAll(sid) + "/messages", key: e.rival, body: msg, status: 404, code: "not_found"},
		{name: "rival ends over-escaped id", method: "POST", path: "/v1/sessions/" + escapeAll(sid) + "/end", key: e.rival, status: 404, code: "not_found"},
		{name: "rival reads upper-case id", method: "GET", path: "/v1/sessions/" + strings.ToUpper(sid), key: e.rival, status: 404, code: "not_found"},
		{name: "rival reads braced id", method: "GET", path: "/v1/sessions/%7B" + sid + "%7D", key: e.rival, status: 404, code: "not_found"},
		{name: "rival reads urn id", method: "GET", path: "/v1/sessions/urn:uuid:" + sid, key: e.rival, status: 404, code: "not_found"},
		{name: "rival reads via dot segment", method: "GET", path: "/v1/sessions/x/../" + sid, key: e.rival, status: 404, code: "not_found"},
		{name: "rival reads via encoded dot segment", method: "GET", path: "/v1/sessions/x%2F..%2F" + sid, key: e.rival, status: 404, code: "not_found"},
		{name: "rival guesses an id", method: "GET", path: "/v1/sessions/" + unknown, key: e.rival, status: 404, code: "not_found"},
		{name: "rival messages a guessed id", method: "POST", path: "/v1/sessions/" + unknown + "/messages", key: e.rival, body: msg, status: 404, code: "not_found"},
		{name: "rival ends a guessed id", method: "POST", path: "/v1/sessions/" + unknown + "/end", key: e.rival, status: 404, code: "not_found"},
		{name: "live-ops reads a player session", method: "GET", path: sess, key: e.ops, status: 403, code: "forbidden"},
		{name: "owner still reads", method: "GET", path: sess, key: e.game, status: 200},

		// An ended session.
		{name: "message ended", method: "POST", path: "/v1/sessions/" + ended + "/messages", key: e.game, body: msg, status: 409, code: "session_ended"},
		{name: "end ended", method: "POST", path: "/v1/sessions/" + ended + "/end", key: e.game, status: 409, code: "session_ended"},
		{name: "rival messages ended", method: "POST", path: "/v1/sessions/" + ended + "/messages", key: e.rival, body: msg, status: 403, code: "forbidden"},

		// Roles on the admin API.
		{name: "admin no key", method: "GET", path: "/admin/v1/rollout", status: 401, code: "unauthorized"},
		{name: "admin revoked key", method: "GET", path: "/admin/v1/rollout", key: e.revoked, status: 401, code: "unauthorized"},
		{name: "admin player key rollout", method: "GET", path: "/admin/v1/rollout", key: e.game, status: 403, code: "forbidden"},
		{name: "admin player key status", method: "GET", path: "/admin/v1/status", key: e.game, status: 403, code: "forbidden"},
		{name: "admin player key models", method: "GET", path: "/admin/v1/models", key: e.game, status: 403, code: "forbidden"},
		{name: "admin player key report", method: "GET", path: "/admin/v1/report", key: e.game, status: 403, code: "forbidden"},
		{name: "admin player key promote", method: "POST", path: "/admin/v1/rollout/promote", key: e.game, body: `{}`, status: 403, code: "forbidden"},
		{name: "admin player key rollback", method: "POST", path: "/admin/v1/rollout/rollback", key: e.game, status: 403, code: "forbidden"},
		{name: "admin player key canary", method: "POST", path: "/admin/v1/rollout/canary", key: e.game, body: `{"version":"v1","weight":50}`, status: 403, code: "forbidden"},
		// Echo matches paths as written: an escaped route name is no route (404), never the route unchecked.
		{name: "admin player key encoded path", method: "GET", path: "/admin/v1/%72ollout", key: e.game, status: 404, code: "not_found"},
		{name: "admin live-ops rollout", method: "GET", path: "/admin/v1/rollout", key: e.ops, status: 200},
		{name: "admin live-ops status", method: "GET", path: "/admin/v1/status", key: e.ops, status: 200},
		{name: "admin live-ops models", method: "GET", path: "/admin/v1/models", key: e.ops, status: 200},
		{name: "admin live-ops model", method: "GET", path: "/admin/v1/models/v1", key: e.ops, status: 200},
		{name: "admin admin rollout", method: "GET", path: "/admin/v1/rollout", key: e.admin, status: 200},
		{name: "admin admin models", method: "GET", path: "/admin/v1/models", key: e.admin, status: 200},
		{name: "dashboard is public", method: "GET", path: "/admin/", status: 200},
	})
}
