// Package schema holds Parley's wire types: the Kafka session events, the HTTP
// request and response bodies, the learner's assembled [Dialogue] (with
// [DialogueFold], the one fold from session events to a dialogue), the model
// manifest and the rollout state.
// Every type has a Validate method, and the JSON Schema files in
// schema/jsonschema are generated from these types. The package imports
// nothing else of Parley's.
package schema
