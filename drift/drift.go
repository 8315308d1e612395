package drift

import (
	"cmp"
	"fmt"
	"iter"
	"slices"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	virtv1 "kubevirt.io/api/core/v1"
	instancetypeapi "kubevirt.io/api/instancetype"

	"kvlive/events"
	"kvlive/instancetype"
)

// Source is what drift reads: the process's informer cache
// (*kube.Cache).
type Source interface {
	// VMsWithoutTemplates yields the cached VMs of namespace ("" for all)
	// that selector (nil for all) matches, one at a time and without their
	// templates, which Measure does not read; a VM yielded holds until the
	// next one comes.
	VMsWithoutTemplates(namespace string, selector labels.Selector) iter.Seq[*virtv1.VirtualMachine]
	// VMIStatus returns the status of VM namespace/name's cached VMI, and
	// false when it has none.
	VMIStatus(namespace, name string) (virtv1.VirtualMachineInstanceStatus, bool)
	// RevisionLabels returns a cached instancetype ControllerRevision's
	// labels.
	RevisionLabels(namespace, name string) (map[string]string, bool)
	// Object returns the live instance type or preference ref names, or nil.
	Object(ref events.Ref) any
}

// Filter narrows what Measure counts.
type Filter struct {
	// Object, when set, is the one instance type or preference to report.
	Object *events.Ref
	// Namespace ("" for all) and Selector (nil for all) choose the VMs.
	Namespace string
	Selector  labels.Selector
	// CountsOnly leaves each row's Members empty: what a metrics scrape
	// needs, without a VM struct per VM.
	CountsOnly bool
}

// State is where one VM's pin stands against its object's latest
// generation.
type State string

// The states of a VM's pin.
const (
	// StateLatest: pinned to the object's current generation.
	StateLatest State = "latest"
	// StateBehind: pinned to an older generation of the same object.
	StateBehind State = "behind"
	// StateUnpinned: KubeVirt has not pinned the reference yet; it pins
	// the generation current when it does.
	StateUnpinned State = "unpinned"
	// StateUnknown: the pin cannot be compared (its revision is gone, or
	// it is of a deleted object of the same name, or the object is gone);
	// Reason says which. Counted as behind: nothing shows it is current.
	StateUnknown State = "unknown"
)

// VM is one VM's standing against one object it references.
type VM struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	State     State  `json:"state"`
	// Revision is the ControllerRevision the VM is pinned to.
	Revision string `json:"revision,omitempty"`
	// Generation is the object generation the revision holds; Lag is how
	// many generations the object moved on since.
	Generation      int64 `json:"generation,omitempty"`
	Lag             int64 `json:"lag,omitempty"`
	RestartRequired bool  `json:"restartRequired,omitempty"`
	// HotplugPending: virt-controller hot-plugged CPU or memory into the
	// running VMI's spec, and the change waits for the live migration
	// that brings it to the guest (queued in KubeVirt, or migrating).
	HotplugPending bool   `json:"hotplugPending,omitempty"`
	Stopped        bool   `json:"stopped,omitempty"`
	Reason         string `json:"reason,omitempty"`
}

// Row is one instance type's or preference's drift across the VMs that
// reference it.
type Row struct {
	Object events.Ref `json:"object"`
	// Generation is the object's current generation; Missing says the
	// object does not exist (VMs still reference it).
	Generation int64 `json:"generation,omitempty"`
	Missing    bool  `json:"missing,omitempty"`
	Total      int   `json:"total"`
	Latest     int   `json:"latest"`
	Behind     int   `json:"behind"`
	Unpinned   int   `json:"unpinned"`
	Unknown    int   `json:"unknown"`
	// MaxLag is the most generations any VM lags; Lags counts the behind
	// VMs by how many generations they lag.
	MaxLag          int64         `json:"maxLag"`
	Lags            map[int64]int `json:"lags,omitempty"`
	RestartRequired int           `json:"restartRequired"`
	HotplugPending  int           `json:"hotplugPending"`
	Stopped         int           `json:"stopped"`
	// Members are the VMs counted, by namespace and name.
	Members []VM `json:"vms,omitempty"`
}

// NotLatest is how many VMs are known not to run the object's latest
// generation once they boot: behind or unknown (kvlive_vms_behind).
func (r Row) NotLatest() int { return r.Behind + r.Unknown }

// Measure counts, per object the filtered VMs reference, where their pins
// stand. Rows are sorted by object; a VM referencing an instance type and
// a preference is counted under both.
func Measure(src Source, f Filter) []Row {
	// tallies are by index key, which refs written differently share;
	// byRef finds a ref's without making its key for every VM.
	tallies, byRef := map[string]*tally{}, map[events.Ref]*tally{}
	for vm := range src.VMsWithoutTemplates(f.Namespace, f.Selector) {
		vmi, running := src.VMIStatus(vm.Namespace, vm.Name)
		for _, preference := range []bool{false, true} {
			ref, ok := instancetype.RefOf(vm, preference)
			if !ok || (f.Object != nil && ref.Key() != f.Object.Key()) {
				continue
			}
			t := byRef[ref]
			if t == nil {
				if t = tallies[ref.Key()]; t == nil {
					t = newTally(src, ref)
					t.countsOnly = f.CountsOnly
					tallies[ref.Key()] = t
				}
				byRef[ref] = t
			}
			t.add(standing(src, vm, vmi, running, preference, t))
		}
	}
	out := make([]Row, 0, len(tallies))
	for _, t := range tallies {
		slices.SortFunc(t.Members, func(a, b VM) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
		out = append(out, t.Row)
	}
	slices.SortFunc(out, func(a, b Row) int { return cmp.Compare(a.Object.String(), b.Object.String()) })
	return out
}

// tally is a Row being counted, with the UID of the live object it
// reports ("" when missing).
type tally struct {
	Row
	uid        string
	countsOnly bool
}

func newTally(src Source, ref events.Ref) *tally {
	t := &tally{Row: Row{Object: ref}}
	if m, ok := src.Object(ref).(metav1.Object); ok {
		t.Generation, t.uid = m.GetGeneration(), string(m.GetUID())
	} else {
		t.Missing = true
	}
	return t
}

// standing reads one VM's pin of one reference against row's object,
// with its VMI's status when it is running.
func standing(src Source, vm *virtv1.VirtualMachine, status virtv1.VirtualMachineInstanceStatus, running, preference bool, row *tally) VM {
	vmi := virtv1.VirtualMachineInstance{Status: status}
	v := VM{Namespace: vm.Namespace, Name: vm.Name, Stopped: !running || vmi.IsFinal()}
	_, v.RestartRequired = instancetype.RestartRequired(vm)
	v.HotplugPending = !v.Stopped && len(instancetype.HotplugPending(&vmi)) > 0
	pin, err := instancetype.PinOf(vm, preference)
	if err != nil {
		v.State, v.Reason = StateUnpinned, err.Error()
		return v
	}
	v.Revision = pin.Revision
	revisionLabels, ok := src.RevisionLabels(vm.Namespace, pin.Revision)
	switch {
	case !ok:
		v.State, v.Reason = StateUnknown, fmt.Sprintf("pinned ControllerRevision %s/%s not found", vm.Namespace, pin.Revision)
		return v
	case row.Missing:
		v.State, v.Reason = StateUnknown, row.Object.String()+" does not exist"
		return v
	}
	uid := revisionLabels[instancetypeapi.ControllerRevisionObjectUIDLabel]
	v.Generation, _ = strconv.ParseInt(revisionLabels[instancetypeapi.ControllerRevisionObjectGenerationLabel], 10, 64)
	switch {
	case uid != "" && uid != row.uid:
		v.State, v.Reason = StateUnknown, fmt.Sprintf("pinned to a deleted %s of the same name (uid %s)", row.Object, uid)
	case v.Generation == 0:
		v.State, v.Reason = StateUnknown, "revision "+pin.Revision+" names no object generation"
	case v.Generation >= row.Generation:
		v.State = StateLatest
	default:
		v.State, v.Lag = StateBehind, row.Generation-v.Generation
	}
	return v
}

func (r *tally) add(v VM) {
	r.Total++
	if !r.countsOnly {
		r.Members = append(r.Members, v)
	}
	if v.RestartRequired {
		r.RestartRequired++
	}
	if v.Stopped {
		r.Stopped++
	}
	if v.HotplugPending {
		r.HotplugPending++
	}
	switch v.State {
	case StateLatest:
		r.Latest++
	case StateBehind:
		r.Behind++
		r.MaxLag = max(r.MaxLag, v.Lag)
		if r.Lags == nil {
			r.Lags = map[int64]int{}
		}
		r.Lags[v.Lag]++
	case StateUnpinned:
		r.Unpinned++
	case StateUnknown:
		r.Unknown++
	}
}
