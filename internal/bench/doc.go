// Package bench holds the benchmark and soak harnesses that `parley bench`
// runs, out of the production packages: RunInference (the engine's prefill,
// decode and training rates), RunGateway (the player API over loopback, a
// stub engine against the model, session logging on against off),
// RunRollout (hot swaps of a fleet of model pools that follow the rollout
// state) and RunSoak (a whole gateway process under steady load). Each
// drives the path production takes — the gateway's own Serve, its pool
// router, a gateway/client.Client as players use — and reports
// percentiles with abtest.Percentile. InstantGenerator, the stub engine,
// also serves tests of the player API.
package bench
