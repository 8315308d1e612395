package pruner

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
	instancetypeapi "kubevirt.io/api/instancetype"

	"kvlive/events"
	"kvlive/instancetype"
)

// DefaultRetention keeps, per VM and reference, the one revision its pin
// last superseded: what `kvlive rollout undo` moves it back to. Retention
// keeps the newest n superseded revisions, and the last n the pin left as
// kvlive recorded them, which differ once an undo moved a pin back.
const DefaultRetention = 1

// Input is one VM and what is known about it.
type Input struct {
	VM *virtv1.VirtualMachine
	// Owned are the instancetype ControllerRevisions the VM controls.
	Owned []*appsv1.ControllerRevision
	// Started names the revisions the VM's running VMI started from (its
	// start revision's revisionName fields); empty when none runs.
	Started []string
	// Retention is how many superseded revisions per reference are kept.
	Retention int
}

// Candidate is a revision that may go.
type Candidate struct {
	Namespace string `json:"namespace"`
	VM        string `json:"vm"`
	Revision  string `json:"revision"`
	// Object is the instance type or preference it snapshots, at
	// Generation.
	Object     string    `json:"object"`
	Generation int64     `json:"generation"`
	Created    time.Time `json:"created"`
	// UID and ResourceVersion are the deletion's preconditions.
	UID             types.UID `json:"uid"`
	ResourceVersion string    `json:"resourceVersion"`
}

// Superseded lists the revisions in.Owned that may be deleted, oldest
// first. A reference the VM has no pin for, or whose pinned revision is not
// among Owned, gives none: there is nothing to order the others by.
func Superseded(in Input) []Candidate {
	var out []Candidate
	for _, preference := range []bool{false, true} {
		out = append(out, superseded(in, preference)...)
	}
	slices.SortFunc(out, func(a, b Candidate) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Generation, b.Generation), cmp.Compare(a.Revision, b.Revision))
	})
	return out
}

func superseded(in Input, preference bool) []Candidate {
	pin, err := instancetype.PinOf(in.VM, preference)
	if err != nil {
		return nil
	}
	var current *appsv1.ControllerRevision
	var others []*appsv1.ControllerRevision
	for _, cr := range in.Owned {
		switch {
		case isPreference(cr) != preference:
		case cr.Name == pin.Revision:
			current = cr
		case !slices.Contains(in.Started, cr.Name):
			others = append(others, cr)
		}
	}
	if current == nil {
		return nil
	}
	var older []*appsv1.ControllerRevision
	for _, cr := range others {
		if order(cr, current) < 0 {
			older = append(older, cr)
		}
	}
	slices.SortFunc(older, func(a, b *appsv1.ControllerRevision) int { return order(b, a) })
	keep := undoTargets(current, others, in.Retention)
	var out []Candidate
	for i, cr := range older {
		if i < in.Retention || keep[cr.Name] || !instancetype.CreatedByKvlive(cr) || !namedByKubeVirt(in.VM.Name, cr) {
			continue
		}
		out = append(out, candidate(in.VM, cr))
	}
	return out
}

// undoTargets are the last n revisions the pin left, newest first, as
// kvlive recorded on the revisions it made to move it
// (instancetype.SupersedesAnnotation): what undo moves the VM back to.
// Creation order alone misses them once an undo went back to an older
// revision and a later edit moved on from there (gen3, undone to gen2,
// then gen4: the pin left gen2 last, and gen3 is the newer).
func undoTargets(current *appsv1.ControllerRevision, others []*appsv1.ControllerRevision, n int) map[string]bool {
	keep := map[string]bool{}
	for next := current; len(keep) < n; {
		from := next.Annotations[instancetype.SupersedesAnnotation]
		i := slices.IndexFunc(others, func(cr *appsv1.ControllerRevision) bool { return cr.Name == from })
		if i < 0 || keep[from] {
			break
		}
		keep[from], next = true, others[i]
	}
	return keep
}

// order sorts revisions by when they were made: creation time (whole
// seconds), then the object generation they hold.
func order(a, b *appsv1.ControllerRevision) int {
	return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(generation(a), generation(b)))
}

func generation(cr *appsv1.ControllerRevision) int64 {
	g, _ := strconv.ParseInt(cr.Labels[instancetypeapi.ControllerRevisionObjectGenerationLabel], 10, 64)
	return g
}

func isPreference(cr *appsv1.ControllerRevision) bool {
	k := cr.Labels[instancetypeapi.ControllerRevisionObjectKindLabel]
	return k == events.KindPreference || k == events.KindClusterPreference
}

// namedByKubeVirt reports whether cr's name is the one KubeVirt gives the
// VM's snapshot of the object its labels name.
func namedByKubeVirt(vm string, cr *appsv1.ControllerRevision) bool {
	l := cr.Labels
	return cr.Name == vm+"-"+l[instancetypeapi.ControllerRevisionObjectNameLabel]+"-"+l[instancetypeapi.ControllerRevisionObjectVersionLabel]+"-"+
		l[instancetypeapi.ControllerRevisionObjectUIDLabel]+"-"+l[instancetypeapi.ControllerRevisionObjectGenerationLabel]
}

func candidate(vm *virtv1.VirtualMachine, cr *appsv1.ControllerRevision) Candidate {
	ref := events.Ref{Kind: cr.Labels[instancetypeapi.ControllerRevisionObjectKindLabel], Namespace: vm.Namespace,
		Name: cr.Labels[instancetypeapi.ControllerRevisionObjectNameLabel]}
	return Candidate{Namespace: vm.Namespace, VM: vm.Name, Revision: cr.Name, Object: ref.String(), Generation: generation(cr),
		Created: cr.CreationTimestamp.UTC(), UID: cr.UID, ResourceVersion: cr.ResourceVersion}
}
