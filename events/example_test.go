package events_test

import (
	"fmt"
	"time"

	"kvlive/events"
)

// A change event is wrapped in a CloudEvents envelope whose id is also the
// message's Nats-Msg-Id, so a re-emit of the same generation is dropped by
// the stream.
func ExampleEncode() {
	change := events.Changed{
		Object:        events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.large"},
		UID:           "3c3c3c3c",
		Generation:    5,
		OldGeneration: 4,
		NewSpec:       []byte(`{"cpu":{"guest":3},"memory":{"guest":"6Gi"}}`),
		ObservedAt:    time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
	}
	id := events.EventID(change.Object.Kind, change.UID, change.Generation)
	body, err := events.Encode(events.TypeInstancetypeChanged, id, "kvlive/watcher", change.Object.String(), change.ObservedAt, &change)
	if err != nil {
		panic(err)
	}
	msg := events.NewMsg(events.ChangedSubject(change.Object.Kind), id, events.TypeInstancetypeChanged, body)
	fmt.Println(msg.Subject)
	fmt.Println(msg.Header.Get("Nats-Msg-Id"))

	var decoded events.Changed
	if _, err := events.Decode(msg.Data, events.TypeInstancetypeChanged, &decoded); err != nil {
		panic(err)
	}
	fmt.Println(decoded.Object, decoded.OldGeneration, "→", decoded.Generation)
	// Output:
	// kvlive.events.changed.virtualmachineclusterinstancetype
	// VirtualMachineClusterInstancetype/3c3c3c3c/5
	// clusterinstancetype/u1.large 4 → 5
}
