//go:build faults

package faulttest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator/bots"
)

// TestBrokerKilledDuringLoad stops the broker while bots play against a
// gateway process, starts it again, and counts the events on the topic
// against what the bots were answered: every session's start, turns and end
// are there once after deduplication on event_id, none missing.
func TestBrokerKilledDuringLoad(t *testing.T) {
	began := time.Now()
	s := newStack(t, "faults-broker")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	gw := startGateway(t, s.spec(t, "gw-broker"))
	key, err := gateway.CreateKey(ctx, s.redis.Client, s.redis.Prefix, "game", gateway.RolePlayerClient)
	if err != nil {
		t.Fatal(err)
	}

	players := bots.DefaultConfig()
	players.GatewayURL, players.APIKey = gw.base, key
	players.Players, players.Sessions, players.Concurrency, players.MaxTurns = 16, 400, 4, 4
	type result struct {
		sum bots.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := bots.Run(ctx, players, slog.New(slog.DiscardHandler))
		done <- result{sum, err}
	}()

	// Twice: let events reach the broker, take it away while the bots go
	// on (events wait in the spool), bring it back.
	var downtime time.Duration
	backlog := 0.0
	restartsDuringLoad := 0
	for cycle := range 2 {
		delivered := gw.metric(t, "parley_sessionlog_events_delivered_total")
		waitFor(t, 2*time.Minute, "events delivered", func() bool {
			return gw.metric(t, "parley_sessionlog_events_delivered_total") >= delivered+20
		})
		published := gw.metric(t, "parley_sessionlog_events_published_total")
		s.kafka.Stop()
		downAt := time.Now()
		waitFor(t, 2*time.Minute, "events spooled while the broker is down", func() bool {
			return gw.metric(t, "parley_sessionlog_events_published_total") >= published+150
		})
		b := gw.metric(t, "parley_sessionlog_spool_events")
		if b <= 0 {
			t.Errorf("cycle %d: spool backlog with the broker down = %v; want events waiting", cycle, b)
		}
		backlog = max(backlog, b)
		s.kafka.Start()
		downtime += time.Since(downAt)
		select {
		case <-done:
			t.Fatalf("cycle %d: the bots finished while the broker was down; the test needs load after the restart (raise Sessions)", cycle)
		default:
			restartsDuringLoad++
		}
	}

	r := <-done
	if r.err != nil {
		t.Fatalf("bots: %v", r.err)
	}
	sum := r.sum
	waitFor(t, 2*time.Minute, "spool drained", func() bool {
		return gw.metric(t, "parley_sessionlog_spool_events") == 0
	})
	delivered := gw.metric(t, "parley_sessionlog_events_delivered_total")
	sendErrors := gw.metric(t, "parley_sessionlog_send_errors_total")

	c := countEvents(topicRecords(ctx, t, s.kafka.Addrs, s.topic))
	want := 2*sum.Completed + sum.Exchanges
	t.Logf("broker stopped and restarted %d times during load, down %.1fs in all; bots: %d sessions, %d completed, %d errors %v, %d exchanges, %d retries, %.1fs",
		restartsDuringLoad, downtime.Seconds(), sum.Sessions, sum.Completed, sum.Errors, sum.ErrorCodes, sum.Exchanges, sum.Retries, sum.Seconds)
	t.Logf("events: bots expect %d; topic holds %d records, %d unique, %d duplicates (%v); gateway delivered %v, largest spool backlog seen %v, failed writes %v",
		want, c.records, c.unique, c.duplicates, c.byType, delivered, backlog, sendErrors)

	if sum.Errors != 0 || sum.Completed != players.Sessions {
		t.Errorf("bots: %d of %d completed, %d errors %v; want all completed: a broker outage must not reach players",
			sum.Completed, players.Sessions, sum.Errors, sum.ErrorCodes)
	}
	if c.byType[schema.SessionStarted] != sum.Completed || c.byType[schema.SessionEnded] != sum.Completed || c.byType[schema.TurnEvent] != sum.Exchanges {
		t.Errorf("unique events by type = %v; want %d started, %d turns, %d ended (events lost or invented)",
			c.byType, sum.Completed, sum.Exchanges, sum.Completed)
	}
	// Every session is whole: started, turns 1..n in order, ended with n.
	for id, evs := range c.sessions {
		var turns []int
		started, ended, endTurns := 0, 0, -1
		for _, ev := range evs {
			switch ev.Type {
			case schema.SessionStarted:
				started++
			case schema.TurnEvent:
				turns = append(turns, ev.Turn)
			case schema.SessionEnded:
				ended++
				endTurns = ev.Turns
			}
		}
		whole := started == 1 && ended == 1 && endTurns == len(turns)
		for i, n := range turns {
			whole = whole && n == i+1 // a partition keeps a session's order
		}
		if !whole {
			t.Errorf("session %s on the topic: %d started, turns %v, %d ended with turns=%d; want 1 started, turns 1..n in order, 1 ended with n",
				id, started, turns, ended, endTurns)
		}
	}
	t.Logf("runtime %.1fs", time.Since(began).Seconds())
}
