package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"
)

// Rollout is the planner's record of one event, kept in BucketRollouts under
// the event id: how many plans it produced and of which results, so anyone
// can tell when every outcome has arrived.
type Rollout struct {
	EventID   string         `json:"eventId"`
	Type      string         `json:"type"`
	Object    Ref            `json:"object"`
	Planned   int            `json:"planned"`
	Counts    map[Result]int `json:"counts"`
	PlannedAt time.Time      `json:"plannedAt"`
	// TraceID and SpanID name the planner's span, the root under which
	// `kvlive trace EVENT-ID` shows the rollout.
	TraceID string `json:"traceId,omitempty"`
	SpanID  string `json:"spanId,omitempty"`
	// Policy is the rollout policy the planner applied; PolicyError says
	// why the one asked for (an annotation) was refused, in which case the
	// rollout was paused before anything moved.
	Policy      Policy `json:"policy,omitzero"`
	PolicyError string `json:"policyError,omitempty"`
	// Batches are the sizes of the batches the moving VMs were split into,
	// in release order; empty for a rollout in one batch.
	Batches []int `json:"batches,omitempty"`
	// Supersedes lists the rollouts of older generations of the object
	// that were still running when this one was planned: this one took
	// their remaining VMs over, and they were aborted saying so.
	Supersedes []string `json:"supersedes,omitempty"`
	// VMList and VMChunks say where the VMs the rollout planned are kept:
	// VMChunks records under VMListKey(EventID, VMList, i). A plan for a VM
	// that is not listed, or in another batch than listed, is not one the
	// planner made. Records written before kvlive kept the list have none.
	VMList   string `json:"vmList,omitempty"`
	VMChunks int    `json:"vmChunks,omitempty"`
}

// PlannedVM is one VM a rollout planned and the batch its plan is in.
type PlannedVM struct {
	VMRef
	Batch int `json:"batch,omitempty"`
	// Revert, on a VM an undo moves back, is RevertDigest of its plan's
	// target: the applier moves the VM only to the revision and snapshot
	// the rollout recorded, whatever a plan under its event id says.
	Revert uint64 `json:"revert,omitempty"`
}

// RevertDigest is a digest of what a revert plan pins the VM to (the
// revision and the snapshot it is re-created from), the same on both
// sides of the wire; zero for any other move.
func RevertDigest(t Target) uint64 {
	if t.Move != MoveRevert {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(t.Revision))
	_, _ = h.Write([]byte{0})
	var snapshot bytes.Buffer
	if json.Compact(&snapshot, t.Snapshot) == nil {
		_, _ = h.Write(snapshot.Bytes())
	} else {
		_, _ = h.Write(t.Snapshot)
	}
	return max(h.Sum64(), 1)
}

// VMsPerChunk is how many planned VMs one record of a rollout's VM list
// holds: about 100 bytes each, 200 KB a record, well under NATS' default
// max_payload of 1 MiB.
const VMsPerChunk = 2000

// VMListKey is the KV key of chunk i of the VM list named list in eventID's
// rollout record. The key has dots (the record's has none), so listing the
// records' keys filters the lists out (RecordKeys).
func VMListKey(eventID, list string, chunk int) string {
	return eventID + ".vms." + list + "." + strconv.Itoa(chunk)
}

// RecordKeys is the KV key filter that matches the rollout records alone,
// without their VM lists.
const RecordKeys = "*"

// MarshalRollout encodes a rollout record for the KV bucket.
func MarshalRollout(r Rollout) ([]byte, error) { return json.Marshal(r) }

// UnmarshalRollout decodes a rollout record read from the KV bucket.
func UnmarshalRollout(b []byte) (Rollout, error) {
	var r Rollout
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("events: rollout record: %w", err)
	}
	return r, nil
}

// RolloutKey is the KV key of an event's rollout record. KV keys may hold
// '/', '-', '_', '=' and '.', which covers every event id kvlive makes.
func RolloutKey(eventID string) string { return eventID }
