// Package faulttest is Parley's reliability suite (DESIGN.md §10): it breaks
// the running system on purpose and checks the invariants — no event lost,
// no unverified model served, a failed Redis leaves gateways serving their
// last versions, a failed learner never touches what is served.
//
// Every test runs real servers on loopback (redis-server, the embedded
// Kafka-protocol broker, gateway processes re-executed from the test binary
// so they can be killed with SIGKILL) and stops itself within a bounded
// time. The tests are behind the build tag "faults":
//
//	go test -tags faults -count=1 -timeout 30m ./internal/faulttest/
//
// The package has no code outside its tests.
package faulttest
