package simulator

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/parleyhq/parley/schema"
)

// LineError is a malformed input line: its 1-based number and what is wrong.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

func (e *LineError) Unwrap() error { return e.Err }

// MaxLineBytes is the longest input line the importers accept.
const MaxLineBytes = 4 << 20

// ImportOptions say how imported dialogues are labelled.
type ImportOptions struct {
	// PlayerPrefix starts the pseudo player ids: "dd-" gives "dd-00000".
	PlayerPrefix string `json:"player_prefix"`
	// DialoguesPerPlayer groups consecutive dialogues into one pseudo player
	// (see ImportDailyDialog).
	DialoguesPerPlayer int    `json:"dialogues_per_player"`
	NPCID              string `json:"npc_id"`
	Deployment         string `json:"deployment"`
	PolicyVersion      string `json:"policy_version"`
	// Seed draws the session and event ids.
	Seed uint64 `json:"seed"`
	// Epoch, SessionGap and TurnGap give the imported sessions their times.
	Epoch      time.Time     `json:"epoch"`
	SessionGap time.Duration `json:"session_gap"`
	TurnGap    time.Duration `json:"turn_gap"`
	// Detokenize joins DailyDialog's spaced punctuation ("here ?" → "here?").
	Detokenize bool `json:"detokenize"`
}

// DefaultImportOptions returns the options of `parley corpus import`.
func DefaultImportOptions() ImportOptions {
	return ImportOptions{
		PlayerPrefix: "dd-", DialoguesPerPlayer: 3, NPCID: "dailydialog", Deployment: "import",
		PolicyVersion: "dailydialog", Seed: 1, Epoch: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
		SessionGap: time.Minute, TurnGap: 8 * time.Second, Detokenize: true,
	}
}

// Validate checks the ids and gaps.
func (o ImportOptions) Validate() error {
	if o.PlayerPrefix == "" || o.NPCID == "" || o.Deployment == "" || o.PolicyVersion == "" {
		return errors.New("import: player prefix, npc id, deployment and policy version are required")
	}
	if o.DialoguesPerPlayer < 1 {
		return fmt.Errorf("import: dialogues per player %d must be at least 1", o.DialoguesPerPlayer)
	}
	if o.SessionGap <= 0 || o.TurnGap <= 0 {
		return errors.New("import: session and turn gaps must be positive")
	}
	return nil
}

// ImportStats counts an import.
type ImportStats struct {
	Lines     int `json:"lines"`
	Dialogues int `json:"dialogues"`
	Players   int `json:"players"`
	Exchanges int `json:"exchanges"`
	Events    int `json:"events"`
	// TrailingUser counts dialogues that end on a user utterance without a
	// reply; their last exchange has an empty NPC text.
	TrailingUser int `json:"trailing_user"`
}

// ImportDailyDialog converts the DailyDialog format to session events.
//
// Each input line is one dialogue: utterances each followed by "__eou__".
// Odd utterances (1st, 3rd, ...) are the player's, even ones the NPC's, so
// utterances 2k-1 and 2k form exchange k. A dialogue with an odd number of
// utterances ends with an exchange whose NPC text is empty. DailyDialog does
// not say who spoke, so players are assigned by position: dialogues 0..k-1
// of the file (k = DialoguesPerPlayer) belong to pseudo player
// PlayerPrefix+"00000", the next k to "00001", and so on. That gives every
// player the two style demonstrations and one target dialogue that user-agent
// training needs, though the demos come from unrelated people. Every session
// ends with reason player_ended. An empty line, a line without "__eou__", an
// empty utterance or text that is not UTF-8 is an error naming its line.
func ImportDailyDialog(r io.Reader, w io.Writer, opts ImportOptions) (ImportStats, error) {
	if err := opts.Validate(); err != nil {
		return ImportStats{}, err
	}
	out := newEventWriter(w, opts)
	var stats ImportStats
	err := eachLine(r, func(n int, line []byte) error {
		stats.Lines++
		d, trailing, err := parseDailyDialog(line, opts.Detokenize)
		if err != nil {
			return &LineError{Line: n, Err: err}
		}
		if trailing {
			stats.TrailingUser++
		}
		d.PlayerID = fmt.Sprintf("%s%05d", opts.PlayerPrefix, stats.Dialogues/opts.DialoguesPerPlayer)
		if err := out.write(&d); err != nil {
			return &LineError{Line: n, Err: err}
		}
		stats.Dialogues++
		stats.Exchanges += len(d.Exchanges)
		return nil
	})
	stats.Players = (stats.Dialogues + opts.DialoguesPerPlayer - 1) / opts.DialoguesPerPlayer
	stats.Events = out.events
	if err != nil {
		return stats, err
	}
	return stats, out.flush()
}

func parseDailyDialog(line []byte, detok bool) (schema.Dialogue, bool, error) {
	if !utf8.Valid(line) {
		return schema.Dialogue{}, false, errors.New("not valid UTF-8")
	}
	s := strings.TrimSpace(string(line))
	if s == "" {
		return schema.Dialogue{}, false, errors.New("empty line, want utterances separated by __eou__")
	}
	if !strings.HasSuffix(s, "__eou__") {
		return schema.Dialogue{}, false, errors.New("line does not end with __eou__")
	}
	parts := strings.Split(strings.TrimSuffix(s, "__eou__"), "__eou__")
	var d schema.Dialogue
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return schema.Dialogue{}, false, fmt.Errorf("utterance %d is empty", i+1)
		}
		if detok {
			p = detokenize(p)
		}
		if i%2 == 0 {
			d.Exchanges = append(d.Exchanges, schema.Exchange{Turn: i/2 + 1, User: p})
		} else {
			d.Exchanges[i/2].NPC = p
		}
	}
	d.Reason = schema.EndPlayerEnded
	return d, len(parts)%2 == 1, nil
}

// detokenize removes the space DailyDialog puts before punctuation and
// inside contractions.
func detokenize(s string) string {
	r := strings.NewReplacer(" ,", ",", " .", ".", " ?", "?", " !", "!", " ;", ";", " :", ":",
		" ’ ", "’", " ' ", "'")
	return r.Replace(s)
}

// ImportJSONL converts JSON-lines dialogues to session events. Each line is
// either a session event (as written by GenerateCorpus or the gateway) or a
// simple dialogue:
//
//	{"player_id":"p1","npc_id":"aria","session_id":"s1","reason":"player_ended",
//	 "turns":[{"user":"hi","npc":"hello"}]}
//
// where npc_id, session_id and reason are optional (opts.NPCID, a generated
// id and player_ended). Event lines are folded into dialogues by
// schema.DialoguesFromEvents (an event repeated with the same event_id counts
// once; of two events for the same turn the later wins) and written again
// with new event ids, sessions in order of first appearance, each session's
// events contiguous.
func ImportJSONL(r io.Reader, w io.Writer, opts ImportOptions) (ImportStats, error) {
	if err := opts.Validate(); err != nil {
		return ImportStats{}, err
	}
	ds, stats, err := readJSONL(r, opts)
	if err != nil {
		return stats, err
	}
	out := newEventWriter(w, opts)
	players := make(map[string]bool)
	for i := range ds {
		if err := out.write(&ds[i]); err != nil {
			return stats, err
		}
		players[ds[i].PlayerID] = true
		stats.Exchanges += len(ds[i].Exchanges)
	}
	stats.Dialogues, stats.Players, stats.Events = len(ds), len(players), out.events
	return stats, out.flush()
}

// ReadCorpus reads JSON-lines dialogues in either form ImportJSONL accepts
// and returns them in order of first appearance. Simple dialogues are
// labelled with DefaultImportOptions.
func ReadCorpus(r io.Reader) ([]schema.Dialogue, error) {
	ds, _, err := readJSONL(r, DefaultImportOptions())
	return ds, err
}

// simpleDialogue is the simple JSONL dialogue form.
type simpleDialogue struct {
	SessionID string           `json:"session_id"`
	PlayerID  string           `json:"player_id"`
	NPCID     string           `json:"npc_id"`
	Reason    schema.EndReason `json:"reason"`
	Turns     []struct {
		User string `json:"user"`
		NPC  string `json:"npc"`
	} `json:"turns"`
}

func readJSONL(r io.Reader, opts ImportOptions) ([]schema.Dialogue, ImportStats, error) {
	var stats ImportStats
	var events []schema.SessionEvent
	var simple []struct {
		at int // number of event sessions before the simple dialogue
		d  schema.Dialogue
	}
	sessions := make(map[string]bool)      // every session id seen
	eventSessions := make(map[string]bool) // those given as events
	err := eachLine(r, func(n int, line []byte) error {
		stats.Lines++
		if len(bytes.TrimSpace(line)) == 0 {
			return &LineError{Line: n, Err: errors.New("empty line")}
		}
		var probe struct {
			Schema *string          `json:"schema"`
			Turns  *json.RawMessage `json:"turns"`
		}
		if err := json.Unmarshal(line, &probe); err != nil {
			return &LineError{Line: n, Err: err}
		}
		switch {
		case probe.Schema != nil:
			var e schema.SessionEvent
			if err := strictUnmarshal(line, &e); err != nil {
				return &LineError{Line: n, Err: err}
			}
			if sessions[e.SessionID] && !eventSessions[e.SessionID] {
				return &LineError{Line: n, Err: fmt.Errorf("session %q also given as a simple dialogue", e.SessionID)}
			}
			if err := e.Validate(); err != nil {
				return &LineError{Line: n, Err: err}
			}
			events = append(events, e)
			sessions[e.SessionID], eventSessions[e.SessionID] = true, true
		case probe.Turns != nil:
			d, err := parseSimple(line, n, opts)
			if err != nil {
				return &LineError{Line: n, Err: err}
			}
			if sessions[d.SessionID] {
				return &LineError{Line: n, Err: fmt.Errorf("session %q given twice", d.SessionID)}
			}
			sessions[d.SessionID] = true
			simple = append(simple, struct {
				at int
				d  schema.Dialogue
			}{len(eventSessions), d})
		default:
			return &LineError{Line: n, Err: errors.New(`neither a session event (no "schema") nor a dialogue (no "turns")`)}
		}
		return nil
	})
	if err != nil {
		return nil, stats, err
	}
	evs, err := schema.DialoguesFromEvents(events)
	if err != nil {
		return nil, stats, err
	}
	// Merge simple dialogues back into their place among the event sessions.
	out := make([]schema.Dialogue, 0, len(evs)+len(simple))
	si := 0
	for i := 0; i <= len(evs); i++ {
		for si < len(simple) && simple[si].at == i {
			out = append(out, simple[si].d)
			si++
		}
		if i < len(evs) {
			out = append(out, evs[i])
		}
	}
	return out, stats, nil
}

func parseSimple(line []byte, n int, opts ImportOptions) (schema.Dialogue, error) {
	var s simpleDialogue
	if err := strictUnmarshal(line, &s); err != nil {
		return schema.Dialogue{}, err
	}
	if s.PlayerID == "" {
		return schema.Dialogue{}, errors.New("player_id is required")
	}
	if len(s.Turns) == 0 {
		return schema.Dialogue{}, errors.New("turns is empty")
	}
	d := schema.Dialogue{
		SessionID: s.SessionID, PlayerID: s.PlayerID, NPCID: s.NPCID, Reason: s.Reason,
		Deployment: opts.Deployment, PolicyVersion: opts.PolicyVersion,
	}
	if d.SessionID == "" {
		d.SessionID = fmt.Sprintf("import-%08d", n)
	}
	if d.NPCID == "" {
		d.NPCID = opts.NPCID
	}
	switch d.Reason {
	case "":
		d.Reason = schema.EndPlayerEnded
	case schema.EndPlayerEnded, schema.EndIdleTimeout, schema.EndMaxTurns, schema.EndSafety, schema.EndError:
	default:
		return schema.Dialogue{}, fmt.Errorf("reason %q is not a known end reason", d.Reason)
	}
	for i, t := range s.Turns {
		if t.User == "" && t.NPC == "" {
			return schema.Dialogue{}, fmt.Errorf("turn %d is empty", i+1)
		}
		if !utf8.ValidString(t.User) || !utf8.ValidString(t.NPC) {
			return schema.Dialogue{}, fmt.Errorf("turn %d is not valid UTF-8", i+1)
		}
		d.Exchanges = append(d.Exchanges, schema.Exchange{Turn: i + 1, User: t.User, NPC: t.NPC})
	}
	return d, nil
}

// strictUnmarshal decodes one JSON value and refuses trailing data.
func strictUnmarshal(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// eachLine calls fn with every line of r (without its line ending) and its
// 1-based number. A final line without a newline counts; the empty string
// after a final newline does not.
func eachLine(r io.Reader, fn func(n int, line []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	n := 0
	for sc.Scan() {
		n++
		if err := fn(n, bytes.TrimSuffix(sc.Bytes(), []byte("\r"))); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return &LineError{Line: n + 1, Err: err}
	}
	return nil
}

// eventWriter writes dialogues as session-event lines with ids and times
// drawn from the import options.
type eventWriter struct {
	bw     *bufio.Writer
	enc    *json.Encoder
	rng    *rand.Rand
	opts   ImportOptions
	next   time.Time
	events int
}

func newEventWriter(w io.Writer, opts ImportOptions) *eventWriter {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	return &eventWriter{bw: bw, enc: enc, rng: rand.New(rand.NewPCG(opts.Seed, 0x1a9047)), opts: opts, next: opts.Epoch}
}

// write fills in what the dialogue lacks (session id, npc, deployment,
// policy version, times) and writes its events.
func (ew *eventWriter) write(d *schema.Dialogue) error {
	if d.Started.IsZero() {
		d.Started = ew.next
		d.Ended = d.Started.Add(time.Duration(len(d.Exchanges)+1) * ew.opts.TurnGap)
		ew.next = ew.next.Add(ew.opts.SessionGap)
	}
	if d.SessionID == "" {
		d.SessionID = NewEventID(ew.rng, d.Started)
	}
	if d.NPCID == "" {
		d.NPCID = ew.opts.NPCID
	}
	if d.Deployment == "" {
		d.Deployment = ew.opts.Deployment
	}
	if d.PolicyVersion == "" {
		d.PolicyVersion = ew.opts.PolicyVersion
	}
	events, err := DialogueEvents(*d, ew.rng)
	if err != nil {
		return err
	}
	for _, e := range events {
		if err := ew.enc.Encode(e); err != nil {
			return fmt.Errorf("write session events: %w", err)
		}
	}
	ew.events += len(events)
	return nil
}

func (ew *eventWriter) flush() error {
	if err := ew.bw.Flush(); err != nil {
		return fmt.Errorf("write session events: %w", err)
	}
	return nil
}
