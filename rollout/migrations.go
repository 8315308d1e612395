package rollout

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
)

// Migrations is what the migration budget (in events.BucketBus) says of
// a rollout: how many of its VMs kvlive moved whose live migration has not
// ended (running, or queued in KubeVirt), of how many slots held in all,
// and why live moves wait, when they wait for something else than a slot.
type Migrations struct {
	Unfinished int    `json:"unfinished"`
	InUse      int    `json:"inUse"`
	Waiting    string `json:"waiting,omitempty"`
	// Failed names the latest failed migration of the rollout's VMs the
	// applier acted on.
	Failed []string `json:"failed,omitempty"`
}

// CountMigrations reads the migration budget into a.Migrations; a bus
// without the bucket (no applier set it up yet) leaves it nil.
func CountMigrations(ctx context.Context, js jetstream.JetStream, a *Account) error {
	kv, err := js.KeyValue(ctx, events.BucketBus)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	keys, err := kv.ListKeysFiltered(ctx, events.MigrationKeys)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	if err != nil {
		return err
	}
	m := &Migrations{}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if k == events.MigrationWaitKey {
			var w events.MigrationWait
			if json.Unmarshal(e.Value(), &w) == nil {
				m.Waiting = w.Reason + " (since " + w.Since.Format("15:04:05") + ")"
			}
			continue
		}
		var s events.MigrationSlot
		if json.Unmarshal(e.Value(), &s) != nil {
			continue
		}
		m.InUse++
		if s.EventID == a.EventID {
			m.Unfinished++
			if s.FailedMigration != "" {
				m.Failed = append(m.Failed, s.VM.String()+" ("+s.FailedMigration+")")
			}
		}
	}
	a.Migrations = m
	return nil
}
