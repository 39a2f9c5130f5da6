//go:build faults

package faulttest

import (
	"fmt"
	"testing"
	"time"

	"github.com/parleyhq/parley/schema"
)

// errorRecorder is a testing.TB that keeps the errors reported to it.
type errorRecorder struct {
	testing.TB
	errs []string
}

func (r *errorRecorder) Helper() {}

func (r *errorRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckTurnEvents checks the check itself on the cases the fault tests
// meet: a killed gateway's unsaved turn superseded by the retry passes; a
// saved turn without an event, or whose latest event is not the saved
// exchange, fails.
func TestCheckTurnEvents(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	turn := func(n int, user string, sec int) schema.SessionEvent {
		return schema.SessionEvent{Type: schema.TurnEvent, Turn: n, UserText: user, NPCText: "reply to " + user, TS: at.Add(time.Duration(sec) * time.Second)}
	}
	saved := func(n int, user string) schema.Exchange {
		return schema.Exchange{Turn: n, User: user, NPC: "reply to " + user}
	}
	transcript := []schema.Exchange{saved(1, "hello"), saved(2, "again")}
	tests := []struct {
		name                string
		events              []schema.SessionEvent
		superseded, unsaved int
		wantErr             bool
	}{
		{"one event per turn", []schema.SessionEvent{turn(1, "hello", 1), turn(2, "again", 2)}, 0, 0, false},
		// A logs turn 2 "river" and dies before saving it; B saves "again"
		// as turn 2. A's spool reaches the topic last.
		{"killed gateway's turn superseded", []schema.SessionEvent{turn(1, "hello", 1), turn(2, "again", 30), turn(2, "river", 2)}, 1, 0, false},
		{"logged turn without a retry", []schema.SessionEvent{turn(1, "hello", 1), turn(2, "again", 2), turn(3, "more", 3)}, 0, 1, false},
		{"saved turn without an event", []schema.SessionEvent{turn(1, "hello", 1)}, 0, 0, true},
		{"latest event is not the saved one", []schema.SessionEvent{turn(1, "hello", 1), turn(2, "again", 2), turn(2, "river", 30)}, 1, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &errorRecorder{TB: t}
			sup, unsaved := checkTurnEvents(rec, "session", tt.events, transcript)
			if sup != tt.superseded || unsaved != tt.unsaved {
				t.Errorf("superseded, unsaved = %d, %d; want %d, %d", sup, unsaved, tt.superseded, tt.unsaved)
			}
			if got := len(rec.errs) > 0; got != tt.wantErr {
				t.Errorf("errors %q; want errors: %v", rec.errs, tt.wantErr)
			}
		})
	}
}
