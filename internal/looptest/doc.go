// Package looptest runs Parley's closed loop end to end (DESIGN.md §1):
// bots play against a real gateway, their sessions flow through Kafka to
// the learner, which refreshes the user agent and trains an AT-GRPO
// candidate; the candidate goes to a 50 % canary, more bots play, and the
// A/B report on exchange length decides promotion or rollback. The test
// is behind the build tag loop (make test-loop):
//
//	go test -tags loop -count=1 -timeout 30m -v ./internal/looptest/
package looptest
