// Package events owns kvlive's wire format: the payload types that travel
// between the watcher, planner and applier, the CloudEvents envelope around
// them, NATS subjects, JetStream stream/consumer/KV definitions, header names,
// deterministic Nats-Msg-Id derivation and the W3C trace-context carrier.
//
// No other package writes a subject string or a header name: a stage that
// needs one asks this package, so the wire changes in exactly one place.
package events
