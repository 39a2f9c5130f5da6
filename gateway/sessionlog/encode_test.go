package sessionlog

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/parleyhq/parley/schema"
)

// checkEncoding requires appendEvent to write json.Marshal's bytes, or
// fail where it fails.
func checkEncoding(t *testing.T, ev schema.SessionEvent) {
	t.Helper()
	want, wantErr := json.Marshal(ev)
	got, err := appendEvent([]byte("prefix"), &ev)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("appendEvent error %v; json.Marshal's %v", err, wantErr)
	}
	if err == nil && !bytes.Equal(got, append([]byte("prefix"), want...)) {
		t.Fatalf("appendEvent wrote\n%s\njson.Marshal\n%s", got, want)
	}
}

// TestAppendEventMatchesJSONMarshal compares the two encodings on the test
// events and on many random ones: empty and set optional fields, text with
// every escape json.Marshal makes, invalid UTF-8, zones and years.
func TestAppendEventMatchesJSONMarshal(t *testing.T) {
	for _, ev := range makeEvents(t, "enc", 3, 3) {
		checkEncoding(t, ev)
	}
	checkEncoding(t, schema.SessionEvent{})
	checkEncoding(t, schema.SessionEvent{TS: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
	checkEncoding(t, schema.SessionEvent{TS: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)})
	r := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"", "a", "hello world", "<b>&amp;</b>", `"quoted" \back\`, "\x00\x01\x1f\x7f", "\b\f\n\r\t",
		"é ü 日本語 🙂", "\u2028\u2029", "\xff\xfe bad", "\xe2\x80", "ok\xc3", "\u00a0", "'single'", "/slash/"}
	text := func() string {
		if r.IntN(3) == 0 {
			return ""
		}
		s := ""
		for range r.IntN(4) + 1 {
			s += pieces[r.IntN(len(pieces))]
		}
		return s
	}
	num := func() int64 {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return -r.Int64N(1 << 40)
		default:
			return r.Int64N(1 << 62)
		}
	}
	zones := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+1800), time.FixedZone("y", -11*3600)}
	for range 5000 {
		ev := schema.SessionEvent{
			Schema: text(), EventID: text(), Type: schema.EventType(text()), SessionID: text(), PlayerID: text(),
			NPCID: text(), Deployment: text(), PolicyVersion: text(), ExperimentID: text(), Arm: text(), Salt: text(),
			Generation: num(), TS: time.Unix(r.Int64N(1<<34), r.Int64N(1e9)).In(zones[r.IntN(len(zones))]),
			Turn: int(num()), UserText: text(), NPCText: text(), LatencyMS: num(), TokensIn: int(num()), TokensOut: int(num()),
			Safety: schema.Safety(text()), Turns: int(num()), Reason: schema.EndReason(text()),
		}
		if r.IntN(2) == 0 {
			ev.Client = &schema.ClientMeta{GameBuild: text(), Locale: text()}
		}
		checkEncoding(t, ev)
	}
}

// FuzzAppendEvent requires json.Marshal's bytes for any text in the
// string fields and any timestamp.
func FuzzAppendEvent(f *testing.F) {
	f.Add("hello", "<&>\u2028", "\xff", int64(0), int64(1700000000), 3)
	f.Fuzz(func(t *testing.T, a, b, c string, n, sec int64, turn int) {
		checkEncoding(t, schema.SessionEvent{
			Schema: a, EventID: b, SessionID: c, PlayerID: a + b, NPCID: c, Deployment: b, PolicyVersion: a,
			Arm: c, Generation: n, TS: time.Unix(sec, n%1e9), Client: &schema.ClientMeta{Locale: b},
			Turn: turn, UserText: a, NPCText: b + c, Safety: schema.Safety(c), Reason: schema.EndReason(a),
		})
	})
}
