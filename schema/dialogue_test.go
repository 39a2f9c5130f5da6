package schema

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func validDialogue() Dialogue {
	return Dialogue{
		SessionID: "s1", PlayerID: "p1", NPCID: "aria", Deployment: "default", PolicyVersion: "v1",
		ExperimentID: "exp1", Arm: ArmCanary, Reason: EndPlayerEnded,
		Exchanges: []Exchange{{Turn: 1, User: "hi", NPC: "hello"}, {Turn: 2, User: "bye", NPC: "no", Safety: SafetyRefused}},
		Started:   ts, Ended: ts.Add(time.Minute),
	}
}

func TestDialogueValidate(t *testing.T) {
	mod := func(f func(*Dialogue)) Dialogue { d := validDialogue(); f(&d); return d }
	cases := map[string]struct {
		d    Dialogue
		want string // "" for valid
	}{
		"valid":          {validDialogue(), ""},
		"still open":     {mod(func(d *Dialogue) { d.Reason, d.Ended = "", time.Time{} }), ""},
		"no exchanges":   {mod(func(d *Dialogue) { d.Exchanges = nil }), ""},
		"no player":      {mod(func(d *Dialogue) { d.PlayerID = "" }), "required"},
		"turns 2, 1":     {mod(func(d *Dialogue) { d.Exchanges[0].Turn, d.Exchanges[1].Turn = 2, 1 }), "exchange 1 has turn 2"},
		"unknown safety": {mod(func(d *Dialogue) { d.Exchanges[1].Safety = "maybe" }), "safety"},
		"unknown reason": {mod(func(d *Dialogue) { d.Reason = "bored" }), "reason"},
		"ends too early": {mod(func(d *Dialogue) { d.Ended = d.Started.Add(-time.Second) }), "ends before"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.d.Validate()
			if tc.want == "" && err != nil {
				t.Fatalf("Validate() = %v; want nil", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestDialogueJSON pins the field names the learner's store has on disk.
func TestDialogueJSON(t *testing.T) {
	d := validDialogue()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"session_id":"s1","player_id":"p1","npc_id":"aria","deployment":"default","policy_version":"v1",` +
		`"experiment_id":"exp1","arm":"canary","exchanges":[{"turn":1,"user":"hi","npc":"hello"},` +
		`{"turn":2,"user":"bye","npc":"no","safety":"refused"}],"reason":"player_ended",` +
		`"started":"2026-11-30T12:00:00.123456789Z","ended":"2026-11-30T12:01:00.123456789Z"}`
	if string(b) != want {
		t.Errorf("json.Marshal(dialogue) =\n%s\nwant\n%s", b, want)
	}
	var back Dialogue
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, d) {
		t.Errorf("round trip = %+v; want %+v", back, d)
	}
}

// dialogueEvents returns the events of validDialogue: started, two turns a
// second apart, ended.
func dialogueEvents() []SessionEvent {
	d := validDialogue()
	base := SessionEvent{
		Schema: SessionEventSchema, SessionID: d.SessionID, PlayerID: d.PlayerID, NPCID: d.NPCID,
		Deployment: d.Deployment, PolicyVersion: d.PolicyVersion, ExperimentID: d.ExperimentID, Arm: d.Arm,
	}
	id := func(n int) string { return fmt.Sprintf("00000000-0000-7000-8000-%012d", n) }
	started, ended := base, base
	started.EventID, started.Type, started.TS = id(1), SessionStarted, d.Started
	ended.EventID, ended.Type, ended.TS, ended.Turns, ended.Reason = id(9), SessionEnded, d.Ended, 2, d.Reason
	out := []SessionEvent{started}
	for i, x := range d.Exchanges {
		e := base
		e.EventID, e.Type, e.TS = id(2+i), TurnEvent, d.Started.Add(time.Duration(i+1)*time.Second)
		e.Turn, e.UserText, e.NPCText, e.Safety = x.Turn, x.User, x.NPC, x.Safety
		if e.Safety == "" {
			e.Safety = SafetyNone
		}
		out = append(out, e)
	}
	return append(out, ended)
}

func TestDialogueFold(t *testing.T) {
	evs := dialogueEvents()
	want := validDialogue()
	// retried is turn 1 logged again by a gateway retry, a second later.
	retried := evs[1]
	retried.EventID, retried.NPCText, retried.TS = "00000000-0000-7000-8000-000000000100", "hello again", evs[1].TS.Add(time.Second)
	withRetried := want
	withRetried.Exchanges = append([]Exchange{{Turn: 1, User: "hi", NPC: "hello again"}}, want.Exchanges[1:]...)
	sameTS := retried
	sameTS.TS = evs[1].TS
	secondEnd := evs[3]
	secondEnd.EventID, secondEnd.Reason, secondEnd.TS = "00000000-0000-7000-8000-000000000101", EndError, evs[3].TS.Add(time.Hour)
	noStart := want
	noStart.Started = evs[1].TS
	early := evs[3]
	early.TS = evs[0].TS.Add(-time.Hour)
	endsAtStart := want
	endsAtStart.Ended = want.Started
	open := want
	open.Reason, open.Ended = "", time.Time{}
	gapped := want
	gapped.Exchanges = nil

	cases := map[string]struct {
		events    []SessionEvent
		want      Dialogue
		results   []FoldResult // of the events after the first four, if any
		complete  bool
		gap       int
		conflicts int
	}{
		"in order":                 {evs, want, nil, true, 0, 0},
		"reversed":                 {[]SessionEvent{evs[3], evs[2], evs[1], evs[0]}, want, nil, true, 0, 0},
		"duplicates count once":    {append(append([]SessionEvent{}, evs...), evs[1], evs[3]), want, []FoldResult{FoldDuplicate, FoldDuplicate}, true, 0, 0},
		"retry after the original": {append(append([]SessionEvent{}, evs...), retried), withRetried, []FoldResult{FoldConflict}, true, 0, 1},
		"retry before the original": {[]SessionEvent{evs[0], retried, evs[2], evs[3], evs[1]}, withRetried,
			[]FoldResult{FoldConflict}, true, 0, 1},
		"equal ts: first stays":    {append(append([]SessionEvent{}, evs...), sameTS), want, []FoldResult{FoldConflict}, true, 0, 1},
		"second end is ignored":    {append(append([]SessionEvent{}, evs...), secondEnd), want, []FoldResult{FoldConflict}, true, 0, 1},
		"no session_started":       {evs[1:], noStart, nil, false, 0, 0},
		"end before start clamped": {[]SessionEvent{evs[0], evs[1], evs[2], early}, endsAtStart, nil, true, 0, 0},
		"still open":               {evs[:3], open, nil, false, 0, 0},
		"turn 1 missing":           {[]SessionEvent{evs[0], evs[2], evs[3]}, gapped, nil, false, 1, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var f DialogueFold
			conflicts := 0
			for i, e := range tc.events {
				r := f.Add(e)
				if r == FoldConflict {
					conflicts++
				}
				if i >= 4 && tc.results != nil && r != tc.results[i-4] {
					t.Errorf("Add(event %d) = %v; want %v", i, r, tc.results[i-4])
				}
			}
			if got := f.Dialogue(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Dialogue() =\n%+v\nwant\n%+v", got, tc.want)
			}
			if got := f.Complete(); got != tc.complete {
				t.Errorf("Complete() = %v; want %v", got, tc.complete)
			}
			if got := f.Gap(); got != tc.gap {
				t.Errorf("Gap() = %d; want %d", got, tc.gap)
			}
			if conflicts != tc.conflicts {
				t.Errorf("%d conflicts; want %d", conflicts, tc.conflicts)
			}
		})
	}
}

func TestDialoguesFromEvents(t *testing.T) {
	evs := dialogueEvents()
	other := evs[0]
	other.SessionID, other.EventID = "s0", "00000000-0000-7000-8000-000000000200"
	got, err := DialoguesFromEvents([]SessionEvent{evs[0], other, evs[1], evs[2], evs[3]})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].SessionID != "s1" || got[1].SessionID != "s0" {
		t.Fatalf("DialoguesFromEvents = %+v; want s1 then s0", got)
	}
	if !reflect.DeepEqual(got[0], validDialogue()) {
		t.Errorf("DialoguesFromEvents()[0] = %+v; want %+v", got[0], validDialogue())
	}

	bad := evs[1]
	bad.EventID = "123"
	if _, err := DialoguesFromEvents([]SessionEvent{evs[0], bad}); err == nil || !strings.Contains(err.Error(), "event_id") {
		t.Errorf("DialoguesFromEvents with an invalid event = %v; want an event_id error", err)
	}
	if _, err := DialoguesFromEvents([]SessionEvent{evs[0], evs[2], evs[3]}); err == nil || !strings.Contains(err.Error(), "turn 1 missing") {
		t.Errorf("DialoguesFromEvents with turn 1 missing = %v; want a turn 1 missing error", err)
	}
}
