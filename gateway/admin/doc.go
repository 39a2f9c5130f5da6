// Package admin is the live-ops side of the gateway (DESIGN.md §3 "Admin
// API", §9): an API on echo for the rollout state and fleet, canary (at a
// weight or through steps), advance, promote, rollback, pause and resume as
// compare-and-set changes, the model registry's versions and metric diffs,
// and the A/B report and Avg.L timeline that the learner's analysis
// publishes in Redis; a dashboard (embedded HTML, JavaScript and SVG,
// nothing fetched from elsewhere) that shows them and can start, ramp,
// advance, pause, abort and promote a canary; and Client, the Go client
// that `parley ctl` uses.
//
// API.Register adds the routes to a group that the gateway has already put
// behind its authentication and role check; API.DashboardHandler serves the
// dashboard, which calls the API with the key the operator pastes.
package admin
