// Package applier moves each planned VM's pin and records a traced outcome.
//
// It consumes plans through a durable pull consumer with a worker pool,
// re-pins (snapshot the target generation as a ControllerRevision, then a
// JSON patch that tests and replaces the pin) or switches (patch
// spec.instancetype name and kind) each VM, and publishes one outcome per VM
// before acking the plan. Every write is guarded by a JSON-patch `test` op,
// so a VM whose pin moved meanwhile is re-read and re-planned, never
// overwritten; a VM already at the target is an outcome without a write.
package applier
