// Package learner consumes sessions from Kafka and improves the agents: SFT of
// the dialogue agent and the user agent, AT-GRPO and its baselines, and the
// evaluation metrics.
package learner
