// Package simulator holds the players: the ground-truth player population,
// the bootstrap corpus generator, corpus importers and the learned user
// agent; simulator/bots drives the personas against a running gateway.
//
//   - [Population] and [Persona] are the seeded ground-truth players; a
//     [Conversation] reacts to NPC replies by the rules of RULES.md
//     ([Conversation.Assess], [Conversation.Respond]).
//   - [ScriptedNPC] is a rule-based NPC of a chosen [NPCQuality];
//     [GenerateCorpus] lets the population talk to a mix of them and writes
//     session events as JSON lines.
//   - [ImportDailyDialog], [ImportJSONL] and [ReadCorpus] read dialogues;
//     [DialogueEvents] turns a [schema.Dialogue] into session events.
//   - [UserAgent] is the learned player simulator on an inference engine.
package simulator
