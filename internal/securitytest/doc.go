// Package securitytest is the gateway's security suite (`make
// test-security`). It holds only tests: they start one real gateway process
// (gatewayd.Run on a loopback port, against a real redis-server, a kfake
// broker and a tiny real model) and check over real HTTP that hostile input
// gets its documented status and JSON error body, that no client reaches
// another's session, that the safety guard handles the four adversarial
// player kinds and logs its verdict to Kafka, that rate limits hold under
// a burst, and that the process keeps serving after every case.
//
// The suite takes a few seconds and runs with the default `make test`;
// `make test-security` runs it alone, verbosely. Each case logs its method, path, status and error code under -v.
package securitytest
