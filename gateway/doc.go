// Package gateway is the HTTP server that game clients call: the player chat
// API, the OpenAI-compatible endpoint, auth, rate limits, the safety guard,
// sessions in Redis and the Kafka session logger.
package gateway
