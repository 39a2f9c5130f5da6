// Package learner consumes sessions from Kafka and improves the agents: SFT of
// the dialogue agent and the user agent, AT-GRPO and its baselines, and the
// evaluation metrics.
//
// The parts, in the order data flows through them:
//
//   - Consumer reads parley.sessions.v1 in a consumer group and rebuilds whole
//     dialogues from events that may come twice, out of order or never end;
//     Store keeps the ended ones durably (append-only, fsync'd segments) and
//     indexed by player. Offsets are committed only once a batch is durable.
//   - TrainSFT fine-tunes the dialogue agent (loss on NPC turns) or the user
//     agent (two demo dialogues and a target dialogue of one player, loss on
//     the target's user turns with their [Continue]/[Terminate] token), with
//     checkpoints it resumes from, and publishes the result to the registry.
//   - The refresh loop of Learner fine-tunes the current user agent on new
//     sessions plus a replay sample and publishes it only when FidelityGate
//     accepts it on held-out players.
//   - Metrics holds the paper's measures (PPL, Dist-n, words per turn, Avg.L,
//     Avg.r, ρ); EvaluateModel computes them for a registry version.
package learner
