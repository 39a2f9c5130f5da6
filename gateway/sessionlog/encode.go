package sessionlog

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/parleyhq/parley/schema"
)

// appendEvent appends the JSON of ev exactly as json.Marshal writes it
// (field order, omitempty, HTML-safe escaping, the time's RFC 3339 form)
// without reflection: encoding was a fifth of Publish's own CPU. A
// timestamp json.Marshal refuses goes to json.Marshal for its error.
func appendEvent(dst []byte, ev *schema.SessionEvent) ([]byte, error) {
	ts, err := ev.TS.MarshalJSON()
	if err != nil {
		return json.Marshal(ev)
	}
	dst = appendField(dst, `{"schema":`, ev.Schema)
	dst = appendField(dst, `,"event_id":`, ev.EventID)
	dst = appendField(dst, `,"type":`, string(ev.Type))
	dst = appendField(dst, `,"session_id":`, ev.SessionID)
	dst = appendField(dst, `,"player_id":`, ev.PlayerID)
	dst = appendField(dst, `,"npc_id":`, ev.NPCID)
	dst = appendField(dst, `,"deployment":`, ev.Deployment)
	dst = appendField(dst, `,"policy_version":`, ev.PolicyVersion)
	dst = appendNonEmpty(dst, `,"experiment_id":`, ev.ExperimentID)
	dst = appendNonEmpty(dst, `,"arm":`, ev.Arm)
	dst = appendNonEmpty(dst, `,"salt":`, ev.Salt)
	dst = appendNonZero(dst, `,"generation":`, ev.Generation)
	dst = append(append(dst, `,"ts":`...), ts...)
	if c := ev.Client; c != nil {
		dst = append(dst, `,"client":{`...)
		if c.GameBuild != "" {
			dst = appendField(dst, `"game_build":`, c.GameBuild)
		}
		if c.Locale != "" {
			if c.GameBuild != "" {
				dst = append(dst, ',')
			}
			dst = appendField(dst, `"locale":`, c.Locale)
		}
		dst = append(dst, '}')
	}
	dst = appendNonZero(dst, `,"turn":`, int64(ev.Turn))
	dst = appendNonEmpty(dst, `,"user_text":`, ev.UserText)
	dst = appendNonEmpty(dst, `,"npc_text":`, ev.NPCText)
	dst = appendNonZero(dst, `,"latency_ms":`, ev.LatencyMS)
	dst = appendNonZero(dst, `,"tokens_in":`, int64(ev.TokensIn))
	dst = appendNonZero(dst, `,"tokens_out":`, int64(ev.TokensOut))
	dst = appendNonEmpty(dst, `,"safety":`, string(ev.Safety))
	dst = appendNonZero(dst, `,"turns":`, int64(ev.Turns))
	dst = appendNonEmpty(dst, `,"reason":`, string(ev.Reason))
	return append(dst, '}'), nil
}

func appendField(dst []byte, name, v string) []byte {
	return appendJSONString(append(dst, name...), v)
}

func appendNonEmpty(dst []byte, name, v string) []byte {
	if v == "" {
		return dst
	}
	return appendField(dst, name, v)
}

func appendNonZero(dst []byte, name string, v int64) []byte {
	if v == 0 {
		return dst
	}
	return strconv.AppendInt(append(dst, name...), v, 10)
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as encoding/json does with HTML escaping on:
// <, > and & as \u003c, \u003e, \u0026, other control bytes as \b, \f, \n,
// \r, \t or \u00XX, invalid UTF-8 as \ufffd and U+2028, U+2029 escaped.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(append(dst, s[start:i]...), `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(append(dst, s[start:i]...), '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(dst, s[start:]...), '"')
}
