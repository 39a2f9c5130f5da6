package securitytest

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// playerRate is the gateway's refill rate of a player bucket, per second.
const playerRate = 1.0

// burstOutcome counts the statuses of a burst and checks each response.
type burstOutcome struct {
	mu     sync.Mutex
	counts map[int]int
}

func (b *burstOutcome) add(t *testing.T, c httpCase, r response, allowed ...int) {
	t.Helper()
	b.mu.Lock()
	b.counts[r.status]++
	b.mu.Unlock()
	for _, s := range allowed {
		if r.status == s {
			if s >= 400 {
				checkErrorBody(t, r, c.code)
			}
			return
		}
	}
	t.Errorf("%s %s in a burst = %d %.300s; want one of %v", c.method, c.path, r.status, r.body, allowed)
}

// maxAdmitted is the most requests a full player bucket admits over d.
func maxAdmitted(d time.Duration) int {
	return playerBurst + int(math.Ceil(d.Seconds()*playerRate))
}

func testRateLimit(t *testing.T, e *env) {
	t.Run("sequential with spoofed forwarding headers", func(t *testing.T) {
		out := &burstOutcome{counts: map[int]int{}}
		start := time.Now()
		var retryAfter int
		for i := range 3 * playerBurst {
			ip := fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)
			c := httpCase{method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"burst-seq"}`, code: "rate_limited",
				header: map[string]string{"X-Forwarded-For": ip, "X-Real-IP": ip, "Forwarded": "for=" + ip, "True-Client-IP": ip}}
			r := e.do(t, c)
			out.add(t, c, r, http.StatusCreated, http.StatusTooManyRequests)
			if r.status == http.StatusTooManyRequests {
				retryAfter, _ = strconv.Atoi(r.header.Get("Retry-After"))
			}
		}
		elapsed := time.Since(start)
		t.Logf("statuses %v in %v", out.counts, elapsed)
		if out.counts[429] == 0 || out.counts[201] > maxAdmitted(elapsed) {
			t.Errorf("burst of %d creates for one player from %d addresses: %v; want at most %d admitted and the rest 429",
				3*playerBurst, 3*playerBurst, out.counts, maxAdmitted(elapsed))
		}
		// Another client's bucket for the same player id is its own.
		e.run(t, []httpCase{{name: "other client, same player", method: "POST", path: "/v1/sessions", key: e.rival, body: `{"player_id":"burst-seq"}`, status: 201}})
		// After Retry-After the player is served again.
		time.Sleep(time.Duration(retryAfter) * time.Second)
		e.run(t, []httpCase{{name: "after Retry-After", method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"burst-seq"}`, status: 201}})
	})

	t.Run("concurrent creates", func(t *testing.T) {
		out := &burstOutcome{counts: map[int]int{}}
		c := httpCase{method: "POST", path: "/v1/sessions", key: e.game, body: `{"player_id":"burst-par"}`, code: "rate_limited"}
		start := time.Now()
		var wg sync.WaitGroup
		for range 8 * playerBurst {
			wg.Go(func() {
				r, err := e.send(c)
				if err != nil {
					t.Error(err)
					return
				}
				out.add(t, c, r, http.StatusCreated, http.StatusTooManyRequests)
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		t.Logf("statuses %v in %v", out.counts, elapsed)
		if out.counts[429] == 0 || out.counts[201] > maxAdmitted(elapsed) {
			t.Errorf("concurrent burst of %d creates: %v; want at most %d admitted and the rest 429", 8*playerBurst, out.counts, maxAdmitted(elapsed))
		}
		e.healthy(t)
	})

	t.Run("concurrent messages", func(t *testing.T) {
		sid := e.createSession(t, e.game, "burst-msg")
		out := &burstOutcome{counts: map[int]int{}}
		c := httpCase{method: "POST", path: "/v1/sessions/" + sid + "/messages", key: e.game, body: `{"text":"hello again"}`}
		var wg sync.WaitGroup
		for range 4 * playerBurst {
			wg.Go(func() {
				r, err := e.send(c)
				if err != nil {
					t.Error(err)
					return
				}
				cc := c
				switch r.status {
				case http.StatusTooManyRequests:
					cc.code = "rate_limited"
				case http.StatusConflict:
					cc.code = "turn_in_progress"
				}
				out.add(t, cc, r, http.StatusOK, http.StatusTooManyRequests, http.StatusConflict)
			})
		}
		wg.Wait()
		t.Logf("statuses %v", out.counts)
		if out.counts[429] == 0 {
			t.Errorf("concurrent burst of %d messages in one session: %v; want some 429", 4*playerBurst, out.counts)
		}
		e.healthy(t)
	})

	t.Run("openai user bucket", func(t *testing.T) {
		out := &burstOutcome{counts: map[int]int{}}
		c := httpCase{method: "POST", path: "/v1/chat/completions", key: e.game, code: "rate_limited",
			body: `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"user":"burst-oai"}`}
		for range 3 * playerBurst {
			out.add(t, c, e.do(t, c), http.StatusOK, http.StatusTooManyRequests)
		}
		t.Logf("statuses %v", out.counts)
		if out.counts[429] == 0 {
			t.Errorf("burst of %d chat completions for one user: %v; want some 429", 3*playerBurst, out.counts)
		}
		e.healthy(t)
	})
}
