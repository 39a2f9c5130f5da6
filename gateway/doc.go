// Package gateway is the HTTP server that game clients call: the player chat
// API, the OpenAI-compatible endpoint, auth, rate limits, the safety guard
// and sessions in Redis. Session events go to an EventSink (the Kafka
// session logger of package sessionlog); replies come from a Generator (an
// inference engine through FromEngine, or the versions of a model pool
// through PoolRouter).
//
// Routes (all errors are JSON {"error":{"code","message"}}):
//
//	POST /v1/sessions                  {player_id, npc_id?, client?} → 201 {session_id, greeting, policy_version, arm}
//	POST /v1/sessions/{id}/messages    {text} → {reply, turn, safety, ended?}; with Accept: text/event-stream
//	                                   "token" events {"text"} and a final "done" event with the same body
//	POST /v1/sessions/{id}/end         {reason?} → the session view; session_ended with player_ended, or
//	                                   max_turns when the game's own limit on exchanges ended it
//	GET  /v1/sessions/{id}             → the session view with its transcript (the creating client only)
//	POST /v1/chat/completions          OpenAI's chat API, stream ("data: chunk" … "data: [DONE]") or not;
//	                                   X-Parley-Session: <uuid> makes it a turn of a logged session
//	GET  /v1/models                    the deployment and its served versions, as OpenAI lists models
//	GET  /admin/v1/status              live-ops and admin keys only
//	GET  /healthz, /readyz, /metrics, /openapi.json (the contract, gateway/openapi.json)
//
// New builds a Server from a Config and its Deps; Run serves it and sweeps
// idle sessions. CreateKey, RevokeKey and ListKeys manage API keys. Package
// gateway/client calls these routes from Go; internal/bench measures them.
package gateway
