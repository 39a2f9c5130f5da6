// Package simulator holds the players: the ground-truth player population,
// the bootstrap corpus generator, corpus importers and the learned user agent.
package simulator
