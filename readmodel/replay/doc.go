// Package replay selects past events from the KVLIVE_EVENTS stream (the
// replay horizon is the stream's max age) and either shows what each would
// do today, or sends it through the pipeline again as a new event linked to
// the original: a new id, a trace linked to the original's, and a
// Kvlive-Replay-Of header. Replays are idempotent: VMs already at the
// target plan as `none`, and a change superseded by a newer generation
// replays as the newest.
package replay
