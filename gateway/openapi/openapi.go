// Package openapi builds the OpenAPI 3.1 description of the gateway's
// player, OpenAI-compatible, admin and ops APIs from the Go types that go
// over the wire (schema, and the admin API's answers), for game engines to
// generate clients from. Document is what `make schemas` writes to
// gateway/openapi.json, which the gateway serves at /openapi.json.
package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/parleyhq/parley/gateway"
	"github.com/parleyhq/parley/gateway/admin"
	"github.com/parleyhq/parley/schema"
)

// auth is who may call an operation.
type auth int

const (
	public auth = iota
	playerKey
	adminKey
)

// param is a path, query or header parameter.
type param struct {
	name, in, desc string
}

// operation is one route of the gateway.
type operation struct {
	method, path string // path in OpenAPI form, /v1/sessions/{id}
	id, tag      string
	summary      string
	auth         auth
	params       []param
	request      any  // JSON body, nil for none
	optionalBody bool // the body may be left out
	status       int  // of success
	response     any  // JSON answer; nil for text/plain
	sse          any  // the data of each server-sent event, when the route can stream
	respHeaders  []param
}

const (
	tagPlayer = "player"
	tagOpenAI = "openai"
	tagAdmin  = "admin"
	tagOps    = "ops"
)

var sessionID = param{"id", "path", "The session id (a UUID)."}

// operations lists every route the gateway and the admin API register.
func operations() []operation {
	sessionHeader := param{gateway.SessionHeader, "header", "The session this completion continues (a UUID of the caller's client); " +
		"the first request with a new id starts it for the player named by user. Without it, a request with user is logged as a session of one exchange."}
	deployment := param{"deployment", "query", "The deployment (the gateway's own when left out)."}
	model := param{"model", "query", "The model name in the registry (the configured one when left out)."}
	experiment := param{"experiment", "query", "The experiment id the published analysis must be of (any when left out)."}
	change := func(action, summary string) operation {
		return operation{method: http.MethodPost, path: "/admin/v1/rollout/" + action, id: action + "Rollout", tag: tagAdmin, summary: summary,
			auth: adminKey, params: []param{deployment}, request: admin.ChangeRequest{}, optionalBody: true, status: http.StatusOK,
			response: schema.RolloutChange{}}
	}
	return []operation{
		{method: http.MethodGet, path: "/healthz", id: "health", tag: tagOps, summary: "Liveness: the process answers", status: http.StatusOK},
		{method: http.MethodGet, path: "/readyz", id: "ready", tag: tagOps, summary: "Readiness: Redis answers and a model is loaded", status: http.StatusOK},
		{method: http.MethodGet, path: "/metrics", id: "metrics", tag: tagOps, summary: "Prometheus metrics", status: http.StatusOK},
		{method: http.MethodGet, path: "/openapi.json", id: "openAPI", tag: tagOps, summary: "This OpenAPI description", status: http.StatusOK, response: map[string]any{}},

		{method: http.MethodPost, path: "/v1/sessions", id: "createSession", tag: tagPlayer, summary: "Start a conversation of a player with an NPC",
			auth: playerKey, request: schema.CreateSessionRequest{}, status: http.StatusCreated, response: schema.CreateSessionResponse{}},
		{method: http.MethodPost, path: "/v1/sessions/{id}/messages", id: "sendMessage", tag: tagPlayer,
			summary: "Send the player's message and get the NPC's reply (streamed as token events with Accept: text/event-stream)",
			auth:    playerKey, params: []param{sessionID}, request: schema.MessageRequest{}, status: http.StatusOK,
			response: schema.MessageResponse{}, sse: schema.MessageResponse{}},
		{method: http.MethodPost, path: "/v1/sessions/{id}/end", id: "endSession", tag: tagPlayer,
			summary: "End a session: the player left, or the game's own limit on exchanges ended it (reason max_turns)",
			auth:    playerKey, params: []param{sessionID}, request: schema.EndSessionRequest{}, optionalBody: true, status: http.StatusOK,
			response: schema.SessionView{}},
		{method: http.MethodGet, path: "/v1/sessions/{id}", id: "getSession", tag: tagPlayer, summary: "A session and its latest exchanges",
			auth: playerKey, params: []param{sessionID}, status: http.StatusOK, response: schema.SessionView{}},

		{method: http.MethodPost, path: "/v1/chat/completions", id: "createChatCompletion", tag: tagOpenAI,
			summary: "OpenAI-compatible chat completion, streamed with stream true",
			auth:    playerKey, params: []param{sessionHeader}, request: schema.ChatCompletionRequest{}, status: http.StatusOK,
			response: schema.ChatCompletionResponse{}, sse: schema.ChatCompletionChunk{},
			respHeaders: []param{{gateway.SessionHeader, "header", "The session the completion was logged in, when the request named one."}}},
		{method: http.MethodGet, path: "/v1/models", id: "listModels", tag: tagOpenAI, summary: "The deployment and the versions it serves, as OpenAI lists models",
			auth: playerKey, status: http.StatusOK, response: schema.ModelList{}},

		{method: http.MethodGet, path: "/admin/v1/status", id: "gatewayStatus", tag: tagAdmin, summary: "This gateway's deployment and active sessions",
			auth: adminKey, status: http.StatusOK, response: gateway.AdminStatus{}},
		{method: http.MethodGet, path: "/admin/v1/rollout", id: "getRollout", tag: tagAdmin, summary: "The rollout state, the fleet and recent changes",
			auth: adminKey, params: []param{deployment}, status: http.StatusOK, response: admin.RolloutStatus{}},
		{method: http.MethodPost, path: "/admin/v1/rollout/canary", id: "startCanary", tag: tagAdmin, summary: "Start a canary of a version at a weight or through steps, or ramp the running one",
			auth: adminKey, params: []param{deployment}, request: schema.CanaryRequest{}, status: http.StatusOK, response: schema.RolloutChange{}},
		change("advance", "Move a stepped canary to its next step"),
		change("promote", "Promote the canary to stable"),
		change("rollback", "Roll the canary back"),
		change("pause", "Pause the rollout"),
		change("resume", "Resume the rollout"),
		{method: http.MethodGet, path: "/admin/v1/models", id: "listModelVersions", tag: tagAdmin, summary: "The model's versions in the registry",
			auth: adminKey, params: []param{model}, status: http.StatusOK, response: admin.ModelList{}},
		{method: http.MethodGet, path: "/admin/v1/models/diff", id: "diffModelVersions", tag: tagAdmin, summary: "Compare the metrics of two versions",
			auth: adminKey, params: []param{model, {"a", "query", "One version."}, {"b", "query", "The other version."}},
			status: http.StatusOK, response: admin.ModelDiff{}},
		{method: http.MethodGet, path: "/admin/v1/models/{version}", id: "getModelVersion", tag: tagAdmin, summary: "A version's manifest",
			auth: adminKey, params: []param{{"version", "path", "The version."}, model}, status: http.StatusOK, response: schema.Manifest{}},
		{method: http.MethodGet, path: "/admin/v1/models/{version}/curves", id: "getModelCurves", tag: tagAdmin, summary: "A version's training curves",
			auth: adminKey, params: []param{{"version", "path", "The version."}, model}, status: http.StatusOK, response: schema.Curves{}},
		{method: http.MethodGet, path: "/admin/v1/report", id: "experimentReport", tag: tagAdmin, summary: "The A/B analysis the learner last published: report, decision, audit and settings",
			auth: adminKey, params: []param{experiment, deployment}, status: http.StatusOK, response: admin.ExperimentReport{}},
		{method: http.MethodGet, path: "/admin/v1/timeline", id: "experimentTimeline", tag: tagAdmin, summary: "Each arm's cumulative score over time",
			auth: adminKey, params: []param{experiment, deployment}, status: http.StatusOK, response: admin.Timeline{}},
	}
}

// Document returns the OpenAPI 3.1 description, indented, with a final newline.
func Document() ([]byte, error) {
	c := &components{schemas: map[string]any{}}
	// Additional properties are allowed: the gateway ignores unknown fields
	// of a request, and a client generated from this description should
	// ignore fields a later gateway adds to an answer.
	c.r = &jsonschema.Reflector{Namer: typeName, AllowAdditionalProperties: true}
	paths := map[string]map[string]any{}
	for _, op := range operations() {
		o, err := c.operation(op)
		if err != nil {
			return nil, err
		}
		if paths[op.path] == nil {
			paths[op.path] = map[string]any{}
		}
		paths[op.path][strings.ToLower(op.method)] = o
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title":   "Parley gateway",
			"version": "1",
			"summary": "NPC dialogue for games: the player API, an OpenAI-compatible chat API and the admin API.",
			"description": "Every route but the ops routes takes an API key as a bearer token. " +
				"Errors are {\"error\":{\"code\",\"message\"}} with the code of the status. " +
				"See README.md and docs/DESIGN.md for sessions, logging and experiments.",
			"license": map[string]any{"name": "Proprietary", "identifier": "LicenseRef-Parley"},
		},
		"servers": []any{map[string]any{"url": "/", "description": "The gateway that serves this description"}},
		"tags": []any{
			map[string]any{"name": tagPlayer, "description": "Sessions of a player with an NPC"},
			map[string]any{"name": tagOpenAI, "description": "OpenAI-compatible chat completions and models"},
			map[string]any{"name": tagAdmin, "description": "Rollout and experiments (live-ops and admin keys)"},
			map[string]any{"name": tagOps, "description": "Health, readiness, metrics and this description"},
		},
		"paths": paths,
		"components": map[string]any{
			"schemas": c.schemas,
			"securitySchemes": map[string]any{
				"apiKey": map[string]any{"type": "http", "scheme": "bearer", "description": "An API key: a game client's for the player and OpenAI APIs, a live-ops or admin key for the admin API."},
			},
		},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encode openapi document: %w", err)
	}
	// The components were reflected with JSON Schema's $defs references.
	b = bytes.ReplaceAll(b, []byte(`"#/$defs/`), []byte(`"#/components/schemas/`))
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return nil, fmt.Errorf("indent openapi document: %w", err)
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// typeName names a component: its type name for the schema package, with
// its package name before it for the others (admin.ModelList is not
// schema.ModelList).
func typeName(t reflect.Type) string {
	if strings.HasSuffix(t.PkgPath(), "/schema") || t.PkgPath() == "" {
		return t.Name()
	}
	p := t.PkgPath()
	return p[strings.LastIndex(p, "/")+1:] + "." + t.Name()
}

// components collects the JSON Schemas of the wire types.
type components struct {
	r       *jsonschema.Reflector
	schemas map[string]any
}

// ref reflects v into the components and returns a reference to it.
func (c *components) ref(v any) (map[string]any, error) {
	s := c.r.Reflect(v)
	for name, d := range s.Definitions {
		c.schemas[name] = d
	}
	if s.Ref == "" {
		// A map or other unnamed type: inline it.
		s.Version, s.Definitions = "", nil
		b, err := json.Marshal(s)
		if err != nil {
			return nil, fmt.Errorf("reflect %T: %w", v, err)
		}
		var m map[string]any
		return m, json.Unmarshal(b, &m)
	}
	return map[string]any{"$ref": s.Ref}, nil
}

func (c *components) operation(op operation) (map[string]any, error) {
	o := map[string]any{"operationId": op.id, "summary": op.summary, "tags": []string{op.tag}}
	switch op.auth {
	case public:
		o["security"] = []any{}
	case playerKey:
		o["security"] = []any{map[string]any{"apiKey": []string{}}}
	case adminKey:
		o["security"] = []any{map[string]any{"apiKey": []string{}}}
		o["description"] = "Live-ops and admin keys only."
	}
	var params []any
	for _, p := range op.params {
		params = append(params, map[string]any{"name": p.name, "in": p.in, "description": p.desc,
			"required": p.in == "path", "schema": map[string]any{"type": "string"}})
	}
	if params != nil {
		o["parameters"] = params
	}
	if op.request != nil {
		ref, err := c.ref(op.request)
		if err != nil {
			return nil, err
		}
		o["requestBody"] = map[string]any{"required": !op.optionalBody,
			"content": map[string]any{"application/json": map[string]any{"schema": ref}}}
	}
	ok := map[string]any{"description": http.StatusText(op.status)}
	content := map[string]any{}
	if op.response == nil {
		content["text/plain"] = map[string]any{"schema": map[string]any{"type": "string"}}
	} else {
		ref, err := c.ref(op.response)
		if err != nil {
			return nil, err
		}
		content["application/json"] = map[string]any{"schema": ref}
	}
	if op.sse != nil {
		ref, err := c.ref(op.sse)
		if err != nil {
			return nil, err
		}
		content["text/event-stream"] = map[string]any{"schema": map[string]any{"type": "string",
			"description": "Server-sent events; the data of each is JSON of this schema", "contentSchema": ref}}
	}
	ok["content"] = content
	if len(op.respHeaders) > 0 {
		hs := map[string]any{}
		for _, h := range op.respHeaders {
			hs[h.name] = map[string]any{"description": h.desc, "schema": map[string]any{"type": "string"}}
		}
		ok["headers"] = hs
	}
	errRef, err := c.ref(schema.ErrorBody{})
	if err != nil {
		return nil, err
	}
	errResp := func(desc string) map[string]any {
		return map[string]any{"description": desc, "content": map[string]any{"application/json": map[string]any{"schema": errRef}}}
	}
	responses := map[string]any{fmt.Sprint(op.status): ok, "4XX": errResp("A client error"), "5XX": errResp("A server error")}
	o["responses"] = responses
	return o, nil
}
