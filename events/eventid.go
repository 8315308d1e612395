package events

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// Prefixes of the ids of events a user asks for rather than the watcher
// emits: a switch request, a replay, a retry, an undo and a restart, each followed by
// a UUID.
var requestedPrefixes = []string{"switch/", "replay/", "retry/", "undo/", "restart/"}

// CheckEventID says why id cannot be the id of any event kvlive makes: a
// change is <kind>/<uid>/<generation> of one of the four instance type and
// preference kinds (EventID), a switch, replay or retry is switch/, replay/
// or retry/ and a UUID. A command acting on an event before it exists
// (pause --ahead) checks the id it is given, so a typo is an error, not a
// record no event will ever meet.
func CheckEventID(id string) error {
	for _, p := range requestedPrefixes {
		if rest, ok := strings.CutPrefix(id, p); ok {
			if _, err := uuid.Parse(rest); err != nil {
				return fmt.Errorf("event id %q: %s is followed by a UUID: %w", id, p, err)
			}
			return nil
		}
	}
	parts := strings.Split(id, "/")
	kinds := []string{KindInstancetype, KindClusterInstancetype, KindPreference, KindClusterPreference}
	switch {
	case len(parts) != 3:
		return fmt.Errorf("event id %q: want KIND/UID/GENERATION, or switch/, replay/, retry/, undo/ or restart/ and a UUID", id)
	case !slices.Contains(kinds, parts[0]):
		return fmt.Errorf("event id %q: %q is not one of %s", id, parts[0], strings.Join(kinds, ", "))
	case parts[1] == "":
		return fmt.Errorf("event id %q: the object's UID is empty", id)
	}
	if g, err := strconv.ParseInt(parts[2], 10, 64); err != nil || g < 1 {
		return fmt.Errorf("event id %q: generation %q: want a positive integer", id, parts[2])
	}
	return nil
}

// CheckAheadID is CheckEventID for an id given ahead of its event (rollout
// pause --ahead), where nothing else tells a typo from an event to come: a
// change event's object UID must also be one the API server gives (a
// UUID).
func CheckAheadID(id string) error {
	if err := CheckEventID(id); err != nil {
		return err
	}
	if parts := strings.Split(id, "/"); len(parts) == 3 {
		if _, err := uuid.Parse(parts[1]); err != nil {
			return fmt.Errorf("event id %q: %q is not an object UID (kubectl get %s NAME -o jsonpath='{.metadata.uid}' prints it)", id, parts[1], parts[0])
		}
	}
	return nil
}

// kubevirtShortNames are KubeVirt's short names of the four kinds (the
// CRDs' shortNames), which an event id's short form begins with.
var kubevirtShortNames = map[string]string{
	KindInstancetype: "vmf", KindClusterInstancetype: "vmcf", KindPreference: "vmp", KindClusterPreference: "vmcp",
}

// shortUID is how many leading characters of a UUID the short form keeps.
const shortUID = 8

// ShortEventID is an event id as a person reads and copies it: its kind as
// KubeVirt's short name and each UUID cut to its first 8 characters, as in
// vmcf/2f6c1a3b/5 or switch/0b5c9e1d. Every command that takes an event id
// takes this form too (MatchesShort), while it names one event.
func ShortEventID(id string) string {
	parts := strings.Split(id, "/")
	for i, p := range parts {
		if short, ok := kubevirtShortNames[p]; ok && i == 0 {
			parts[i] = short
		} else if _, err := uuid.Parse(p); err == nil && len(p) > shortUID {
			parts[i] = p[:shortUID]
		}
	}
	return strings.Join(parts, "/")
}

// MatchesShort reports whether short names id: segment by segment the same,
// the kind's short name for the kind, or at least four leading characters
// of a UUID.
func MatchesShort(id, short string) bool {
	full, cut := strings.Split(id, "/"), strings.Split(short, "/")
	if len(full) != len(cut) {
		return false
	}
	for i := range full {
		switch {
		case full[i] == cut[i]:
		case i == 0 && kubevirtShortNames[full[i]] == cut[i]:
		case len(cut[i]) >= 4 && strings.HasPrefix(full[i], cut[i]) && uuid.Validate(full[i]) == nil:
		default:
			return false
		}
	}
	return true
}
