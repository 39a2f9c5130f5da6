package gateway

import (
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/parleyhq/parley/schema"
)

// Guard is the safety guard that runs before and after the model on every
// player message. Its rules, in order:
//
//  1. Crisis (before the model). A message that speaks of harming or killing
//     oneself ("kill myself", "end my life", "ending it all", "suicidal",
//     "want to die", "cut myself", "no reason to live", "don't see the
//     point of anything", "nobody would care if I was gone", "better off
//     dead", "overdose" ...)
//     is not sent to the model. The player gets CrisisReply, a supportive
//     out-of-character message with crisis-line guidance, and the turn is
//     logged with safety "crisis". The session goes on.
//  2. Refusal (before the model). A jailbreak attempt ("ignore your previous
//     instructions", "system prompt", "hidden instructions", "developer
//     mode", "DAN", "you have no rules", "pretend you are not an NPC",
//     "admin password", "bypass your filters" ...) or a request for clearly illegal
//     help (making bombs, explosives or drugs, buying or selling drugs,
//     hacking into accounts, stealing cards or identities, laundering money,
//     sexual content involving minors) is not sent to the model. The player
//     gets RefusalReply, a short in-character refusal, logged with safety
//     "refused".
//  3. Output check (after the model). A reply that urges self-harm
//     ("kill yourself", "end your life"), matches the illegal-help rules of
//     2, or leaks the persona card (eight or more consecutive words of it) is
//     replaced by RefusalReply with safety "refused". In a streamed reply the
//     tokens were already sent; the final "done" event carries the
//     replacement, and clients show that.
//
// Everything else goes to the model unchanged, including the paper's other
// two adversarial kinds: contradictory players (who say the opposite of what
// they said before) and aggressive ones (insults, in-game threats) get a
// normal in-character reply. Matching is on a normalised text: lower case,
// common digit-for-letter substitutions undone (0→o, 1→i, 3→e, 4→a, 5→s,
// 7→t, @→a, $→s), everything but letters and apostrophes turned into single
// spaces, chat abbreviations expanded (u→you, wanna→want to, kms→kill
// myself ...). The rules are deliberately conservative keyword patterns: they
// miss paraphrases and may refuse some in-game talk of bombs; they are a
// floor, not a classifier.
//
// The zero Guard is ready to use; one from NewGuard also keeps the
// eight-word runs of the normalised persona cards, which every reply is
// checked against.
type Guard struct {
	cards map[string]cardRuns // persona card → its runs; read-only
}

// NewGuard returns a Guard that normalises the cards of personas and cuts
// them into runs once, not on every reply.
func NewGuard(personas map[string]Persona) Guard {
	g := Guard{cards: make(map[string]cardRuns, len(personas))}
	for _, p := range personas {
		g.cards[p.Card] = newCardRuns(normalize(p.Card))
	}
	return g
}

// Verdict is what the guard decided about one text.
type Verdict struct {
	Safety schema.Safety
	// Rule names the rule that fired ("crisis", "jailbreak", "illegal",
	// "self-harm-output", "prompt-leak"); empty when none did.
	Rule string
	// Reply replaces the NPC's reply when a rule fired.
	Reply string
}

// CrisisReply is the reply to a high-risk (self-harm) message.
const CrisisReply = "I'm stepping out of our story for a moment, because what you just said matters more than any quest. " +
	"If you are thinking about hurting yourself or ending your life, please reach out to someone now: " +
	"in the US call or text 988 (Suicide & Crisis Lifeline), in the UK and Ireland call Samaritans on 116 123, " +
	"and anywhere else you can find a local helpline at findahelpline.com. " +
	"If you are in immediate danger, call your local emergency number. " +
	"You don't have to face this alone, and I'm here if you want to keep talking."

// RefusalReply is the reply to a jailbreak or an illegal request.
const RefusalReply = "I can't help with that, friend. Let's get back to our adventure. What would you like to do next?"

var (
	leetReplacer = strings.NewReplacer("0", "o", "1", "i", "3", "e", "4", "a", "5", "s", "7", "t", "@", "a", "$", "s", "’", "'")

	crisisRE = mustKeywordRE(`\b(` +
		`(kill|killing|hurt|hurting|harm|harming|cut|cutting|hang|hanging|drown|drowning) (my ?self|me)|` +
		`end(ing)? (my|it) (own )?(life|all)|take (my|away my) (own )?life|` +
		`suicid(e|al)( thoughts?| note| plan)?|self ?harm(ing)?|` +
		`(want|wanna|going|plan|planning|ready) (to )?die|wish i (was|were) dead|better off dead|` +
		`(no|nothing) (reason|point) (to|in) (live|living|go on|going on)|don'?t want to (live|be alive|exist)|` +
		`(don'?t|do not|can'?t|cannot) see (the|any) point (of|in) (anything|living|life|going on|it all)|` +
		`(nobody|no one) (would|will) (care|notice|miss me) if i (was|were|am|'m) (gone|dead)|` +
		`(nobody|no one) (would|will) (care|notice|miss me) if i (died|disappeared)|` +
		`overdos(e|ing)|jump(ing)? off (a|the) (bridge|building|roof)` +
		`)\b`)
	// crisisExceptRE clears game talk that crisisRE would catch.
	crisisExceptRE = mustKeywordRE(`\bsuicide (mission|squad|run|pact card)\b`)

	jailbreakRE = mustKeywordRE(`\b(` +
		`(ignore|disregard|forget|override) (all |any |the |your |my )*(previous |prior |above |earlier |original )?(instructions|rules|prompts?|programming|guidelines)|` +
		`(system|hidden|secret|initial|original) (prompt|instructions)|reveal (your|the) (prompt|instructions|rules)|` +
		`developer mode|dan mode|do anything now|jailbr(eak|oken)|(admin|administrator|root) password|` +
		`(you|and|to) (have|got) no (rules|restrictions|filters|limits)|without (any )?(rules|restrictions|filters|limits)|` +
		`pretend (you are|you're|to be) not an? (npc|character|ai|bot)|` +
		`(bypass|disable|turn off) (your |the )?(safety|filters?|rules|guardrails)|` +
		`act as an? (unfiltered|uncensored|unrestricted)|pretend (you are|to be|you're) (not an? )?(ai|chatbot|language model|an? unfiltered)` +
		`)\b`)

	illegalRE = mustKeywordRE(`\b(` +
		`(make|making|build|building|cook|cooking|synthesi[sz]e|produce|mix) (a |an |some )?(pipe )?(bomb|explosives?|meth|methamphetamine|cocaine|heroin|fentanyl|nerve gas|ricin|napalm|ghost gun)|` +
		`(buy|buying|sell|selling|get|score) (some )?(drugs|cocaine|heroin|meth|fentanyl|weed illegally)|` +
		`hack(ing)? into|steal(ing)? (someone'?s? |a |their )?(credit cards?|card numbers|identity|passwords?|bank)|credit card numbers|` +
		`launder(ing)? money|money laundering|child (porn|sexual)|sex(ual)? with (a )?(minor|child|kid)` +
		`)\b`)

	selfHarmOutputRE = mustKeywordRE(`\b(kill (your ?self|urself)|kys|end your (own )?life|you should die|cut your ?self)\b`)
)

// chatSpeak expands the chat abbreviations players write (the simulator's
// slang among them), so that the rules need only the full words.
var chatSpeak = map[string]string{
	"u": "you", "ur": "your", "r": "are", "ya": "you", "wanna": "want to", "gonna": "going to",
	"dont": "don't", "cant": "can't", "im": "i'm", "ive": "i've", "kms": "kill myself", "kys": "kill yourself",
}

// normalize lowers s, undoes digit-for-letter substitutions, expands chat
// abbreviations and returns its words (runs of letters and apostrophes)
// joined and surrounded by single spaces. It runs on every message and
// reply, and on the persona card, so it scans without regexps.
func normalize(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return joinWords(leetReplacer.Replace(strings.ToLower(s)), func(r rune) bool { return unicode.IsLetter(r) || r == '\'' })
		}
	}
	// ASCII, nearly every text: asciiFold does in one pass what ToLower and
	// leetReplacer do, and a byte that is no word's becomes a space.
	var folded strings.Builder
	folded.Grow(len(s))
	for i := range len(s) {
		c := asciiFold[s[i]]
		if c == 0 {
			c = ' '
		}
		folded.WriteByte(c)
	}
	return joinWords(folded.String(), func(r rune) bool { return r != ' ' })
}

// asciiFold maps an ASCII byte to what it is in a word after lowering and
// undoing digit-for-letter substitutions, or to 0 when it is no word's.
var asciiFold = func() (t [utf8.RuneSelf]byte) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = byte(c), byte(c)
	}
	t['\''] = '\''
	for from, to := range map[byte]byte{'0': 'o', '1': 'i', '3': 'e', '4': 'a', '5': 's', '7': 't', '@': 'a', '$': 's'} {
		t[from] = to
	}
	return t
}()

// joinWords returns the words of s (the runs of runes inWord accepts), each
// expanded by chatSpeak, joined and surrounded by single spaces.
func joinWords(s string, inWord func(rune) bool) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte(' ')
	word := -1 // start of the current word in s; -1 between words
	flush := func(end int) {
		if word < 0 {
			return
		}
		w := s[word:end]
		if x, ok := chatSpeak[w]; ok {
			w = x
		}
		b.WriteString(w)
		b.WriteByte(' ')
		word = -1
	}
	for i, r := range s {
		if inWord(r) {
			if word < 0 {
				word = i
			}
			continue
		}
		flush(i)
	}
	flush(len(s))
	if b.Len() == 1 {
		return "  "
	}
	return b.String()
}

// CheckInput judges a player's message before it reaches the model.
func (Guard) CheckInput(text string) Verdict {
	n := normalize(text)
	switch {
	case crisisRE.MatchString(n) && !crisisExceptRE.MatchString(n):
		return Verdict{Safety: schema.SafetyCrisis, Rule: "crisis", Reply: CrisisReply}
	case jailbreakRE.MatchString(n):
		return Verdict{Safety: schema.SafetyRefused, Rule: "jailbreak", Reply: RefusalReply}
	case illegalRE.MatchString(n):
		return Verdict{Safety: schema.SafetyRefused, Rule: "illegal", Reply: RefusalReply}
	}
	return Verdict{Safety: schema.SafetyNone}
}

// CheckOutput judges the model's reply before the player sees it (or, when
// streaming, before the final event); card is the persona card of the prompt.
func (g Guard) CheckOutput(reply, card string) Verdict {
	n := normalize(reply)
	switch {
	case selfHarmOutputRE.MatchString(n):
		return Verdict{Safety: schema.SafetyRefused, Rule: "self-harm-output", Reply: RefusalReply}
	case illegalRE.MatchString(n):
		return Verdict{Safety: schema.SafetyRefused, Rule: "illegal", Reply: RefusalReply}
	case g.leaks(n, card):
		return Verdict{Safety: schema.SafetyRefused, Rule: "prompt-leak", Reply: RefusalReply}
	}
	return Verdict{Safety: schema.SafetyNone}
}

// leaks reports whether reply (normalised) holds eight consecutive words of
// card, through the card's runs that NewGuard cut (or cuts now, for a card
// it was not given).
func (g Guard) leaks(reply, card string) bool {
	runs, ok := g.cards[card]
	if !ok {
		runs = newCardRuns(normalize(card))
	}
	return runs.leakedBy(reply)
}

// cardRuns holds every eight-word run of a normalised card, each with the
// spaces around it (" w1 … w8 ").
type cardRuns map[string]struct{}

func newCardRuns(card string) cardRuns {
	runs := cardRuns{}
	eachRun(card, func(run string) bool {
		runs[run] = struct{}{}
		return false
	})
	return runs
}

// leakedBy reports whether reply (normalised) holds eight consecutive
// words of the card the runs were cut from: in a normalised text words are
// separated by single spaces, so an eight-word run of the reply is in the
// card exactly when it is one of the card's runs.
func (r cardRuns) leakedBy(reply string) bool {
	return eachRun(reply, func(run string) bool {
		_, ok := r[run]
		return ok
	})
}

// eachRun calls f with each eight-word run of s (normalised), with the
// spaces around it, until f returns true, and reports whether it did.
func eachRun(s string, f func(run string) bool) bool {
	const n = 8
	// starts holds the indexes of the last n+1 spaces, a ring.
	var starts [n + 1]int
	seen := 0
	for i := 0; i < len(s); i++ {
		if s[i] != ' ' {
			continue
		}
		starts[seen%(n+1)] = i
		seen++
		if seen > n && f(s[starts[seen%(n+1)]:i+1]) {
			return true
		}
	}
	return false
}

// keywordRE is a guard rule's regexp with a cheap test in front of it: every
// match of the regexp contains one of the strings in need, so a text that
// contains none of them (most messages) is cleared without running the
// regexp, which costs tens of times more.
type keywordRE struct {
	re   *regexp.Regexp
	need []string // nil: no such strings were found, the regexp always runs
}

// mustKeywordRE compiles expr and derives the strings one of which its every match holds.
func mustKeywordRE(expr string) keywordRE {
	parsed, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		panic(err)
	}
	return keywordRE{re: regexp.MustCompile(expr), need: requiredStrings(parsed.Simplify())}
}

// MatchString reports whether the regexp matches s.
func (k keywordRE) MatchString(s string) bool {
	if k.need != nil && !slices.ContainsFunc(k.need, func(w string) bool { return strings.Contains(s, w) }) {
		return false
	}
	return k.re.MatchString(s)
}

// requiredStrings returns strings one of which every match of re contains,
// or nil when it finds none (re can match without any literal text, or uses
// case folding).
func requiredStrings(re *syntax.Regexp) []string {
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return nil
		}
		return []string{string(re.Rune)}
	case syntax.OpCapture, syntax.OpPlus:
		return requiredStrings(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min < 1 {
			return nil
		}
		return requiredStrings(re.Sub[0])
	case syntax.OpAlternate:
		var all []string
		for _, sub := range re.Sub {
			need := requiredStrings(sub)
			if need == nil {
				return nil
			}
			all = append(all, need...)
		}
		return all
	case syntax.OpConcat:
		// Every part's strings are required; the part whose shortest string
		// is longest is the most selective.
		var best []string
		for _, sub := range re.Sub {
			if need := requiredStrings(sub); need != nil && (best == nil || shortest(need) > shortest(best)) {
				best = need
			}
		}
		return best
	}
	return nil
}

// shortest is the length of the shortest of ss.
func shortest(ss []string) int {
	n := len(ss[0])
	for _, s := range ss[1:] {
		n = min(n, len(s))
	}
	return n
}
