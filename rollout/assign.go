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
// weight only moves stable players to canary, never back.
func Assign(playerID, experimentSalt string, canaryWeight int) string {
	if Bucket(playerID, experimentSalt) < canaryWeight*(buckets/100) {
		return schema.ArmCanary
	}
	return schema.ArmStable
}

// Route picks the arm and version for a new session of playerID under s:
// the canary only while s is in the canary phase, by Assign with the
// experiment id as the salt; the stable version otherwise (steady, paused,
// rolling back).
func Route(s schema.RolloutState, playerID string) (arm, version string) {
	if s.State == schema.PhaseCanary && s.Canary != "" && s.CanaryWeight > 0 &&
		Assign(playerID, s.ExperimentID, s.CanaryWeight) == schema.ArmCanary {
		return schema.ArmCanary, s.Canary
	}
	return schema.ArmStable, s.Stable
}
