package events

import (
	"fmt"
	"time"
)

// The migration budget lives in BucketBus, beside the scope claim: what
// the replicas sharing a bus agree on. One key per slot
// (MigrationSlotKey), held by a running VM kvlive moved whose live
// migration has not ended; a slot is taken with a KV create, so every
// replica shares one budget and never more VMs hold it than it has slots.

// MigrationKeys filters the migration budget's keys in BucketBus.
const MigrationKeys = "migrations.>"

// MigrationSlotKey is the key of slot i of the migration budget.
func MigrationSlotKey(i int) string { return fmt.Sprintf("migrations.slot-%d", i) }

// MigrationWaitKey is the key where an applier says why live moves wait
// for something other than a free slot (the KubeVirt CR not fully
// deployed), for rollout status to show; it is deleted once they go on.
const MigrationWaitKey = "migrations.wait"

// MigrationSlot is the VM holding one slot of the migration budget.
type MigrationSlot struct {
	EventID string `json:"eventId"`
	VM      VMRef  `json:"vm"`
	// At is when the slot was taken, just before the VM's pin moved.
	At time.Time `json:"at"`
	// Prior is the VMI's latest migration when the slot was taken: one
	// that ended before the move, never this move's.
	Prior string `json:"prior,omitempty"`
	// VMI is the UID of the VM's VMI when the slot was taken: a VMI of
	// another UID is a new one (the VM restarted), which needs no
	// migration. Empty when none ran, or in a slot of an older kvlive.
	VMI string `json:"vmi,omitempty"`
	// FailedMigration is the latest failed migration of the VM kvlive
	// acted on (paused its rollout for), so it acts once per failure.
	FailedMigration string `json:"failedMigration,omitempty"`
	// FailedAt is when the applier marked FailedMigration, before it
	// paused (or aborted) the rollout and freed the slot: a slot found
	// marked was left between those writes by a crash.
	FailedAt time.Time `json:"failedAt,omitzero"`
	// Migrating is when KubeVirt's migration of the VM started, as an
	// applier saw it: the VM migrates, no longer waits in KubeVirt's
	// queue. A failed migration clears it (the VM waits again).
	Migrating *time.Time `json:"migrating,omitempty"`
	// Taken is the bucket revision the slot was created at, which orders
	// the slots by when they were taken. A slot's first update writes it
	// (its revision until then is its create's); zero in a slot never
	// updated, whose revision is still its create's.
	Taken uint64 `json:"taken,omitempty"`
}

// MigrationWait says why live moves wait, and since when.
type MigrationWait struct {
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
}
