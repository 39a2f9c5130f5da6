package rollout

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/parleyhq/parley/schema"
)

// buckets is the resolution of arm assignment: a weight of 1 % is 100 buckets.
const buckets = 10000

// Bucket maps a player to one of 10,000 buckets by
// sha256(experimentSalt, 0x00, playerID); it depends on nothing else.
func Bucket(playerID, experimentSalt string) int {
	h := sha256.New()
	h.Write([]byte(experimentSalt))
	h.Write([]byte{0})
	h.Write([]byte(playerID))
	var sum [sha256.Size]byte
	return int(binary.BigEndian.Uint64(h.Sum(sum[:0])[:8]) % buckets)
}

// Assign returns schema.ArmCanary for the players whose bucket is below
// canaryWeight % of the buckets and schema.ArmStable for the rest. A player
// keeps the same arm for as long as the salt is the same, and raising the
// weight only moves stable players to canary, never back. It is the arm
// layer of an experiment, with the experiment's split as the weight.
func Assign(playerID, experimentSalt string, canaryWeight int) string {
	if Bucket(playerID, experimentSalt) < canaryWeight*(buckets/100) {
		return schema.ArmCanary
	}
	return schema.ArmStable
}

// Covered reports whether an experiment of salt that covers coverage
// buckets (of 10,000) takes the player in. It hashes with a salt of its own
// ("coverage", 0x00, salt), so that coverage and arm are independent
// (Statsig's layers): widening the coverage takes more players in and
// moves nobody between arms.
func Covered(playerID, salt string, coverage int) bool {
	return Bucket(playerID, "coverage\x00"+salt) < coverage
}

// Exposure is what a new session of a player is assigned: its arm and
// version, and, when the player is in the experiment, the experiment with
// its salt. Generation is the rollout generation it was assigned at.
type Exposure struct {
	Arm          string
	Version      string
	ExperimentID string
	Salt         string
	Generation   int64
}

// Expose assigns a new session of playerID under s. While a canary runs,
// the experiment covers CanaryWeight/Split of the players (Covered); a
// covered player's arm is Assign with the experiment's Split, so the
// canary gets CanaryWeight % of all players. While the canary is paused,
// covered players are served stable as schema.ArmHeld, in the experiment
// but in neither arm. Everyone else, and everyone when there is no canary
// (steady, rolling back at weight 0), is served stable outside any
// experiment.
//
// A state without a Split (written before salts) covers every player and
// assigns by Assign(ExperimentID, CanaryWeight).
func Expose(s schema.RolloutState, playerID string) Exposure {
	out := Exposure{Arm: schema.ArmStable, Version: s.Stable, Generation: s.Generation}
	if s.Canary == "" || s.CanaryWeight <= 0 || s.State != schema.PhaseCanary && s.State != schema.PhasePaused {
		return out
	}
	salt, split, coverage := s.Salt, s.Split, buckets
	if split == 0 {
		salt, split = s.ExperimentID, s.CanaryWeight
	} else {
		coverage = s.CanaryWeight * buckets / split
	}
	if !Covered(playerID, salt, coverage) {
		return out
	}
	out.ExperimentID, out.Salt = s.ExperimentID, s.Salt
	switch {
	case s.State == schema.PhasePaused:
		out.Arm = schema.ArmHeld
	case Assign(playerID, salt, split) == schema.ArmCanary:
		out.Arm, out.Version = schema.ArmCanary, s.Canary
	}
	return out
}

// Route is the arm and version Expose gives a new session of playerID.
func Route(s schema.RolloutState, playerID string) (arm, version string) {
	e := Expose(s, playerID)
	return e.Arm, e.Version
}
