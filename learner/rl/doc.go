// Package rl trains the dialogue agent with AT-GRPO (adaptive tree-based
// GRPO, DESIGN.md §7) and its baselines GRPO, GSPO and TreeRPO on one code
// path: rollout trees (Tree, built by a Builder from a Policy and an
// Environment), the clipped-surrogate update with a k3 KL penalty (Updater)
// and the training loop (Trainer).
//
// The tree code reaches the model and the user agent through two small
// interfaces, Policy and Environment, so the tree arithmetic is tested with
// deterministic fakes and runs unchanged against the real model
// (ModelPolicy) and the real user agent or the ground-truth players
// (PlayerEnv).
package rl
