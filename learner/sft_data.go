package learner

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
	"github.com/parleyhq/parley/simulator"
)

// instance is one training or scoring sequence: tokens and the weight of
// the loss of predicting each token (weights[0] unused).
type instance struct {
	tokens  []int
	weights []float32
}

// weighted counts the tokens with a loss.
func (in instance) weighted() int {
	n := 0
	for _, w := range in.weights[min(1, len(in.weights)):] {
		if w > 0 {
			n++
		}
	}
	return n
}

// truncate cuts the instance to maxSeq tokens.
func (in instance) truncate(maxSeq int) instance {
	if len(in.tokens) <= maxSeq {
		return in
	}
	return instance{tokens: in.tokens[:maxSeq], weights: in.weights[:maxSeq]}
}

// DefaultNPCCard is the system turn of NPC training dialogues whose NPC has
// no card of its own in SFTConfig.NPCCards: the card the gateway serves by
// default, so training and serving prompts match.
const DefaultNPCCard = inference.CompanionCard

// npcPrompt renders dialogues the way the gateway prompts the dialogue
// agent: the NPC's card as the system turn, then user and NPC turns in the
// chat template.
type npcPrompt struct {
	cards       map[string]string
	defaultCard string
	// greeting is the NPC's first turn after the card, as the gateway
	// serves it; empty for none (SFT's dialogues have none).
	greeting string
	// chat is the model's chat format (an imported model's template); nil
	// means Parley's layout on the tokenizer at hand.
	chat *inference.ChatFormat
}

func (p npcPrompt) card(npcID string) string {
	if c, ok := p.cards[npcID]; ok && c != "" {
		return c
	}
	return p.defaultCard
}

// userInstances are the user-agent SFT instances of one target dialogue
// (DESIGN.md §5): one per user turn of the target, each the demos and the
// target up to that turn, with loss on that turn only (its [Continue] or
// [Terminate] token, text and <|end|>); a dialogue the player ended gets a
// final [Terminate] turn. The NPC turns before the judged one carry [End
// Risk] values from risks (by exchange index), and so do the demos; the
// judged one carries none.
//
// One instance per turn is what keeps training and serving alike: when
// serving, the NPC turn being judged never has a risk yet, so a single
// sequence with loss on every turn would teach the model that the one
// untagged NPC turn is the last, and to answer it with [Terminate].
//
// Demos are left out, the last first, then the oldest exchanges, until an
// instance fits in maxSeq; a turn that does not fit even alone is cut.
func userInstances(tok *inference.Tokenizer, ua simulator.UserAgentConfig, demos []schema.Dialogue, target schema.Dialogue, risks []float64, maxSeq int) ([]instance, error) {
	n := len(target.Exchanges)
	turns := n
	if target.Reason.PlayerEnded() {
		turns++
	}
	out := make([]instance, 0, turns)
	for j := 1; j <= turns; j++ {
		in, err := userTurnInstance(tok, ua, promptDemos(demos, risks), target, risks, j, maxSeq)
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

// userTurnInstance renders the instance of user turn j (1-based) of target.
func userTurnInstance(tok *inference.Tokenizer, ua simulator.UserAgentConfig, demos []simulator.PromptDialogue, target schema.Dialogue, risks []float64, j, maxSeq int) (instance, error) {
	n := len(target.Exchanges)
	first := 0 // oldest exchange shown
	for {
		cur := simulator.PromptDialogue{Exchanges: target.Exchanges[first:min(j, n)]}
		if j > n {
			cur.Terminated = true
		}
		// Tag the NPC turns before the judged one (exchange j−1).
		for k := first; k < j-2 && k < len(risks); k++ {
			cur.Risks = append(cur.Risks, risks[k])
		}
		ids, ws, err := ua.EncodeUserAgentTraining(tok, demos, cur)
		if err != nil {
			return instance{}, err
		}
		spans := weightedSpans(ws)
		if len(spans) == 0 {
			return instance{}, fmt.Errorf("render user turn %d of %s: no user turn", j, target.SessionID)
		}
		last := spans[len(spans)-1] // turn j: the current dialogue ends with it (and D_j)
		in := instance{tokens: ids[:last[1]], weights: slices.Clone(ws[:last[1]])}
		for i := range last[0] {
			in.weights[i] = 0
		}
		switch {
		case len(in.tokens) <= maxSeq:
			return in, nil
		case len(demos) > 0:
			demos = demos[:len(demos)-1]
		case first < min(j, n)-1:
			first++
		default:
			return in.truncate(maxSeq), nil
		}
	}
}

// weightedSpans returns the [start, end) ranges of the runs of positive
// weights.
func weightedSpans(ws []float32) [][2]int {
	var out [][2]int
	for i := 0; i < len(ws); i++ {
		if ws[i] <= 0 {
			continue
		}
		k := i
		for k < len(ws) && ws[k] > 0 {
			k++
		}
		out = append(out, [2]int{i, k})
		i = k
	}
	return out
}

// promptDemos shows demos with the training risks by exchange, as the
// RL-time prompts show them (the paper's template tags every NPC turn).
func promptDemos(demos []schema.Dialogue, risks []float64) []simulator.PromptDialogue {
	out := make([]simulator.PromptDialogue, len(demos))
	for i, d := range demos {
		out[i] = simulator.PromptDialogueOf(d, risks)
	}
	return out
}

// pickDemos chooses up to two other dialogues of target's player from
// pool (the player's dialogues): the latest ones that started before the
// target, else the earliest after it.
func pickDemos(pool []schema.Dialogue, target schema.Dialogue) []schema.Dialogue {
	var before, after []schema.Dialogue
	for _, d := range pool {
		switch {
		case d.SessionID == target.SessionID || len(d.Exchanges) == 0:
		case d.Started.Before(target.Started):
			before = append(before, d)
		default:
			after = append(after, d)
		}
	}
	byStart := func(a, b schema.Dialogue) int {
		return cmp.Or(a.Started.Compare(b.Started), cmp.Compare(a.SessionID, b.SessionID))
	}
	slices.SortFunc(before, byStart)
	slices.SortFunc(after, byStart)
	out := before[max(0, len(before)-2):]
	for _, d := range after {
		if len(out) == 2 {
			break
		}
		out = append(out, d)
	}
	return out
}

// heldOutPlayer reports whether the player is among the held-out share,
// by a seeded hash of the id, so that the split is stable across runs
// and refreshes.
func heldOutPlayer(playerID string, share float64, seed uint64) bool {
	if share <= 0 {
		return false
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", seed, playerID)
	return float64(h.Sum64()%1_000_000)/1_000_000 < share
}

// splitPlayers splits dialogues into training and held-out ones by player.
func splitPlayers(ds []schema.Dialogue, share float64, seed uint64) (train, heldOut []schema.Dialogue) {
	for _, d := range ds {
		if heldOutPlayer(d.PlayerID, share, seed) {
			heldOut = append(heldOut, d)
		} else {
			train = append(train, d)
		}
	}
	return train, heldOut
}

// byPlayer groups dialogues by player.
func byPlayer(ds []schema.Dialogue) map[string][]schema.Dialogue {
	out := map[string][]schema.Dialogue{}
	for _, d := range ds {
		out[d.PlayerID] = append(out[d.PlayerID], d)
	}
	return out
}

// errNoData is returned when there is nothing to train or evaluate on.
var errNoData = errors.New("no usable dialogues")

// buildInstances renders the training instances of role.
// decisionWeight multiplies the loss weight of the user agent's
// [Continue] / [Terminate] token (1 weighs it like any text token).
// hazards, when not nil (the soft-label diagnostic, RoleUser), replaces
// each logged decision by the hidden hazard as a soft label
// (softDecisions).
func buildInstances(role Role, tok *inference.Tokenizer, ua simulator.UserAgentConfig, prompt npcPrompt, ds []schema.Dialogue, risks []float64, maxSeq int, decisionWeight float32, hazards HiddenHazards) ([]instance, error) {
	cont, okC := tok.TokenID(inference.TokContinue)
	term, okT := tok.TokenID(inference.TokTerminate)
	if hazards != nil && (!okC || !okT) {
		return nil, errors.New("soft labels: the tokenizer has no [Continue] or [Terminate] token")
	}
	players := byPlayer(ds)
	var out []instance
	for _, d := range ds {
		if len(d.Exchanges) == 0 {
			continue
		}
		var ins []instance
		if role == RoleNPC {
			in, err := prompt.instance(tok, d, maxSeq)
			if err != nil {
				return nil, fmt.Errorf("render %s: %w", d.SessionID, err)
			}
			ins = []instance{in}
		} else {
			var err error
			if ins, err = userInstances(tok, ua, pickDemos(players[d.PlayerID], d), d, risks, maxSeq); err != nil {
				return nil, fmt.Errorf("render %s: %w", d.SessionID, err)
			}
			for _, in := range ins {
				// The turn's weighted span opens with <|user|> and the decision.
				if spans := weightedSpans(in.weights); len(spans) > 0 && spans[0][0]+1 < len(in.weights) {
					in.weights[spans[0][0]+1] *= decisionWeight
				}
			}
			if hazards != nil {
				h, err := hazards(d)
				if err != nil {
					return nil, fmt.Errorf("soft labels of %s: %w", d.SessionID, err)
				}
				if ins, err = softDecisions(ins, h, cont, term); err != nil {
					return nil, fmt.Errorf("soft labels of %s: %w", d.SessionID, err)
				}
			}
		}
		for _, in := range ins {
			if len(in.tokens) >= 2 && in.weighted() > 0 {
				out = append(out, in)
			}
		}
	}
	if len(out) == 0 {
		return nil, errNoData
	}
	return out, nil
}

// HiddenHazards gives, for a logged dialogue, the probability with which
// its player would have ended it after each NPC turn, by exchange index.
// Only a simulated population knows it; a deployment never observes it, so
// it serves the soft-label diagnostic of the referee alone
// (SFTConfig.SoftLabelDiagnostic).
type HiddenHazards func(d schema.Dialogue) ([]float64, error)

// softDecisions turns the instances of one dialogue, in turn order as
// userInstances makes them, into soft-labelled ones: the decision of user
// turn j ≥ 2, taken after NPC turn j−1 whose hidden hazard is
// p = hazards[j−2], becomes two targets at the same position, [Terminate]
// weighted p·w and [Continue] weighted (1−p)·w, w being the decision's
// weight. The copy that holds the logged decision keeps the turn's text;
// the other ends at its decision token. The opening turn (nothing judged
// before it) stays as it is. Instances are not packed, so each copy is a
// sequence of its own in a batch.
func softDecisions(ins []instance, hazards []float64, cont, term int) ([]instance, error) {
	out := make([]instance, 0, 2*len(ins))
	for j, in := range ins {
		spans := weightedSpans(in.weights)
		if j == 0 || len(spans) == 0 || spans[0][0]+1 >= len(in.tokens) {
			out = append(out, in)
			continue
		}
		if j-1 >= len(hazards) {
			return nil, fmt.Errorf("user turn %d has no hazard (%d given)", j+1, len(hazards))
		}
		pos := spans[0][0] + 1
		p, w := float32(hazards[j-1]), in.weights[pos]
		logged, other, pLogged := in.tokens[pos], term, 1-p
		switch logged {
		case cont:
		case term:
			other, pLogged = cont, p
		default:
			return nil, fmt.Errorf("user turn %d: token %d where a decision belongs", j+1, logged)
		}
		alt := instance{tokens: slices.Clone(in.tokens[:pos+1]), weights: make([]float32, pos+1)}
		alt.tokens[pos], alt.weights[pos] = other, (1-pLogged)*w
		in.weights[pos] = pLogged * w
		out = append(out, in, alt)
	}
	return out, nil
}
