package rl

import (
	"context"
	"testing"

	"github.com/parleyhq/parley/schema"
)

// TestPlaySessionsLogsWhatThePlayersDid plays scripted NPCs against the
// players and replays every logged session through its persona: the same
// replies, and the player quits exactly where the log says.
func TestPlaySessionsLogsWhatThePlayersDid(t *testing.T) {
	pop, pol, prompts := scriptedPlayers(t, 12, 3, 50)
	const maxTurns = 5
	ds, err := PlaySessions(context.Background(), pol, NewPlayerEnv(pop), prompts, maxTurns)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[schema.EndReason]int{}
	for i, d := range ds {
		if err := d.Validate(); err != nil {
			t.Fatal(err)
		}
		reasons[d.Reason]++
		if n := len(d.Exchanges); n < 1 || n > maxTurns || (d.Reason == schema.EndMaxTurns && n != maxTurns) {
			t.Errorf("%s: %d exchanges, reason %s", d.SessionID, n, d.Reason)
		}
		p, _ := pop.Player(d.PlayerID)
		conv := p.Start(prompts[i].Seed)
		if d.Exchanges[0].User != conv.Opening() {
			t.Errorf("%s: opens with %q; want %q", d.SessionID, d.Exchanges[0].User, conv.Opening())
		}
		for k, x := range d.Exchanges {
			reply, end, _ := conv.Respond(x.NPC)
			last := k == len(d.Exchanges)-1
			switch {
			case last && d.Reason == schema.EndPlayerEnded && !end, !last && end:
				t.Errorf("%s exchange %d: the player ended %v; the log says %s after %d", d.SessionID, k+1, end, d.Reason, len(d.Exchanges))
			case !last && d.Exchanges[k+1].User != reply:
				t.Errorf("%s exchange %d: logged reply %q; the player said %q", d.SessionID, k+1, d.Exchanges[k+1].User, reply)
			}
		}
	}
	if reasons[schema.EndPlayerEnded] == 0 {
		t.Errorf("reasons %v; want some sessions the players ended", reasons)
	}
}
