package client_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/gateway/client"
	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/internal/bench"
	"github.com/parleyhq/parley/internal/testenv"
	"github.com/parleyhq/parley/schema"
)

// dropEvents is an EventSink that keeps nothing.
type dropEvents struct{}

func (dropEvents) Publish(context.Context, schema.SessionEvent) error { return nil }

const reply = "Welcome back, traveller! The road north is quiet tonight."

// startGateway serves a real gateway on a loopback port with the instant
// stub engine and a player bucket of burst 6 refilled every 100 s, and
// returns a client with a player-client key.
func startGateway(t *testing.T) *client.Client {
	t.Helper()
	r := testenv.StartRedis(t)
	tok, err := inference.TrainTokenizer([]string{reply, "Where does the north road lead?"}, 300)
	if err != nil {
		t.Fatal(err)
	}
	cfg := gateway.DefaultConfig()
	cfg.KeyPrefix = r.Prefix
	cfg.PlayerRate, cfg.PlayerBurst = 0.01, 6
	base, stop, err := bench.ServeGateway(cfg, gateway.Deps{
		Redis: r.Client, Events: dropEvents{}, Engine: bench.NewInstantGenerator(tok, reply, 4096),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("gateway stopped with %v", err)
		}
	})
	key, err := gateway.CreateKey(t.Context(), r.Client, r.Prefix, "game-a", gateway.RolePlayerClient)
	if err != nil {
		t.Fatal(err)
	}
	c := &client.Client{BaseURL: base, APIKey: key}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClientAgainstGateway plays a session through every call of the
// player API on a real gateway, then runs into its rate limit.
func TestClientAgainstGateway(t *testing.T) {
	c := startGateway(t)
	ctx := t.Context()

	s, err := c.CreateSession(ctx, schema.CreateSessionRequest{PlayerID: "p1"})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	if s.SessionID == "" || s.Greeting == "" {
		t.Errorf("CreateSession = %+v; want a session id and the persona's greeting", s)
	}
	m, err := c.SendMessage(ctx, s.SessionID, "Hello!")
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	if m.Turn != 1 || m.Reply != reply {
		t.Errorf("SendMessage = %+v; want turn 1 and reply %q", m, reply)
	}
	var pieces []string
	done, err := c.StreamMessage(ctx, s.SessionID, "Where does the north road lead?", func(p string) error {
		pieces = append(pieces, p)
		return nil
	})
	if err != nil {
		t.Fatalf("StreamMessage: %v", err)
	}
	if done.Turn != 2 || done.Reply != reply || len(pieces) < 2 || strings.Join(pieces, "") != reply {
		t.Errorf("StreamMessage = %+v from %d token events %q; want turn 2 and the reply, token by token", done, len(pieces), pieces)
	}
	v, err := c.Session(ctx, s.SessionID)
	if err != nil {
		t.Fatalf("Session: %v", err)
	}
	if v.Turns != 2 || len(v.Transcript) != 2 || v.Transcript[1].User != "Where does the north road lead?" || v.Ended != "" {
		t.Errorf("Session = %+v; want two exchanges, not ended", v)
	}
	end, err := c.EndSession(ctx, s.SessionID, "")
	if err != nil {
		t.Fatalf("EndSession: %v", err)
	}
	if end.Ended != schema.EndPlayerEnded {
		t.Errorf("EndSession ended = %q; want %q", end.Ended, schema.EndPlayerEnded)
	}

	_, err = c.SendMessage(ctx, s.SessionID, "Are you still there?")
	assertError(t, err, http.StatusConflict, "session_ended")
	_, err = c.Session(ctx, "no-such-session")
	assertError(t, err, http.StatusNotFound, "not_found")
	wrongKey := *c
	wrongKey.APIKey = "pk_wrong"
	_, err = wrongKey.CreateSession(ctx, schema.CreateSessionRequest{PlayerID: "p1"})
	assertError(t, err, http.StatusUnauthorized, "unauthorized")

	chat := schema.ChatCompletionRequest{Messages: []schema.ChatMessage{{Role: "user", Content: "Hello there"}}, User: "p-chat"}
	cc, err := c.ChatCompletion(ctx, chat)
	if err != nil {
		t.Fatalf("ChatCompletion: %v", err)
	}
	if cc.Choices[0].Message.Content != reply || cc.Usage.CompletionTokens == 0 {
		t.Errorf("ChatCompletion = %+v; want the reply and its usage", cc)
	}
	var streamed strings.Builder
	finish := ""
	err = c.StreamChatCompletion(ctx, chat, func(ch schema.ChatCompletionChunk) error {
		streamed.WriteString(ch.Choices[0].Delta.Content)
		if f := ch.Choices[0].FinishReason; f != nil {
			finish = *f
		}
		return nil
	})
	if err != nil || streamed.String() != reply || finish != "stop" {
		t.Errorf("StreamChatCompletion = %v, text %q, finish %q; want the reply and stop", err, streamed.String(), finish)
	}

	// p2's bucket holds 6 requests and refills one per 100 s: the 7th is
	// refused with a Retry-After.
	for i := range 7 {
		_, err = c.CreateSession(ctx, schema.CreateSessionRequest{PlayerID: "p2"})
		if i < 6 && err != nil {
			t.Fatalf("CreateSession %d of p2: %v", i+1, err)
		}
	}
	ae := assertError(t, err, http.StatusTooManyRequests, "rate_limited")
	if ae != nil && ae.RetryAfter < time.Second {
		t.Errorf("RetryAfter = %v; want at least 1s", ae.RetryAfter)
	}
}

// TestChatCompletionsInSession makes chat completions, whole and streamed,
// the turns of one logged session with WithSession, reads its transcript
// and ends it.
func TestChatCompletionsInSession(t *testing.T) {
	c := startGateway(t)
	ctx := t.Context()
	id := uuid.Must(uuid.NewV7()).String()
	chat := func(text string) schema.ChatCompletionRequest {
		return schema.ChatCompletionRequest{Messages: []schema.ChatMessage{{Role: "user", Content: text}}, User: "p-sdk"}
	}

	if _, err := c.ChatCompletion(ctx, chat("Hello there"), client.WithSession(id)); err != nil {
		t.Fatalf("ChatCompletion in a new session: %v", err)
	}
	err := c.StreamChatCompletion(ctx, chat("Where does the north road lead?"), nil, client.WithSession(id))
	if err != nil {
		t.Fatalf("StreamChatCompletion in the session: %v", err)
	}
	v, err := c.Session(ctx, id)
	if err != nil {
		t.Fatalf("Session: %v", err)
	}
	if v.PlayerID != "p-sdk" || v.Turns != 2 || len(v.Transcript) != 2 ||
		v.Transcript[0].User != "Hello there" || v.Transcript[1].NPC != reply {
		t.Errorf("Session = %+v; want player p-sdk's two exchanges", v)
	}
	// A game whose own limit on exchanges ends the session says so.
	if end, err := c.EndSession(ctx, id, schema.EndMaxTurns); err != nil || end.Ended != schema.EndMaxTurns {
		t.Fatalf("EndSession with max_turns = %q, %v; want max_turns", end.Ended, err)
	}
	_, err = c.ChatCompletion(ctx, chat("Still there?"), client.WithSession(id))
	assertError(t, err, http.StatusConflict, "session_ended")
	_, err = c.ChatCompletion(ctx, chat("Hi"), client.WithSession("not-a-uuid"))
	assertError(t, err, http.StatusBadRequest, "bad_request")
}

// assertError checks that err is a *client.Error with status and code, and
// returns it.
func assertError(t *testing.T, err error, status int, code string) *client.Error {
	t.Helper()
	var ae *client.Error
	if !errors.As(err, &ae) {
		t.Errorf("err = %v; want a *client.Error %d %s", err, status, code)
		return nil
	}
	if ae.Status != status || ae.Code != code || ae.Message == "" {
		t.Errorf("error = %+v; want status %d, code %s and a message", ae, status, code)
	}
	return ae
}
