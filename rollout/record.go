package rollout

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/bus"
)

// Record reads the planner's rollout record of eventID; false when it has
// recorded none (yet), as the bucket's leader says, or the id is no key
// kvlive ever wrote.
func Record(ctx context.Context, js jetstream.JetStream, eventID string) (events.Rollout, bool, error) {
	kv, err := js.KeyValue(ctx, events.BucketRollouts)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return events.Rollout{}, false, nil
	}
	if err != nil {
		return events.Rollout{}, false, fmt.Errorf("rollout: kv %s: %w", events.BucketRollouts, err)
	}
	body, ok, err := getAtLeaderIfMissing(ctx, js, kv, events.BucketRollouts, events.RolloutKey(eventID))
	switch {
	case errors.Is(err, jetstream.ErrInvalidKey) || err == nil && !ok:
		return events.Rollout{}, false, nil
	case err != nil:
		return events.Rollout{}, false, fmt.Errorf("rollout: record of %s: %w", eventID, err)
	}
	r, err := events.UnmarshalRollout(body)
	if err != nil {
		return r, false, fmt.Errorf("rollout: record of %s: %w", eventID, err)
	}
	return r, true, nil
}

// Create stores rec, with vms as the VMs it planned, as eventID's rollout
// record, unless the event already has one: the first planning of an event
// is its record, and a redelivered or retried event goes by it. It returns
// the record that stands and whether this call wrote it.
//
// The VM list goes first, under a name of its own, and the record naming
// it last, created only if absent: the record is the commit point, so a
// planning that loses the race (another replica, an earlier delivery)
// leaves only an unnamed list behind, which it deletes.
func Create(ctx context.Context, js jetstream.JetStream, rec events.Rollout, vms []events.PlannedVM) (events.Rollout, bool, error) {
	if stood, ok, err := Record(ctx, js, rec.EventID); err != nil || ok {
		return stood, false, err
	}
	kv, err := js.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		return rec, false, fmt.Errorf("rollout: kv %s: %w", events.BucketRollouts, err)
	}
	var name [8]byte
	_, _ = rand.Read(name[:])
	rec.VMList, rec.VMChunks = hex.EncodeToString(name[:]), 0
	for chunk := range slices.Chunk(vms, events.VMsPerChunk) {
		body, err := json.Marshal(chunk)
		if err != nil {
			return rec, false, err
		}
		if _, err := kv.Put(ctx, events.VMListKey(rec.EventID, rec.VMList, rec.VMChunks), body); err != nil {
			return rec, false, fmt.Errorf("rollout: record the VMs of %s: %w", rec.EventID, err)
		}
		rec.VMChunks++
	}
	body, err := events.MarshalRollout(rec)
	if err != nil {
		return rec, false, err
	}
	_, err = kv.Create(ctx, events.RolloutKey(rec.EventID), body)
	if err == nil {
		return rec, true, nil
	}
	if !events.Conflict(err) {
		return rec, false, fmt.Errorf("rollout: record %s: %w", rec.EventID, err)
	}
	for i := range rec.VMChunks {
		_ = kv.Purge(ctx, events.VMListKey(rec.EventID, rec.VMList, i))
	}
	stood, ok, err := Record(ctx, js, rec.EventID)
	if err == nil && !ok {
		err = fmt.Errorf("rollout: record %s: created meanwhile, then gone", rec.EventID)
	}
	return stood, false, err
}

// getAtLeaderIfMissing reads key of kv (bucket's); a key the read misses is
// read again at the bucket's leader (bus.KeyAtLeader), since on a
// replicated bucket the read may have been answered by a replica behind
// it, and a record and its VM list are read as soon as a plan naming them
// comes. ok is false when the leader holds no value either.
func getAtLeaderIfMissing(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, bucket, key string) (body []byte, ok bool, err error) {
	entry, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return bus.KeyAtLeader(ctx, js, bucket, key)
	case err != nil:
		return nil, false, err
	}
	return entry.Value(), true, nil
}

// PlannedVMs reads the VMs rec's rollout planned, in plan order; ok is
// false for a record written before kvlive kept the list.
func PlannedVMs(ctx context.Context, js jetstream.JetStream, rec events.Rollout) (vms []events.PlannedVM, ok bool, err error) {
	if rec.VMList == "" {
		return nil, false, nil
	}
	kv, err := js.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		return nil, false, fmt.Errorf("rollout: kv %s: %w", events.BucketRollouts, err)
	}
	for i := range rec.VMChunks {
		body, found, err := getAtLeaderIfMissing(ctx, js, kv, events.BucketRollouts, events.VMListKey(rec.EventID, rec.VMList, i))
		if err == nil && !found {
			err = jetstream.ErrKeyNotFound
		}
		if err != nil {
			return nil, false, fmt.Errorf("rollout: the VMs of %s (%d of %d): %w", rec.EventID, i+1, rec.VMChunks, err)
		}
		var chunk []events.PlannedVM
		if err := json.Unmarshal(body, &chunk); err != nil {
			return nil, false, fmt.Errorf("rollout: the VMs of %s (%d of %d): %w", rec.EventID, i+1, rec.VMChunks, err)
		}
		vms = append(vms, chunk...)
	}
	if len(vms) != rec.Planned {
		return nil, false, fmt.Errorf("rollout: the record of %s lists %d VMs, it planned %d", rec.EventID, len(vms), rec.Planned)
	}
	return vms, true, nil
}

// ResolveEventID expands a unique prefix of a recorded event id to the id,
// so a user need not type 72 characters: an id with a rollout record is
// itself, a prefix of exactly one recorded id is that id, and so is the
// short form tables show (vmcf/2f6c1a3b/5) of exactly one; a prefix or
// short form of several is an error listing some. Anything else comes back
// unchanged, for the caller to report as unknown.
func ResolveEventID(ctx context.Context, js jetstream.JetStream, arg string) (string, error) {
	if _, ok, err := Record(ctx, js, arg); err != nil || ok {
		return arg, err
	}
	matches, err := EventIDs(ctx, js, arg)
	if err != nil {
		return arg, err
	}
	if len(matches) == 0 && strings.Contains(arg, "/") {
		// The short form tables show (events.ShortEventID).
		all, err := EventIDs(ctx, js, "")
		if err != nil {
			return arg, err
		}
		for _, id := range all {
			if events.MatchesShort(id, arg) {
				matches = append(matches, id)
			}
		}
	}
	switch len(matches) {
	case 0:
		return arg, nil
	case 1:
		return matches[0], nil
	}
	shown := matches[:min(len(matches), 3)]
	return arg, fmt.Errorf("event id %q is ambiguous: %d events start with it (%s…)", arg, len(matches), strings.Join(shown, ", "))
}

// EventIDs lists, sorted, the ids of the events with a rollout record that
// start with prefix.
func EventIDs(ctx context.Context, js jetstream.JetStream, prefix string) ([]string, error) {
	kv, err := js.KeyValue(ctx, events.BucketRollouts)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rollout: kv %s: %w", events.BucketRollouts, err)
	}
	keys, err := kv.ListKeysFiltered(ctx, events.RecordKeys)
	if err != nil {
		return nil, fmt.Errorf("rollout: kv %s: %w", events.BucketRollouts, err)
	}
	var ids []string
	for key := range keys.Keys() {
		if strings.HasPrefix(key, prefix) {
			ids = append(ids, key)
		}
	}
	slices.Sort(ids)
	return ids, nil
}
