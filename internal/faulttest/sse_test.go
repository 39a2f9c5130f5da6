//go:build faults

package faulttest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/schema"
)

// streamResult is what an SSE client saw of one streamed reply.
type streamResult struct {
	status int
	tokens int
	done   bool
	err    error // how the stream ended, when not by a done event
}

// stream posts text to a session with Accept: text/event-stream and reads
// the events until the stream ends; first is closed at the first event.
func stream(ctx context.Context, base, key, id, text string, first chan<- struct{}) streamResult {
	var res streamResult
	var once sync.Once
	signal := func() { once.Do(func() { close(first) }) }
	defer signal()
	raw, _ := json.Marshal(schema.MessageRequest{Text: text})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/sessions/"+id+"/messages", bytes.NewReader(raw))
	if err != nil {
		res.err = err
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		res.err = err
		return res
	}
	defer resp.Body.Close()
	res.status = resp.StatusCode
	sc := bufio.NewScanner(resp.Body)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			switch event {
			case "token":
				res.tokens++
			case "done":
				res.done = true
			}
			signal()
		}
	}
	if !res.done {
		res.err = sc.Err()
		if res.err == nil {
			res.err = fmt.Errorf("stream ended without a done event")
		}
	}
	return res
}

// TestGatewayKilledDuringStreams opens SSE streams on gateway A, SIGKILLs A
// once every stream has its first token, and moves the players to gateway B
// on the same Redis. Each client whose stream was cut sees it end without
// the final done event (an error); B serves the same sessions with their
// transcripts intact. A message B takes while A's turn lock is still held
// is answered 409 turn_in_progress until the lock expires (RequestTimeout +
// 10 s after A took it); the wait is measured.
func TestGatewayKilledDuringStreams(t *testing.T) {
	began := time.Now()
	s := newStack(t, "faults-sse")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	specA, specB := s.spec(t, "gw-a"), s.spec(t, "gw-b")
	specA.MaxTokens = 500 // replies as long as the model goes
	specA.RequestTimeout, specB.RequestTimeout = 5*time.Second, 5*time.Second
	a, b := startGateway(t, specA), startGateway(t, specB)
	key, err := gateway.CreateKey(ctx, s.redis.Client, s.redis.Prefix, "game", gateway.RolePlayerClient)
	if err != nil {
		t.Fatal(err)
	}

	// Rounds of n streams on fresh sessions, until a round has streams
	// still open once every stream of it has begun: then A is killed.
	// (The random tiny model often stops after a few tokens.) A stream the
	// client has not finished reading may still be whole in its socket
	// buffer, so a kill can come too late for every stream of the round;
	// then A is started again and another round runs.
	const n = 8
	var (
		ids     []string
		first   []schema.Exchange
		results []streamResult
		rounds  int
	)
	for rounds = 1; ; rounds++ {
		if rounds > 30 {
			t.Fatalf("in %d rounds of %d streams none was still open once all had begun: the test proves nothing", rounds-1, n)
		}
		ids, first = make([]string, n), make([]schema.Exchange, n)
		for i := range n {
			sess, r := createSession(ctx, a.base, key, fmt.Sprintf("player-%d-%d", rounds, i))
			if r.status != http.StatusCreated {
				t.Fatalf("create session on A: %v", r)
			}
			ids[i] = sess.SessionID
			msg, r := sendMessage(ctx, a.base, key, sess.SessionID, "Tell me about the road north.")
			if r.status != http.StatusOK {
				t.Fatalf("first message on A: %v", r)
			}
			first[i] = schema.Exchange{Turn: msg.Turn, User: "Tell me about the road north.", NPC: msg.Reply, Safety: msg.Safety}
		}
		results = make([]streamResult, n)
		started := make([]chan struct{}, n)
		var finished atomic.Int32
		var wg sync.WaitGroup
		for i := range n {
			started[i] = make(chan struct{})
			wg.Go(func() {
				results[i] = stream(ctx, a.base, key, ids[i], "And what of the river?", started[i])
				finished.Add(1)
			})
		}
		for i := range n {
			<-started[i]
		}
		if finished.Load() < n {
			a.kill()
			wg.Wait()
			if slices.ContainsFunc(results, func(r streamResult) bool { return !r.done }) {
				break
			}
			t.Logf("round %d: every stream was whole before the kill; starting A again", rounds)
			a = startGateway(t, specA)
			continue
		}
		wg.Wait()
	}
	killedAt := time.Now()

	cut := 0
	for i, r := range results {
		t.Logf("round %d stream %d: status %d, %d tokens, done %v, ended by %v", rounds, i, r.status, r.tokens, r.done, r.err)
		if r.done {
			continue // finished before the kill
		}
		cut++
		if r.err == nil {
			t.Errorf("stream %d ended without done and without an error", i)
		}
	}

	var maxWait time.Duration
	conflicts, recordedCut := 0, 0
	for i, id := range ids {
		view, r := getSession(ctx, b.base, key, id)
		if r.status != http.StatusOK {
			t.Errorf("session %d on B: %v", i, r)
			continue
		}
		// A cut stream's turn is in the transcript when A recorded it
		// before it died (the client learns that with GET); a finished
		// one's always is.
		wantTurns := 1
		if results[i].done || (view.Turns == 2 && view.Transcript[1].User == "And what of the river?") {
			wantTurns = 2
		}
		if !results[i].done && wantTurns == 2 {
			recordedCut++
		}
		if view.Turns != wantTurns || len(view.Transcript) != wantTurns || view.Transcript[0] != first[i] {
			t.Errorf("session %d on B: %d turns, transcript %+v; want %d turns starting with %+v", i, view.Turns, view.Transcript, wantTurns, first[i])
		}
		// The next message, on B; 409 turn_in_progress while A's lock lives.
		var msg schema.MessageResponse
		waitFor(t, time.Minute, fmt.Sprintf("session %d answered on B", i), func() bool {
			msg, r = sendMessage(ctx, b.base, key, id, "Hello again.")
			if r.status == http.StatusConflict && r.code() == "turn_in_progress" {
				conflicts++
				return false
			}
			if r.status != http.StatusOK {
				t.Fatalf("session %d message on B: %v", i, r)
			}
			return true
		})
		maxWait = max(maxWait, time.Since(killedAt))
		if msg.Turn != wantTurns+1 {
			t.Errorf("session %d on B: turn %d; want %d", i, msg.Turn, wantTurns+1)
		}
		view, _ = getSession(ctx, b.base, key, id)
		if len(view.Transcript) != wantTurns+1 || view.Transcript[0] != first[i] {
			t.Errorf("session %d on B after its message: transcript %+v; want %d exchanges starting with %+v", i, view.Transcript, wantTurns+1, first[i])
		}
	}
	t.Logf("%d of %d streams cut by the kill in round %d (%d of them recorded by A before it died); %d answers of 409 turn_in_progress on B; all sessions answered on B within %.1fs of the kill (lock TTL %v)",
		cut, n, rounds, recordedCut, conflicts, maxWait.Seconds(), specA.RequestTimeout+10*time.Second)

	// A back on its data dir delivers what its spool holds: every turn in
	// these sessions' transcripts, the cut ones included, has its event on
	// the topic. A cut stream whose turn A logged but never saved has a
	// second event for the same turn number from B's next message; the
	// later one is the saved exchange.
	a2 := startGateway(t, specA)
	waitFor(t, time.Minute, "A's spool drained", func() bool {
		return a2.metric(t, "parley_sessionlog_spool_events") == 0
	})
	c := countEvents(topicRecords(ctx, t, s.kafka.Addrs, s.topic))
	superseded := 0
	for i, id := range ids {
		view, _ := getSession(ctx, b.base, key, id)
		sup, unsaved := checkTurnEvents(t, fmt.Sprintf("session %d", i), c.sessions[id], view.Transcript)
		superseded += sup
		if unsaved > 0 {
			t.Errorf("session %d: %d logged turns are not in the transcript %+v; B's next message should have saved that turn number",
				i, unsaved, view.Transcript)
		}
	}
	t.Logf("%d turn events logged by A for turns it never saved, superseded by B's", superseded)
	t.Logf("topic after A restarted: %d records, %d unique, %d duplicates", c.records, c.unique, c.duplicates)
	t.Logf("runtime %.1fs", time.Since(began).Seconds())
}
