package abtest

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/parleyhq/parley/schema"
)

// FuzzCollect feeds Kafka record values, one per line, through what Follow
// and the admin report do with them (decode, validate, collect, analyze,
// decide, timeline): no input panics, and the report and timeline always
// render as JSON (a NaN or an infinity would make the admin API fail).
func FuzzCollect(f *testing.F) {
	ts := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var seed [][]byte
	for i, arm := range []string{schema.ArmStable, schema.ArmCanary} {
		base := schema.SessionEvent{Schema: schema.SessionEventSchema, SessionID: "s" + arm, PlayerID: "p" + arm, NPCID: "mira",
			Deployment: "npc", PolicyVersion: "v" + arm, ExperimentID: "x1", Arm: arm, TS: ts}
		evs := []schema.SessionEvent{base, base, base}
		evs[0].EventID, evs[0].Type = "0194a3b0-0000-7000-8000-00000000000"+string(rune('1'+3*i)), schema.SessionStarted
		evs[1].EventID, evs[1].Type, evs[1].Turn, evs[1].Safety, evs[1].LatencyMS = "0194a3b0-0000-7000-8000-00000000000"+string(rune('2'+3*i)), schema.TurnEvent, 1, schema.SafetyNone, 120
		evs[2].EventID, evs[2].Type, evs[2].Turns, evs[2].Reason = "0194a3b0-0000-7000-8000-00000000000"+string(rune('3'+3*i)), schema.SessionEnded, 1, schema.EndPlayerEnded
		evs[2].TS = ts.Add(time.Minute)
		for _, e := range evs {
			b, _ := json.Marshal(e)
			seed = append(seed, b)
		}
	}
	f.Add(bytes.Join(seed, []byte("\n")))
	f.Add(bytes.Join(seed[:4], []byte("\n")))
	f.Add(bytes.Replace(seed[2], []byte(`"turns":1`), []byte(`"turns":9223372036854775807`), 1))
	f.Add([]byte("{}\nnull\n\xff"))
	now := ts.Add(time.Hour)
	f.Fuzz(func(t *testing.T, data []byte) {
		c := NewCollector()
		experiments := map[string]bool{"": true}
		for i, rec := range bytes.Split(data, []byte("\n")) {
			if i == 256 {
				break
			}
			var e schema.SessionEvent
			if json.Unmarshal(rec, &e) != nil || e.Validate() != nil {
				continue
			}
			c.Add(e)
			experiments[e.ExperimentID] = true
		}
		for id := range experiments {
			ss := c.Sessions(id)
			rep, err := Analyze(id, ss, DefaultConfig(), now)
			if err != nil {
				continue
			}
			if _, err := json.Marshal(rep); err != nil {
				t.Fatalf("report of experiment %q does not render as JSON: %v", id, err)
			}
			if _, err := json.Marshal(Decide(rep, DefaultGuardrailConfig())); err != nil {
				t.Fatalf("decision on experiment %q does not render as JSON: %v", id, err)
			}
			if _, err := json.Marshal(Timeline(ss, time.Minute, now, 120)); err != nil {
				t.Fatalf("timeline of experiment %q does not render as JSON: %v", id, err)
			}
		}
	})
}
