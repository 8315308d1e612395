// Package kvlive rolls KubeVirt instance type and preference changes out to
// every VM that uses them, live where KubeVirt can, and keeps a traced
// record of what happened to each VM.
//
// The module is laid out by ARCHITECTURE's layers, and layering_test.go
// keeps it so:
//
//   - events: the wire (payloads, envelope, subjects, streams, buckets,
//     headers); it imports no other kvlive package.
//   - instancetype: the pure KubeVirt domain; it imports only events.
//   - watcher, planner, applier: the stages; each imports events,
//     instancetype and internal/, never another stage.
//   - internal/: what the stages share; it never imports a stage.
//   - cmd/kvlive: the CLI and the process wiring, the only place that
//     imports every stage.
package kvlive
