package pruner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/instancetype"
	"kvlive/internal/kube"
)

// Source is what pruning reads: the process's informer cache
// (*kube.Cache).
type Source interface {
	VMs(namespace string, selector labels.Selector) []*virtv1.VirtualMachine
	VM(namespace, name string) *virtv1.VirtualMachine
	VMI(namespace, name string) *virtv1.VirtualMachineInstance
	OwnedRevisions(uid string) []*appsv1.ControllerRevision
	StartedSpec(vmi *virtv1.VirtualMachineInstance) (*virtv1.VirtualMachineSpec, error)
}

// Problem is a VM whose revisions were left alone, and why.
type Problem struct {
	Namespace string `json:"namespace"`
	VM        string `json:"vm"`
	Reason    string `json:"reason"`
}

// Find lists what may be deleted across the cached VMs of namespace (""
// for all), oldest first per VM, and the VMs it could not judge.
func Find(src Source, namespace string, retention int) ([]Candidate, []Problem) {
	var out []Candidate
	var problems []Problem
	for _, vm := range src.VMs(namespace, nil) {
		in, err := InputOf(src, vm, retention)
		if err != nil {
			problems = append(problems, Problem{Namespace: vm.Namespace, VM: vm.Name, Reason: err.Error()})
			continue
		}
		out = append(out, Superseded(in)...)
	}
	return out, problems
}

// InputOf gathers what Superseded needs about vm from src: the revisions it
// owns and, while its VMI runs and some revision could go, the revisions it
// started from.
func InputOf(src Source, vm *virtv1.VirtualMachine, retention int) (Input, error) {
	in := Input{VM: vm, Owned: src.OwnedRevisions(string(vm.UID)), Retention: retention}
	if !slices.ContainsFunc(in.Owned, instancetype.CreatedByKvlive) || len(Superseded(in)) == 0 {
		// Nothing could go, whatever the VMI started from: nothing more
		// to read (a start revision is a read of the API server).
		return Input{VM: vm, Retention: retention}, nil
	}
	vmi := src.VMI(vm.Namespace, vm.Name)
	if vmi == nil || vmi.IsFinal() {
		return in, nil
	}
	if vmi.Status.VirtualMachineRevisionName == "" {
		return in, fmt.Errorf("the running VMI names no start revision, so what it started from is unknown")
	}
	spec, err := src.StartedSpec(vmi)
	if err != nil {
		return in, err
	}
	if m := spec.Instancetype; m != nil && m.RevisionName != "" {
		in.Started = append(in.Started, m.RevisionName)
	}
	if m := spec.Preference; m != nil && m.RevisionName != "" {
		in.Started = append(in.Started, m.RevisionName)
	}
	return in, nil
}

// Deleted is what Prune did with one VM's candidates.
type Deleted struct {
	// Revisions were deleted; Kept are candidates the VM as read from the
	// API server no longer lets go (its pin moved since the cache saw it).
	Revisions []Candidate
	Kept      []Candidate
}

// Prune deletes cands, all of one VM, after reading the VM from the API
// server and judging again with it; each delete names the revision's UID
// and resourceVersion. A revision already gone counts as deleted.
func Prune(ctx context.Context, c kube.Clients, src Source, cands []Candidate, retention int) (Deleted, error) {
	var d Deleted
	if len(cands) == 0 {
		return d, nil
	}
	ns, name := cands[0].Namespace, cands[0].VM
	vm, err := c.Virt.KubevirtV1().VirtualMachines(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		d.Kept = cands // the VM is gone: garbage collection takes what it owned
		return d, nil
	}
	if err != nil {
		return d, fmt.Errorf("pruner: get VM %s/%s: %w", ns, name, err)
	}
	in, err := InputOf(src, vm, retention)
	if err != nil {
		return d, fmt.Errorf("pruner: VM %s/%s: %w", ns, name, err)
	}
	still := map[types.UID]bool{}
	for _, c := range Superseded(in) {
		still[c.UID] = true
	}
	crs := c.Kube.AppsV1().ControllerRevisions(ns)
	for _, cand := range cands {
		if !still[cand.UID] {
			d.Kept = append(d.Kept, cand)
			continue
		}
		uid, rv := cand.UID, cand.ResourceVersion
		err := crs.Delete(ctx, cand.Revision, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		switch {
		case err == nil || apierrors.IsNotFound(err):
			d.Revisions = append(d.Revisions, cand)
		case apierrors.IsConflict(err):
			d.Kept = append(d.Kept, cand) // changed since read: judged again next time
		default:
			return d, fmt.Errorf("pruner: delete ControllerRevision %s/%s: %w", ns, cand.Revision, err)
		}
	}
	return d, nil
}

// PruneAll prunes cands, as Find lists them, VM by VM (Prune), workers VMs
// at once. It returns every VM's deleted and kept revisions, the deleted
// ones by namespace, VM and age, and the VMs' errors joined.
func PruneAll(ctx context.Context, c kube.Clients, src Source, cands []Candidate, retention, workers int) (Deleted, error) {
	var (
		mu   sync.Mutex
		all  Deleted
		errs []error
		g    errgroup.Group
	)
	g.SetLimit(max(workers, 1))
	for _, vm := range byVM(cands) {
		g.Go(func() error {
			d, err := Prune(ctx, c, src, vm, retention)
			mu.Lock()
			defer mu.Unlock()
			all.Revisions, all.Kept = append(all.Revisions, d.Revisions...), append(all.Kept, d.Kept...)
			errs = append(errs, err)
			return nil
		})
	}
	_ = g.Wait() // every VM's error is in errs
	slices.SortFunc(all.Revisions, func(a, b Candidate) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.VM, b.VM), a.Created.Compare(b.Created))
	})
	return all, errors.Join(errs...)
}

// byVM groups candidates by VM, in the order they came.
func byVM(cands []Candidate) [][]Candidate {
	var out [][]Candidate
	index := map[string]int{}
	for _, c := range cands {
		key := c.Namespace + "/" + c.VM
		i, ok := index[key]
		if !ok {
			i = len(out)
			index[key] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], c)
	}
	return out
}
