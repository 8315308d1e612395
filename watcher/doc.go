// Package watcher turns edits of instance types and preferences into change
// events on JetStream.
//
// It watches the four instancetype.kubevirt.io kinds with informers and emits
// one event per metadata.generation change, carrying the old and new spec.
// Resyncs, status and metadata-only updates do not move the generation and
// are ignored. The last generation seen per object UID lives in a KV bucket,
// so a restarted watcher emits what changed while it was down, and only that.
package watcher
