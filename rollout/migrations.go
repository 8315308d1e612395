package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
)

// Migrations is what the migration budget (in events.BucketBus) says of
// a rollout: how many of its VMs kvlive moved whose live migration has not
// ended, of them how many migrate (Running) and how many wait for
// KubeVirt's turn (Queued), of how many slots held in all, and why live
// moves wait, when they wait for something else than a slot. ToMove are
// the live moves still to come (planned live, no outcome yet), each
// waiting for a slot; Left estimates the time until the last of them and
// of the unfinished migrations ends, at the pace of the migrations ended
// so far (Pace says which), zero before one ended.
type Migrations struct {
	Unfinished int `json:"unfinished"`
	Running    int `json:"running"`
	Queued     int `json:"queued"`
	ToMove     int `json:"toMove"`
	InUse      int `json:"inUse"`
	// Holders name the VM holding each slot in use, with the rollout it
	// was moved by when that is another.
	Holders []string `json:"holders,omitempty"`
	Waiting string   `json:"waiting,omitempty"`
	// Failed names the latest failed migration of the rollout's VMs the
	// applier acted on.
	Failed []string      `json:"failed,omitempty"`
	Left   time.Duration `json:"left,omitempty"`
	Pace   string        `json:"pace,omitempty"`
}

// CountMigrations reads the migration budget into a.Migrations, with the
// time left estimated at now from the verdicts counted in a
// (CountVerdicts first); a bus without the bucket (no applier set it up
// yet) leaves it nil.
func CountMigrations(ctx context.Context, js jetstream.JetStream, a *Account, now time.Time) error {
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
		holder := s.VM.String()
		if s.EventID != a.EventID {
			holder += " (" + events.ShortEventID(s.EventID) + ")"
		}
		m.Holders = append(m.Holders, holder)
		if s.EventID == a.EventID {
			m.Unfinished++
			if s.Migrating != nil {
				m.Running++
			}
			if s.FailedMigration != "" {
				m.Failed = append(m.Failed, s.VM.String()+" ("+s.FailedMigration+")")
			}
		}
	}
	m.Queued = m.Unfinished - m.Running
	slices.Sort(m.Holders)
	m.estimate(a, now)
	a.Migrations = m
	return nil
}

// estimate fills in the live moves to come and the time left: the
// migrations still to end (to move and unfinished) at the pace of the
// rollout's VMs whose verdict is live (each carried by its migration)
// since the rollout was planned.
func (m *Migrations) estimate(a *Account, now time.Time) {
	if a.Phase != PhaseRunning {
		return
	}
	m.ToMove = max(a.Record.Counts[events.ResultLive]-a.Outcomes[events.ResultLive], 0)
	done, left := a.Verdicts[events.ObservedLive], m.ToMove+m.Unfinished
	elapsed := now.Sub(a.Record.PlannedAt)
	if done == 0 || left == 0 || elapsed <= 0 || a.Record.PlannedAt.IsZero() {
		return
	}
	each := elapsed / time.Duration(done)
	m.Left = (each * time.Duration(left)).Round(time.Second)
	m.Pace = fmt.Sprintf("%d live in %v", done, elapsed.Round(time.Second))
}
