package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/parleyhq/parley/gateway/client"
	"github.com/parleyhq/parley/schema"
)

// A player's session against a running gateway (`make run` prints its URL
// and a player key): start it, send a message, stream the next reply, read
// the transcript and end it. A refusal for the rate limit says how long to
// wait. TestClientAgainstGateway runs the same calls against a real gateway.
func ExampleClient() {
	c := &client.Client{BaseURL: "http://127.0.0.1:8080", APIKey: "pk_..."}
	ctx := context.Background()

	s, err := c.CreateSession(ctx, schema.CreateSessionRequest{PlayerID: "me"})
	var apiErr *client.Error
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusTooManyRequests {
		time.Sleep(apiErr.RetryAfter)
		s, err = c.CreateSession(ctx, schema.CreateSessionRequest{PlayerID: "me"})
	}
	if err != nil {
		log.Fatal(err)
	}
	m, err := c.SendMessage(ctx, s.SessionID, "Hi! Any good fishing spots around here?")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.Reply)
	_, err = c.StreamMessage(ctx, s.SessionID, "What bait should I use?", func(text string) error {
		fmt.Print(text)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	v, err := c.Session(ctx, s.SessionID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("\nexchanges:", len(v.Transcript))
	if _, err := c.EndSession(ctx, s.SessionID, ""); err != nil {
		log.Fatal(err)
	}
}
