package standin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
)

// matcher is a VM's reference to an instance type or preference.
type matcher struct {
	family               string // "instancetype" or "preference"
	name, kind, revision string
	status               *virtv1.InstancetypeStatusRef
}

func matchers(vm *virtv1.VirtualMachine) []matcher {
	var ms []matcher
	if it := vm.Spec.Instancetype; it != nil && it.Name != "" {
		ms = append(ms, matcher{"instancetype", it.Name, it.Kind, it.RevisionName, vm.Status.InstancetypeRef})
	}
	if p := vm.Spec.Preference; p != nil && p.Name != "" {
		ms = append(ms, matcher{"preference", p.Name, p.Kind, p.RevisionName, vm.Status.PreferenceRef})
	}
	return ms
}

// ensurePins snapshots and pins every reference the VM's status does not
// pin yet, as pkg/instancetype/revision/store.go does: a name or kind that
// differs from the status clears the pin; a spec revisionName wins.
func (c *Controller) ensurePins(ctx context.Context, vm *virtv1.VirtualMachine) (bool, error) {
	status := map[string]any{}
	for _, m := range matchers(vm) {
		pinned := m.status != nil && m.status.Name == m.name && m.status.Kind == m.kind && m.status.ControllerRevisionRef != nil
		want := ""
		switch {
		case m.revision != "":
			if pinned && m.status.ControllerRevisionRef.Name == m.revision {
				continue
			}
			want = m.revision
		case pinned:
			continue
		default:
			rev, err := c.snapshot(ctx, vm, m)
			if err != nil {
				return false, err
			}
			want = rev
		}
		status[m.family+"Ref"] = virtv1.InstancetypeStatusRef{Name: m.name, Kind: m.kind, ControllerRevisionRef: &virtv1.ControllerRevisionRef{Name: want}}
	}
	if len(status) == 0 {
		return false, nil
	}
	patch, _ := json.Marshal(map[string]any{"status": status})
	_, err := c.cfg.Virt.KubevirtV1().VirtualMachines(vm.Namespace).Patch(ctx, vm.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return false, fmt.Errorf("standin: pin %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	return true, nil
}

// snapshot stores the referenced object's current generation for vm.
func (c *Controller) snapshot(ctx context.Context, vm *virtv1.VirtualMachine, m matcher) (string, error) {
	obj, err := c.getObject(ctx, vm.Namespace, m)
	if err != nil {
		return "", err
	}
	rev, err := newRevision(vm, obj)
	if err != nil {
		return "", err
	}
	_, err = c.cfg.Kube.AppsV1().ControllerRevisions(vm.Namespace).Create(ctx, rev, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("standin: snapshot for %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	return rev.Name, nil
}

func (c *Controller) getObject(ctx context.Context, namespace string, m matcher) (runtime.Object, error) {
	it := c.cfg.Virt.InstancetypeV1beta1()
	kind := strings.ToLower(m.kind)
	get := metav1.GetOptions{}
	switch {
	case m.family == "instancetype" && strings.HasPrefix(kind, "virtualmachineinstancetype"):
		return it.VirtualMachineInstancetypes(namespace).Get(ctx, m.name, get)
	case m.family == "instancetype":
		return it.VirtualMachineClusterInstancetypes().Get(ctx, m.name, get)
	case strings.HasPrefix(kind, "virtualmachinepreference"):
		return it.VirtualMachinePreferences(namespace).Get(ctx, m.name, get)
	default:
		return it.VirtualMachineClusterPreferences().Get(ctx, m.name, get)
	}
}

// pinnedRevisions is the pair of revision names a VM is pinned to, as one
// string the VMI annotations can hold.
func pinnedRevisions(vm *virtv1.VirtualMachine) string {
	var it, pref string
	if r := vm.Status.InstancetypeRef; r != nil && r.ControllerRevisionRef != nil {
		it = r.ControllerRevisionRef.Name
	}
	if s := vm.Spec.Instancetype; s != nil && s.RevisionName != "" {
		it = s.RevisionName
	}
	if r := vm.Status.PreferenceRef; r != nil && r.ControllerRevisionRef != nil {
		pref = r.ControllerRevisionRef.Name
	}
	if s := vm.Spec.Preference; s != nil && s.RevisionName != "" {
		pref = s.RevisionName
	}
	return it + "," + pref
}

// loadSpecs reads the instance type and preference specs of a pin pair.
func (c *Controller) loadSpecs(ctx context.Context, namespace, pins string) (it, pref map[string]any, err error) {
	names := strings.SplitN(pins, ",", 2)
	load := func(name string) (map[string]any, error) {
		if name == "" {
			return nil, nil
		}
		cr, err := c.cfg.Kube.AppsV1().ControllerRevisions(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("standin: revision %s/%s: %w", namespace, name, err)
		}
		raw := cr.Data.Raw
		if len(raw) == 0 && cr.Data.Object != nil {
			raw, _ = json.Marshal(cr.Data.Object)
		}
		var obj struct {
			Spec map[string]any `json:"spec"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, fmt.Errorf("standin: revision %s/%s: %w", namespace, name, err)
		}
		return obj.Spec, nil
	}
	if it, err = load(names[0]); err != nil {
		return nil, nil, err
	}
	if len(names) > 1 {
		pref, err = load(names[1])
	}
	return it, pref, err
}
