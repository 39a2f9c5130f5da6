package experiment

import (
	"testing"

	"github.com/parleyhq/parley/schema"
)

// TestHalvesSplitByPlayer: each player's sessions all go to one half, and
// the players alternate between the halves.
func TestHalvesSplitByPlayer(t *testing.T) {
	var sessions []schema.Dialogue
	for i := range 12 {
		sessions = append(sessions, schema.Dialogue{SessionID: string(rune('a' + i)), PlayerID: []string{"p1", "p2", "p3", "p4"}[i%4]})
	}
	a, b := halves(sessions)
	in := func(ds []schema.Dialogue) map[string]int {
		m := map[string]int{}
		for _, d := range ds {
			m[d.PlayerID]++
		}
		return m
	}
	if pa, pb := in(a), in(b); len(a) != 6 || len(b) != 6 || pa["p1"] != 3 || pa["p3"] != 3 || pb["p2"] != 3 || pb["p4"] != 3 {
		t.Errorf("halves %v and %v; want p1 and p3's sessions in one, p2 and p4's in the other", pa, pb)
	}
}
