// Package inference serves and trains Parley's decoder-only transformer: the
// model, the byte-level BPE tokenizer, checkpoints in the registry layout, and
// an Engine with a KV cache and continuous batching.
package inference
