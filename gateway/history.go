package gateway

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/parleyhq/parley/schema"
)

// decodeHistory decodes a session's stored history as json.Unmarshal does.
// Every message decodes it, so the form appendTurn writes (json.Marshal of
// the exchanges: fixed field order, no spaces, strings without escapes) is
// read by a scanner without reflection; anything else (escaped characters,
// other spacing or order, invalid UTF-8) goes to json.Unmarshal.
func decodeHistory(data string) ([]schema.Exchange, error) {
	if h, ok := scanHistory(data); ok {
		return h, nil
	}
	var h []schema.Exchange
	if err := json.Unmarshal([]byte(data), &h); err != nil {
		return nil, err
	}
	return h, nil
}

// scanHistory reads data if it is in exactly the form json.Marshal writes
// for []schema.Exchange with no escaped characters; ok is false otherwise.
func scanHistory(data string) (h []schema.Exchange, ok bool) {
	s := jsonScanner{rest: data}
	if !s.skip("[") {
		return nil, false
	}
	h = make([]schema.Exchange, 0, strings.Count(data, `{"turn":`))
	if s.skip("]") {
		return h, s.rest == ""
	}
	for {
		var x schema.Exchange
		var safety string
		if !s.skip(`{"turn":`) || !s.int(&x.Turn) || !s.skip(`,"user":`) || !s.str(&x.User) || !s.skip(`,"npc":`) || !s.str(&x.NPC) {
			return nil, false
		}
		if s.skip(`,"safety":`) && !s.str(&safety) {
			return nil, false
		}
		x.Safety = schema.Safety(safety)
		if !s.skip("}") {
			return nil, false
		}
		h = append(h, x)
		if s.skip("]") {
			return h, s.rest == ""
		}
		if !s.skip(",") {
			return nil, false
		}
	}
}

// jsonScanner consumes the front of rest: JSON in the form json.Marshal
// writes it, with strings that hold no escapes.
type jsonScanner struct{ rest string }

// skip consumes lit if rest starts with it.
func (s *jsonScanner) skip(lit string) bool {
	if !strings.HasPrefix(s.rest, lit) {
		return false
	}
	s.rest = s.rest[len(lit):]
	return true
}

// int consumes a JSON integer (no leading zeros) that fits an int.
func (s *jsonScanner) int(v *int) bool {
	n := 0
	if strings.HasPrefix(s.rest, "-") {
		n = 1
	}
	start := n
	for n < len(s.rest) && s.rest[n] >= '0' && s.rest[n] <= '9' {
		n++
	}
	if n == start || (s.rest[start] == '0' && n > start+1) {
		return false
	}
	i, err := strconv.Atoi(s.rest[:n])
	if err != nil {
		return false
	}
	*v, s.rest = i, s.rest[n:]
	return true
}

// str consumes a JSON string without escapes or control characters whose
// contents are valid UTF-8, which is then the string itself.
func (s *jsonScanner) str(v *string) bool {
	if !strings.HasPrefix(s.rest, `"`) {
		return false
	}
	for i := 1; i < len(s.rest); i++ {
		switch c := s.rest[i]; {
		case c == '"':
			if !utf8.ValidString(s.rest[1:i]) {
				return false
			}
			*v, s.rest = s.rest[1:i], s.rest[i+1:]
			return true
		case c == '\\' || c < 0x20:
			return false
		}
	}
	return false
}
