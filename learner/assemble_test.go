package learner

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// TestAssemblerKeepsTheRetriedTurn replays what a gateway does when a turn's
// save fails after its event was logged: the retry logs the same turn index
// again, later, with the exchange the transcript kept. Whatever order the
// two arrive in, the dialogue holds the later one.
func TestAssemblerKeepsTheRetriedTurn(t *testing.T) {
	d := testDialogues(1, 3)[0]
	es, err := simulator.DialogueEvents(d, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	var first schema.SessionEvent
	for _, e := range es {
		if e.Type == schema.TurnEvent && e.Turn == 1 {
			first = e
		}
	}
	lost := first
	lost.EventID = "00000000-0000-7000-8000-000000000001"
	lost.NPCText = "a reply the player never kept"
	lost.TS = first.TS.Add(-time.Second)

	for name, order := range map[string][]schema.SessionEvent{
		"lost first":        append([]schema.SessionEvent{lost}, es...),
		"lost arrives late": append(append([]schema.SessionEvent{}, es[:len(es)-1]...), lost, es[len(es)-1]),
	} {
		t.Run(name, func(t *testing.T) {
			a := newAssembler(func(string) bool { return false })
			var got *schema.Exchange
			for _, e := range order {
				if done, _ := a.apply(e, d.Started); done != nil {
					got = &done.Exchanges[0]
				}
			}
			if got == nil {
				t.Fatal("the session never completed")
			}
			if got.NPC != first.NPCText {
				t.Errorf("turn 1 NPC text = %q; want the retried %q", got.NPC, first.NPCText)
			}
		})
	}
}
