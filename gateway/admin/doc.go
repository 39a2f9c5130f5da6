// Package admin is the live-ops side of the gateway (DESIGN.md §3 "Admin
// API", §9): an API on echo for the rollout state and fleet, canary,
// promote, rollback, pause and resume as compare-and-set changes, the model
// registry's versions and metric diffs, and the A/B report and Avg.L
// timeline of an experiment; a dashboard (embedded HTML, JavaScript and SVG,
// nothing fetched from elsewhere) that shows them; and Client, the Go client
// that `parley ctl` uses.
//
// API.Register adds the routes to a group that the gateway has already put
// behind its authentication and role check; API.DashboardHandler serves the
// dashboard, which calls the API with the key the operator pastes.
package admin
