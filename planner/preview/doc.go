// Package preview lets `kvlive switch` show what a switch will do from the
// cache of a running kvlive instead of reading the fleet itself. Every
// replica running the planner answers preview requests on
// events.PreviewSubject (one replica a request: a queue group) by planning
// them as `kvlive plan` does (offline.Plan) on the informer cache its
// planner plans from, and replies with the plans, one JSON document a
// line, in numbered parts that fit a message, sent as they fill. A switch
// asked with no replica up, or one that cannot answer (its cache is of
// another namespace, the asker may not ask, no part came in time), reads
// the cluster as before: Ask says so with ErrUnavailable.
//
// Read from the replica, the preview costs the API server nothing; read
// by the command, it costs a list of every VM in scope and of their
// revisions, JSON the API server encodes and the command decodes (some
// 2 s of the command's CPU at 10,000 VMs, docs/performance.md).
package preview
