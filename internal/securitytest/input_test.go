package securitytest

import (
	"encoding/json"
	"strings"
	"testing"
)

// nested returns depth opening brackets: deeper than encoding/json's limit
// of 10000 when depth is larger, and over the body limit at 100k.
func nested(depth int) string { return strings.Repeat("[", depth) }

// quote renders s as a JSON string.
func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// textBody is a message body whose text is n bytes of filler.
func textBody(n int) string { return `{"text":"` + strings.Repeat("a", n) + `"}` }

// compactText is n bytes of the text the tiny model's tokenizer was
// trained on, which it encodes in few tokens.
func compactText(n int) string {
	return strings.Repeat("Hello traveller, the road north is long. ", n/40+1)[:n]
}

// oversized is a well-formed JSON body just over the body limit.
func oversized(field string) string {
	return `{"` + field + `":"` + strings.Repeat("a", maxBodyBytes) + `"}`
}

func testInput(t *testing.T, e *env) {
	sid := e.createSession(t, e.game, "input-main")
	msgs := "/v1/sessions/" + sid + "/messages"
	// Each accepted message gets a session (and a player bucket) of its own.
	fresh := func(player string) string { return "/v1/sessions/" + e.createSession(t, e.game, player) + "/messages" }

	e.run(t, []httpCase{
		// POST /v1/sessions
		{name: "create malformed", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":`, status: 400, code: "bad_request"},
		{name: "create trailing garbage", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"p"} x`, status: 400, code: "bad_request"},
		{name: "create two values", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"p"}{"player_id":"q"}`, status: 400, code: "bad_request"},
		{name: "create wrong type", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":42}`, status: 400, code: "bad_request"},
		{name: "create array", method: "POST", path: "/v1/sessions", key: e.game, body: `[]`, status: 400, code: "bad_request"},
		{name: "create null", method: "POST", path: "/v1/sessions", key: e.game, body: `null`, status: 400, code: "bad_request"},
		{name: "create empty", method: "POST", path: "/v1/sessions", key: e.game, status: 400, code: "bad_request"},
		{name: "create blank", method: "POST", path: "/v1/sessions", key: e.game, body: " \n\t ", status: 400, code: "bad_request"},
		{name: "create byte order mark", method: "POST", path: "/v1/sessions", key: e.game, body: "\ufeff" + `{"player_id":"p"}`, status: 400, code: "bad_request"},
		{name: "create invalid utf-8", method: "POST", path: "/v1/sessions", key: e.game, body: "{\"player_id\":\"p\xff\"}", status: 400, code: "bad_request"},
		{name: "create empty player", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":""}`, status: 400, code: "bad_request"},
		{name: "create player too long", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"` + strings.Repeat("p", 129) + `"}`, status: 400, code: "bad_request"},
		{name: "create player null byte", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"p\u0000"}`, status: 400, code: "bad_request"},
		{name: "create client wrong type", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"p","client":"x"}`, status: 400, code: "bad_request"},
		{name: "create unknown npc", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"p","npc_id":"nobody"}`, status: 400, code: "bad_request"},
		{name: "create npc wrong type", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"p","npc_id":["mira"]}`, status: 400, code: "bad_request"},
		{name: "create nested", method: "POST", path: "/v1/sessions", key: e.game, body: nested(60000), status: 400, code: "bad_request"},
		{name: "create nested in field", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"p","x":` + nested(60000), status: 400, code: "bad_request"},
		{name: "create nested objects", method: "POST", path: "/v1/sessions", key: e.game, body: strings.Repeat(`{"a":`, 10500) + "1" + strings.Repeat("}", 10500), status: 400, code: "bad_request"},
		{name: "create 100k brackets", method: "POST", path: "/v1/sessions", key: e.game, body: nested(100000), status: 413, code: "too_large"},
		{name: "create oversized", method: "POST", path: "/v1/sessions", key: e.game, body: oversized("player_id"), status: 413, code: "too_large"},
		{name: "create unknown fields ignored", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"input-unknown","extra":{"a":[1,2,null]},"n":1e999}`, status: 201},
		{name: "create client meta", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"input-meta","npc_id":"mira","client":{"game_build":"1.2\u0000","locale":"` + strings.Repeat("x", 1000) + `"}}`, status: 201},

		// POST /v1/sessions/{id}/messages
		{name: "message malformed", method: "POST", path: msgs, key: e.game, body: `{"text":"hi"`, status: 400, code: "bad_request"},
		{name: "message trailing garbage", method: "POST", path: msgs, key: e.game, body: `{"text":"hi"}garbage`, status: 400, code: "bad_request"},
		{name: "message trailing value", method: "POST", path: msgs, key: e.game, body: `{"text":"hi"} {}`, status: 400, code: "bad_request"},
		{name: "message wrong type number", method: "POST", path: msgs, key: e.game, body: `{"text":42}`, status: 400, code: "bad_request"},
		{name: "message wrong type array", method: "POST", path: msgs, key: e.game, body: `{"text":["hi"]}`, status: 400, code: "bad_request"},
		{name: "message wrong type object", method: "POST", path: msgs, key: e.game, body: `{"text":{"a":"hi"}}`, status: 400, code: "bad_request"},
		{name: "message huge number", method: "POST", path: msgs, key: e.game, body: `{"text":1e999}`, status: 400, code: "bad_request"},
		{name: "message huge integer", method: "POST", path: msgs, key: e.game, body: `{"text":` + strings.Repeat("9", 5000) + `}`, status: 400, code: "bad_request"},
		{name: "message null text", method: "POST", path: msgs, key: e.game, body: `{"text":null}`, status: 400, code: "bad_request"},
		{name: "message empty text", method: "POST", path: msgs, key: e.game, body: `{"text":""}`, status: 400, code: "bad_request"},
		{name: "message blank text", method: "POST", path: msgs, key: e.game, body: `{"text":" \n\t "}`, status: 400, code: "bad_request"},
		{name: "message no text", method: "POST", path: msgs, key: e.game, body: `{}`, status: 400, code: "bad_request"},
		{name: "message empty body", method: "POST", path: msgs, key: e.game, status: 400, code: "bad_request"},
		{name: "message invalid utf-8", method: "POST", path: msgs, key: e.game, body: "{\"text\":\"caf\xe9\"}", status: 400, code: "bad_request"},
		{name: "message truncated utf-8", method: "POST", path: msgs, key: e.game, body: "{\"text\":\"\xe2\x82\"}", status: 400, code: "bad_request"},
		{name: "message overlong utf-8", method: "POST", path: msgs, key: e.game, body: "{\"text\":\"\xc0\xaf\"}", status: 400, code: "bad_request"},
		{name: "message raw control byte", method: "POST", path: msgs, key: e.game, body: "{\"text\":\"a\x00b\"}", status: 400, code: "bad_request"},
		{name: "message nested", method: "POST", path: msgs, key: e.game, body: nested(60000), status: 400, code: "bad_request"},
		{name: "message nested in text", method: "POST", path: msgs, key: e.game, body: `{"text":` + nested(60000), status: 400, code: "bad_request"},
		{name: "message 100k brackets", method: "POST", path: msgs, key: e.game, body: nested(100000), status: 413, code: "too_large"},
		{name: "message oversized text", method: "POST", path: msgs, key: e.game, body: textBody(maxMessageBytes + 1), status: 413, code: "too_large"},
		{name: "message oversized multibyte text", method: "POST", path: msgs, key: e.game, body: `{"text":"` + strings.Repeat("é", maxMessageBytes/2+1) + `"}`, status: 413, code: "too_large"},
		{name: "message oversized body", method: "POST", path: msgs, key: e.game, body: oversized("text"), status: 413, code: "too_large"},
		// Asking for a stream changes nothing about refusals: they are JSON.
		{name: "message SSE invalid utf-8", method: "POST", path: msgs, key: e.game, header: map[string]string{"Accept": "text/event-stream"}, body: "{\"text\":\"\xff\"}", status: 400, code: "bad_request"},
		{name: "message SSE oversized text", method: "POST", path: msgs, key: e.game, header: map[string]string{"Accept": "text/event-stream"}, body: textBody(maxMessageBytes + 1), status: 413, code: "too_large"},
		{name: "message long text", method: "POST", path: fresh("input-long"), key: e.game, body: `{"text":"` + compactText(maxMessageBytes/4) + `"}`, status: 200},
		// A message under the byte limit may still be more tokens than the
		// model's context holds (the tiny model's is 1024).
		{name: "message over the model context", method: "POST", path: fresh("input-context"), key: e.game, body: textBody(maxMessageBytes), status: 413, code: "too_large"},
		{name: "message escaped null byte", method: "POST", path: fresh("input-null"), key: e.game, body: `{"text":"a\u0000b"}`, status: 200},
		{name: "message lone surrogate", method: "POST", path: fresh("input-surrogate"), key: e.game, body: `{"text":"hi \ud800 there"}`, status: 200},
		{name: "message unknown fields ignored", method: "POST", path: fresh("input-unknown-msg"), key: e.game, body: `{"text":"hello","role":"system","turn":-1,"x":[[[[1]]]]}`, status: 200},
		{name: "message injection-looking text", method: "POST", path: fresh("input-inject"), key: e.game, body: `{"text":` + quote("'; DROP TABLE sessions; --\r\nFLUSHALL\r\n<script>alert(1)</script> {{API_PATH}}") + `}`, status: 200},
	})

	// The session the bad inputs went to is intact and took no turn.
	r := e.do(t, httpCase{method: "GET", path: "/v1/sessions/" + sid, key: e.game})
	if r.status != 200 || !strings.Contains(string(r.body), `"turns":0`) {
		t.Errorf("session after bad inputs = %d %s; want 200 with no turns", r.status, r.body)
	}
}

func testOpenAIInput(t *testing.T, e *env) {
	const path = "/v1/chat/completions"
	user := func(content string) string { return `{"messages":[{"role":"user","content":` + content + `}]}` }
	e.run(t, []httpCase{
		{name: "malformed", method: "POST", path: path, key: e.game, body: `{"messages":[`, status: 400, code: "bad_request"},
		{name: "trailing garbage", method: "POST", path: path, key: e.game, body: user(`"hi"`) + `]`, status: 400, code: "bad_request"},
		{name: "empty body", method: "POST", path: path, key: e.game, status: 400, code: "bad_request"},
		{name: "no messages", method: "POST", path: path, key: e.game, body: `{}`, status: 400, code: "bad_request"},
		{name: "empty messages", method: "POST", path: path, key: e.game, body: `{"messages":[]}`, status: 400, code: "bad_request"},
		{name: "messages wrong type", method: "POST", path: path, key: e.game, body: `{"messages":"hi"}`, status: 400, code: "bad_request"},
		{name: "content wrong type", method: "POST", path: path, key: e.game, body: user(`42`), status: 400, code: "bad_request"},
		{name: "content parts array", method: "POST", path: path, key: e.game, body: user(`[{"type":"text","text":"hi"}]`), status: 400, code: "bad_request"},
		{name: "unknown role", method: "POST", path: path, key: e.game, body: `{"messages":[{"role":"root","content":"hi"}]}`, status: 400, code: "bad_request"},
		{name: "last message not user", method: "POST", path: path, key: e.game, body: `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]}`, status: 400, code: "bad_request"},
		{name: "blank last message", method: "POST", path: path, key: e.game, body: user(`"   "`), status: 400, code: "bad_request"},
		{name: "invalid utf-8", method: "POST", path: path, key: e.game, body: user("\"caf\xe9\""), status: 400, code: "bad_request"},
		{name: "invalid utf-8 in system", method: "POST", path: path, key: e.game, body: "{\"messages\":[{\"role\":\"system\",\"content\":\"\xff\"},{\"role\":\"user\",\"content\":\"hi\"}]}", status: 400, code: "bad_request"},
		{name: "temperature too high", method: "POST", path: path, key: e.game, body: `{"messages":[{"role":"user","content":"hi"}],"temperature":3}`, status: 400, code: "bad_request"},
		{name: "temperature negative", method: "POST", path: path, key: e.game, body: `{"messages":[{"role":"user","content":"hi"}],"temperature":-1}`, status: 400, code: "bad_request"},
		{name: "temperature huge", method: "POST", path: path, key: e.game, body: `{"messages":[{"role":"user","content":"hi"}],"temperature":1e999}`, status: 400, code: "bad_request"},
		{name: "temperature wrong type", method: "POST", path: path, key: e.game, body: `{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}`, status: 400, code: "bad_request"},
		{name: "top_p zero", method: "POST", path: path, key: e.game, body: `{"messages":[{"role":"user","content":"hi"}],"top_p":0}`, status: 400, code: "bad_request"},
		{name: "max_tokens zero", method: "POST", path: path, key: e.game, body: `{"messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, status: 400, code: "bad_request"},
		{name: "max_tokens negative", method: "POST", path: path, key: e.game, body: `{"messages":[{"role":"user","content":"hi"}],"max_tokens":-5}`, status: 400, code: "bad_request"},
		{name: "max_tokens overflow", method: "POST", path: path, key: e.game, body: `{"messages":[{"role":"user","content":"hi"}],"max_tokens":99999999999999999999}`, status: 400, code: "bad_request"},
		{name: "max_tokens fraction", method: "POST", path: path, key: e.game, body: `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1.5}`, status: 400, code: "bad_request"},
		{name: "stream wrong type", method: "POST", path: path, key: e.game, body: `{"messages":[{"role":"user","content":"hi"}],"stream":"yes"}`, status: 400, code: "bad_request"},
		{name: "user with CRLF", method: "POST", path: path, key: e.game, body: `{"messages":[{"role":"user","content":"hi"}],"user":"p\r\nFLUSHALL"}`, status: 400, code: "bad_request"},
		{name: "user glob", method: "POST", path: path, key: e.game, body: `{"messages":[{"role":"user","content":"hi"}],"user":"*"}`, status: 400, code: "bad_request"},
		{name: "nested", method: "POST", path: path, key: e.game, body: nested(60000), status: 400, code: "bad_request"},
		{name: "nested in messages", method: "POST", path: path, key: e.game, body: `{"messages":` + nested(60000), status: 400, code: "bad_request"},
		{name: "100k brackets", method: "POST", path: path, key: e.game, body: nested(100000), status: 413, code: "too_large"},
		{name: "oversized last message", method: "POST", path: path, key: e.game, body: user(quote(strings.Repeat("a", maxMessageBytes+1))), status: 413, code: "too_large"},
		{name: "oversized body", method: "POST", path: path, key: e.game, body: `{"messages":[{"role":"system","content":"` + strings.Repeat("a", maxBodyBytes) + `"},{"role":"user","content":"hi"}]}`, status: 413, code: "too_large"},
		{name: "stream invalid utf-8", method: "POST", path: path, key: e.game, body: "{\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}", status: 400, code: "bad_request"},
		{name: "stream oversized last message", method: "POST", path: path, key: e.game, body: `{"stream":true,"messages":[{"role":"user","content":` + quote(strings.Repeat("a", maxMessageBytes+1)) + `}]}`, status: 413, code: "too_large"},
		{name: "huge max_tokens clamped", method: "POST", path: path, key: e.game, body: `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2147483647}`, status: 200},
		{name: "unknown fields ignored", method: "POST", path: path, key: e.game, body: `{"model":"gpt-4","store":true,"metadata":{"a":"b"},"messages":[{"role":"user","content":"hi","name":"x"}]}`, status: 200},
		{name: "n over 1 refused", method: "POST", path: path, key: e.game, body: `{"n":5,"messages":[{"role":"user","content":"hi"}]}`, status: 400, code: "bad_request"},
		{name: "functions refused", method: "POST", path: path, key: e.game, body: `{"functions":[{"name":"f"}],"messages":[{"role":"user","content":"hi"}]}`, status: 400, code: "bad_request"},
		{name: "tools refused", method: "POST", path: path, key: e.game, body: `{"tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"hi"}]}`, status: 400, code: "bad_request"},
		{name: "escaped null byte", method: "POST", path: path, key: e.game, body: user(`"a\u0000b"`), status: 200},
		{name: "system prompt over the model context", method: "POST", path: path, key: e.game, body: `{"messages":[{"role":"system","content":"` + strings.Repeat("be nice. ", 6000) + `"},{"role":"user","content":"hi"}]}`, status: 413, code: "too_large"},
		{name: "many messages", method: "POST", path: path, key: e.game, body: `{"messages":[` + strings.Repeat(`{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},`, 600) + `{"role":"user","content":"and now?"}]}`, status: 200},
	})
}

func testAdminInput(t *testing.T, e *env) {
	const canary = "/admin/v1/rollout/canary"
	restore := e.snapshotRollout(t)
	defer restore()
	cases := []httpCase{
		{name: "canary empty body", method: "POST", path: canary, key: e.ops, status: 400, code: "bad_request"},
		{name: "canary malformed", method: "POST", path: canary, key: e.ops, body: `{"version":`, status: 400, code: "bad_request"},
		{name: "canary trailing garbage", method: "POST", path: canary, key: e.ops, body: `{"version":"v2","weight":10} x`, status: 400, code: "bad_request"},
		{name: "canary unknown field", method: "POST", path: canary, key: e.ops, body: `{"version":"v2","weight":10,"stable":"evil"}`, status: 400, code: "bad_request"},
		{name: "canary wrong type", method: "POST", path: canary, key: e.ops, body: `{"version":2,"weight":"ten"}`, status: 400, code: "bad_request"},
		{name: "canary huge weight", method: "POST", path: canary, key: e.ops, body: `{"version":"v2","weight":1e999}`, status: 400, code: "bad_request"},
		{name: "canary weight out of range", method: "POST", path: canary, key: e.ops, body: `{"version":"v2","weight":101}`, status: 400, code: "bad_request"},
		{name: "canary version injection", method: "POST", path: canary, key: e.ops, body: `{"version":"../../etc/passwd","weight":10}`, status: 400, code: "bad_request"},
		{name: "canary invalid utf-8", method: "POST", path: canary, key: e.ops, body: "{\"version\":\"v\xff\",\"weight\":10}", status: 400, code: "bad_request"},
		{name: "canary nested", method: "POST", path: canary, key: e.ops, body: nested(60000), status: 400, code: "bad_request"},
		{name: "canary oversized", method: "POST", path: canary, key: e.ops, body: oversized("version"), status: 413, code: "too_large"},
		{name: "canary unknown version", method: "POST", path: canary, key: e.ops, body: `{"version":"v9","weight":10}`, status: 404, code: "not_found"},
		{name: "promote without canary", method: "POST", path: "/admin/v1/rollout/promote", key: e.ops, status: 409, code: "conflict"},
		{name: "promote unknown field", method: "POST", path: "/admin/v1/rollout/promote", key: e.ops, body: `{"generation":1,"by":"x"}`, status: 400, code: "bad_request"},
		{name: "rollback wrong type", method: "POST", path: "/admin/v1/rollout/rollback", key: e.ops, body: `{"generation":"1"}`, status: 400, code: "bad_request"},
		{name: "pause nested", method: "POST", path: "/admin/v1/rollout/pause", key: e.ops, body: nested(60000), status: 400, code: "bad_request"},
		{name: "model traversal", method: "GET", path: "/admin/v1/models/..%2F..%2F..%2Fetc%2Fpasswd", key: e.ops, status: 404, code: "not_found"},
		{name: "model dot-dot", method: "GET", path: "/admin/v1/models/..", key: e.ops, status: 404, code: "not_found"},
		{name: "model query traversal", method: "GET", path: "/admin/v1/models?model=..%2F..%2Fetc", key: e.ops, status: 404, code: "not_found"},
		{name: "diff missing versions", method: "GET", path: "/admin/v1/models/diff", key: e.ops, status: 400, code: "bad_request"},
		// The timeline is the learner's published analysis (da9fbc0): step and
		// points are no longer parameters, and nothing is published here.
		{name: "timeline old step ignored", method: "GET", path: "/admin/v1/timeline?experiment=x&step=-1s", key: e.ops, status: 404, code: "not_found"},
		{name: "timeline old points ignored", method: "GET", path: "/admin/v1/timeline?experiment=x&points=99999999999999999999", key: e.ops, status: 404, code: "not_found"},
		{name: "timeline deployment glob", method: "GET", path: "/admin/v1/timeline?deployment=*", key: e.ops, status: 404, code: "not_found"},
		{name: "rollout of a glob deployment", method: "GET", path: "/admin/v1/rollout?deployment=*", key: e.ops, status: 404, code: "not_found"},
	}
	// Each case starts from the initial rollout state, so that a change
	// wrongly accepted does not decide the next case's status.
	for _, c := range cases {
		restore()
		e.run(t, []httpCase{c})
	}
	restore()
	// Nothing above changed what is served.
	r := e.do(t, httpCase{method: "GET", path: "/admin/v1/rollout", key: e.ops})
	if r.status != 200 || !strings.Contains(string(r.body), `"stable":"v1"`) || strings.Contains(string(r.body), `"canary":"`) {
		t.Errorf("rollout after bad admin requests = %d %.300s; want stable v1 and no canary", r.status, r.body)
	}
}
