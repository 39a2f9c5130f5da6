package securitytest

import (
	"context"
	"strings"
	"testing"
	"time"
)

func testInjection(t *testing.T, e *env) {
	sid := e.createSession(t, e.game, "inject-owner")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keysBefore, err := e.rds.Client.HLen(ctx, e.rds.Prefix+"apikeys").Result()
	if err != nil {
		t.Fatal(err)
	}
	get := func(name, id string) httpCase {
		return httpCase{name: name, method: "GET", path: "/v1/sessions/" + id, key: e.game, status: 404, code: "not_found"}
	}
	e.run(t, []httpCase{
		// Session ids that look like paths, globs or Redis commands.
		get("id dot-dot slash", "..%2F..%2Fadmin%2Fv1%2Fstatus"),
		get("id encoded dot-dot", "%2e%2e%2f%2e%2e%2fhealthz"),
		get("id double-encoded dot-dot", "%252e%252e%252f"+sid),
		get("id dot-dot backslash", "..%5C..%5C"+sid),
		get("id glob", "*"),
		get("id encoded glob", "%2A"),
		get("id glob suffix", sid[:8]+"*"),
		get("id question glob", sid[:len(sid)-1]+"%3F"),
		get("id CRLF FLUSHALL", "%0D%0AFLUSHALL%0D%0A"),
		get("id CRLF in uuid", sid[:8]+"%0D%0A"+sid[9:]),
		get("id redis command", "x%20DEL%20apikeys"),
		get("id key separator", sid+":lock"),
		get("id sql", "1%27%20OR%20%271%27%3D%271"),
		get("id null byte", sid+"%00"),
		get("id very long", strings.Repeat("a", 10000)),
		get("id very long uuid-like", strings.Repeat(sid, 1500)),
		get("id unicode", "%E2%80%AE"+sid),
		{name: "ended lock key", method: "POST", path: "/v1/sessions/" + sid + ":lock/end", key: e.game, status: 404, code: "not_found"},
		{name: "message to glob", method: "POST", path: "/v1/sessions/*/messages", key: e.game, body: `{"text":"hi"}`, status: 404, code: "not_found"},
		{name: "end glob", method: "POST", path: "/v1/sessions/*/end", key: e.game, status: 404, code: "not_found"},

		// Redis key injection through the ids a client chooses.
		{name: "player glob", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"*"}`, status: 400, code: "bad_request"},
		{name: "player CRLF command", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"p\r\nFLUSHALL\r\n"}`, status: 400, code: "bad_request"},
		{name: "player space command", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"p DEL apikeys"}`, status: 400, code: "bad_request"},
		{name: "player braces", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"{apikeys}"}`, status: 400, code: "bad_request"},
		{name: "player slash", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"../apikeys"}`, status: 400, code: "bad_request"},
		{name: "player colons", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"inject:apikeys:x"}`, status: 201},
		{name: "npc glob", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"p","npc_id":"*"}`, status: 400, code: "bad_request"},
		{name: "npc CRLF command", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"p","npc_id":"mira\r\nFLUSHALL"}`, status: 400, code: "bad_request"},
		{name: "npc path", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"p","npc_id":"../mira"}`, status: 400, code: "bad_request"},
		{name: "npc lua", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"p","npc_id":"');redis.call('FLUSHALL');--"}`, status: 400, code: "bad_request"},

		// Methods and routes.
		{name: "GET sessions", method: "GET", path: "/v1/sessions", key: e.game, status: 405, code: "method_not_allowed"},
		{name: "DELETE session", method: "DELETE", path: "/v1/sessions/" + sid, key: e.game, status: 405, code: "method_not_allowed"},
		{name: "PUT session", method: "PUT", path: "/v1/sessions/" + sid, key: e.game, body: `{}`, status: 405, code: "method_not_allowed"},
		{name: "GET messages", method: "GET", path: "/v1/sessions/" + sid + "/messages", key: e.game, status: 405, code: "method_not_allowed"},
		{name: "GET end", method: "GET", path: "/v1/sessions/" + sid + "/end", key: e.game, status: 405, code: "method_not_allowed"},
		{name: "GET chat completions", method: "GET", path: "/v1/chat/completions", key: e.game, status: 405, code: "method_not_allowed"},
		{name: "PUT chat completions", method: "PUT", path: "/v1/chat/completions", key: e.game, status: 405, code: "method_not_allowed"},
		{name: "POST healthz", method: "POST", path: "/healthz", status: 405, code: "method_not_allowed"},
		{name: "DELETE admin rollout", method: "DELETE", path: "/admin/v1/rollout", key: e.ops, status: 405, code: "method_not_allowed"},
		{name: "GET admin promote", method: "GET", path: "/admin/v1/rollout/promote", key: e.ops, status: 405, code: "method_not_allowed"},
		{name: "unknown route", method: "GET", path: "/v1/nothing", key: e.game, status: 404, code: "not_found"},
		{name: "unknown admin route", method: "GET", path: "/admin/v1/keys", key: e.ops, status: 404, code: "not_found"},
		{name: "admin via dot-dot", method: "GET", path: "/v1/../admin/v1/rollout", key: e.game, status: 404, code: "not_found"},
		// Dot segments are not resolved: no route has this path.
		{name: "sessions via admin dot-dot", method: "GET", path: "/admin/v1/../../v1/sessions/" + sid, key: e.rival, status: 404, code: "not_found"},

		// Headers that should change nothing.
		{name: "Host spoofed", method: "GET", path: "/v1/sessions/" + sid, key: e.game, header: map[string]string{"Host": "evil.example"}, status: 200},
		{name: "forwarded headers", method: "GET", path: "/v1/sessions/" + sid, key: e.rival,
			header: map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Real-IP": "127.0.0.1", "X-Forwarded-User": "game", "X-Client-ID": "game"}, status: 403, code: "forbidden"},
		{name: "method override", method: "POST", path: "/v1/sessions/" + sid, key: e.game, header: map[string]string{"X-HTTP-Method-Override": "GET"}, status: 405, code: "method_not_allowed"},
		{name: "traceparent garbage", method: "GET", path: "/v1/sessions/" + sid, key: e.game, header: map[string]string{"traceparent": strings.Repeat("ff-", 3000), "baggage": strings.Repeat("k=v,", 3000)}, status: 200},
	})

	t.Run("no header from the path", func(t *testing.T) {
		r := e.do(t, httpCase{method: "GET", path: "/v1/sessions/x%0D%0ASet-Cookie:%20pwned=1", key: e.game})
		if r.status != 404 || r.header.Get("Set-Cookie") != "" {
			t.Errorf("GET with CRLF Set-Cookie in the id = %d, Set-Cookie %q; want 404 and no cookie", r.status, r.header.Get("Set-Cookie"))
		}
		e.healthy(t)
	})
	t.Run("dashboard serves nothing outside", func(t *testing.T) {
		for _, p := range []string{"/admin/..%2F..%2F..%2Fetc%2Fpasswd", "/admin/%2e%2e/%2e%2e/go.mod", "/admin/....//....//etc/passwd"} {
			r := e.do(t, httpCase{method: "GET", path: p})
			if b := string(r.body); strings.Contains(b, "root:") || strings.Contains(b, "module github.com") {
				t.Errorf("GET %s = %d %.200s; served a file outside the dashboard", p, r.status, b)
			}
		}
	})

	// Redis still holds every key and the owner still reaches the session.
	keysAfter, err := e.rds.Client.HLen(ctx, e.rds.Prefix+"apikeys").Result()
	if err != nil || keysAfter != keysBefore {
		t.Errorf("api keys after injection cases = %d (%v); want %d", keysAfter, err, keysBefore)
	}
	if r := e.do(t, httpCase{method: "GET", path: "/v1/sessions/" + sid, key: e.game}); r.status != 200 {
		t.Errorf("owner reads the session after injection cases = %d %s; want 200", r.status, r.body)
	}
}

func testRaw(t *testing.T, e *env) {
	sid := e.createSession(t, e.game, "raw-owner")
	auth := "Authorization: Bearer " + e.game + "\r\n"
	get := func(path, headers string) string {
		return "GET " + path + " HTTP/1.1\r\nHost: gw\r\n" + headers + "Connection: close\r\n\r\n"
	}
	post := func(path, headers, body string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: gw\r\n" + headers + "Connection: close\r\n\r\n" + body
	}
	e.runRaw(t, []rawCase{
		{name: "plain request", request: get("/v1/sessions/"+sid, auth), status: 200},
		{name: "CR in a header value", request: get("/v1/sessions/"+sid, "X-Note: a\rb\r\n"+auth), status: 400},
		{name: "CR in the key", request: get("/v1/sessions/"+sid, "Authorization: Bearer "+e.game+"\rX-Injected: 1\r\n"), status: 400},
		{name: "NUL in the key", request: get("/v1/sessions/"+sid, "Authorization: Bearer "+e.game+"\x00\r\n"), status: 400},
		{name: "LF splits the key header", request: get("/v1/sessions/"+sid, "Authorization: Bearer\nX-Key: "+e.game+"\r\n"), status: 401, jsonError: true, code: "unauthorized"},
		{name: "two Authorization headers", request: get("/v1/sessions/"+sid, "Authorization: Bearer pk_wrong\r\n"+auth), status: 401, jsonError: true, code: "unauthorized"},
		{name: "space in a header name", request: get("/healthz", "Bad Header: x\r\n"), status: 400},
		{name: "CR in the path", request: "GET /v1/sessions/a\rb HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n", status: 400},
		{name: "relative path", request: "GET v1/sessions HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n", status: 400},
		{name: "no Host", request: "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n", status: 400},
		{name: "two Hosts", request: "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n", status: 400},
		{name: "Host with a space", request: "GET /healthz HTTP/1.1\r\nHost: a b\r\nConnection: close\r\n\r\n", status: 400},
		{name: "Host with CRLF payload", request: "GET /healthz HTTP/1.1\r\nHost: a\rSet-Cookie: x\r\nConnection: close\r\n\r\n", status: 400},
		{name: "Host very long", request: "GET /healthz HTTP/1.1\r\nHost: " + strings.Repeat("h", 100000) + "\r\nConnection: close\r\n\r\n", status: 200},
		{name: "Host spoofed on the player API", request: "GET /v1/sessions/" + sid + " HTTP/1.1\r\nHost: admin.internal\r\n" + auth + "Connection: close\r\n\r\n", status: 200},
		{name: "absolute-form target", request: "GET http://evil.example/v1/sessions/" + sid + " HTTP/1.1\r\nHost: evil.example\r\n" + auth + "Connection: close\r\n\r\n", status: 200},
		{name: "HTTP/1.0 without Host", request: "GET /healthz HTTP/1.0\r\n\r\n", status: 200},
		{name: "headers over 1 MiB", request: get("/healthz", "X-Big: "+strings.Repeat("b", 2<<20)+"\r\n"), status: 431},
		{name: "two Content-Lengths", request: post("/v1/sessions", auth+"Content-Length: 17\r\nContent-Length: 5\r\n", `{"player_id":"p"}`), status: 400},
		{name: "negative Content-Length", request: post("/v1/sessions", auth+"Content-Length: -1\r\n", `{"player_id":"p"}`), status: 400},
		{name: "bad chunk", request: post("/v1/sessions", auth+"Transfer-Encoding: chunked\r\n", "zz\r\n{}\r\n0\r\n\r\n"), status: 400, jsonError: true, code: "bad_request"},
		// net/http reads the chunked body and ignores Content-Length (RFC 9112 6.3).
		{name: "Content-Length and chunked", request: post("/v1/sessions", auth+"Content-Length: 100\r\nTransfer-Encoding: chunked\r\n", "11\r\n{\"player_id\":\"p\"}\r\n0\r\n\r\n"), status: 201},
		{name: "unknown Transfer-Encoding", request: post("/v1/sessions", auth+"Transfer-Encoding: gzip\r\n", "x"), status: 501},
	})
}
