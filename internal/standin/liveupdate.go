package standin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
)

// VMI annotations where the stand-in keeps what virt-controller keeps in its
// revision-start-vm ControllerRevision: the pins the VMI booted with, and
// the pins it last reconciled.
const (
	AnnotationBootPins    = "standin.kvlive.io/boot-pins"
	AnnotationHandledPins = "standin.kvlive.io/handled-pins"
)

// shape is what the stand-in compares between two generations, read from
// the revisions' JSON.
type shape struct {
	sockets, cores, threads int64
	guest                   *resource.Quantity
	nodeSelector            string
	rest                    string
}

// shapeOf reads a generation as it lands on vm: a preferred value the VM's
// template already sets reaches nothing (virt-api sets the machine type and
// the architecture on every VM).
func shapeOf(vm *virtv1.VirtualMachine, it, pref map[string]any) shape {
	s := shape{sockets: 1, cores: 1, threads: 1}
	vcpus := num(it, "cpu", "guest")
	if vcpus > 1 {
		switch str(pref, "cpu", "preferredCPUTopology") {
		case "cores", "preferCores":
			s.cores = vcpus
		case "threads", "preferThreads":
			s.threads = vcpus
		case "spread", "preferSpread":
			ratio := num(pref, "cpu", "spreadOptions", "ratio")
			if ratio == 0 {
				ratio = num(pref, "preferSpreadSocketToCoreRatio")
			}
			if ratio == 0 {
				ratio = 2
			}
			switch str(pref, "cpu", "spreadOptions", "across") {
			case "CoresThreads":
				s.threads, s.cores = ratio, vcpus/ratio
			case "SocketsCoresThreads":
				s.threads, s.cores, s.sockets = 2, ratio, vcpus/2/ratio
			default:
				s.cores, s.sockets = ratio, vcpus/ratio
			}
		default:
			s.sockets = vcpus
		}
	}
	if g := str(it, "memory", "guest"); g != "" {
		q, err := resource.ParseQuantity(g)
		if err == nil {
			s.guest = &q
		}
	}
	sel, _ := json.Marshal(it["nodeSelector"])
	s.nodeSelector = string(sel)
	ignored := []string{"cpu.preferredCPUTopology", "cpu.spreadOptions", "preferSpreadSocketToCoreRatio", "annotations"}
	if t := vm.Spec.Template; t != nil {
		if t.Spec.Domain.Machine != nil && t.Spec.Domain.Machine.Type != "" {
			ignored = append(ignored, "machine.preferredMachineType")
		}
		if t.Spec.Architecture != "" {
			ignored = append(ignored, "preferredArchitecture")
		}
	}
	rest := map[string]any{"it": without(it, "cpu.guest", "memory.guest", "nodeSelector", "annotations"),
		"pref": without(pref, ignored...)}
	if pct := num(it, "memory", "overcommitPercent"); pct > 0 && s.guest != nil {
		// The VMI's memory request follows guest memory under overcommit,
		// and requests are not live-updatable.
		rest["memoryRequest"] = float64(s.guest.Value()) * (1 - float64(pct)/100)
	}
	b, _ := json.Marshal(rest)
	s.rest = string(b)
	return s
}

// liveUpdate reconciles a running VMI with its VM's current pins, the way
// virt-controller's sync does under LiveUpdate.
func (c *Controller) liveUpdate(ctx context.Context, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) error {
	current := pinnedRevisions(vm)
	boot := vmi.Annotations[AnnotationBootPins]
	if boot == "" {
		// The VMI's start: its pins, and (unless virt-controller started
		// it) the start revision kvlive reads what it started from in.
		var status map[string]any
		if vmi.Status.VirtualMachineRevisionName == "" {
			name, err := c.recordStart(ctx, vm)
			if err != nil {
				return err
			}
			status = map[string]any{"virtualMachineRevisionName": name}
		}
		return c.patchVMI(ctx, vmi, map[string]any{"metadata": annotations(current, current)}, status)
	}
	key := vm.Namespace + "/" + vm.Name
	if vmi.Annotations[AnnotationHandledPins] == current {
		c.reacted(key)
		return nil
	}
	if wait := c.reactAfter(key, current); wait > 0 {
		c.queue.AddAfter(key, wait)
		return nil
	}
	if len(hotConditions(vmi)) > 0 || c.migrating(vmi) {
		// virt-controller refuses a hot-plug while another is in progress
		// ("another CPU hotplug is in progress") and tries again once the
		// migration carrying it ended: the VMI's update brings it back.
		return nil
	}
	bootIT, bootPref, err := c.loadSpecs(ctx, vm.Namespace, boot)
	if err != nil {
		return err
	}
	curIT, curPref, err := c.loadSpecs(ctx, vm.Namespace, current)
	if err != nil {
		return err
	}
	was, now := shapeOf(vm, bootIT, bootPref), shapeOf(vm, curIT, curPref)
	// Like syncRestartRequired, decided afresh on every sync against what
	// the VMI booted with: an earlier RestartRequired holds nothing by
	// itself; it is cleared here and set again below while a cause remains.
	var restart []string
	blocked := false
	switch {
	case c.stageRollout() && was != now:
		restart, blocked = append(restart, "the Stage rollout strategy stages every change"), true
	case was.rest != now.rest || was.cores != now.cores || was.threads != now.threads:
		restart, blocked = append(restart, "a non-live-updatable field was changed in the template spec"), true
	}
	spec, status := map[string]any{}, map[string]any{}
	if !blocked {
		restart = append(restart, c.hotplugCPU(vm, vmi, now, spec, status)...)
		restart = append(restart, c.hotplugMemory(vmi, now, spec, status)...)
		if now.nodeSelector != was.nodeSelector {
			spec["nodeSelector"] = json.RawMessage(now.nodeSelector)
		}
	}
	switch {
	case blocked && hasRestartRequired(vm):
		// syncRestartRequired's UpdateCondition keeps a condition whose
		// status and reason stay: its time and message are the first
		// change's.
		if err := c.syncGeneration(ctx, vm); err != nil {
			return err
		}
	case len(restart) > 0:
		if err := c.setRestartRequired(ctx, vm, strings.Join(restart, "; ")); err != nil {
			return err
		}
	case hasRestartRequired(vm):
		if err := c.clearRestartRequired(ctx, vm); err != nil {
			return err
		}
	default:
		if err := c.syncGeneration(ctx, vm); err != nil {
			return err
		}
	}
	if err := c.patchVMI(ctx, vmi, map[string]any{"metadata": annotations(boot, current), "spec": spec}, status); err != nil {
		return err
	}
	if _, hot := status["conditions"]; hot {
		c.hotplugged(key, current)
	}
	return nil
}

// hotplugCPU follows handleCPUChangeRequest: sockets go up live within
// maxSockets; fewer sockets, more than maxSockets or arm64 need a restart.
func (c *Controller) hotplugCPU(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, now shape, spec, status map[string]any) []string {
	cpu := vmi.Spec.Domain.CPU
	if cpu == nil || now.sockets == int64(cpu.Sockets) {
		return nil
	}
	switch {
	case now.sockets > int64(cpu.MaxSockets):
		return []string{"CPU sockets updated in template spec to a value higher than what's available"}
	case now.sockets < int64(cpu.Sockets):
		return []string{"Reduction of CPU socket count requires a restart"}
	case vm.Spec.Template != nil && vm.Spec.Template.Spec.Architecture == "arm64":
		return []string{"ARM doesn't support CPU hotplug"}
	}
	spec["domain"] = merge(spec["domain"], map[string]any{"cpu": map[string]any{"sockets": now.sockets}})
	addHotCondition(vmi, status, virtv1.VirtualMachineInstanceVCPUChange)
	return nil
}

// hotplugMemory follows handleMemoryHotplugRequest: guest memory changes
// live on a migratable VMI with maxGuest, between guestAtBoot and maxGuest.
func (c *Controller) hotplugMemory(vmi *virtv1.VirtualMachineInstance, now shape, spec, status map[string]any) []string {
	mem := vmi.Spec.Domain.Memory
	if now.guest == nil || mem == nil || mem.Guest == nil || vmi.Status.Memory == nil || now.guest.Cmp(*mem.Guest) == 0 {
		return nil
	}
	migratable := false
	for _, cond := range vmi.Status.Conditions {
		if cond.Type == virtv1.VirtualMachineInstanceIsMigratable && cond.Status == k8scorev1.ConditionTrue {
			migratable = true
		}
	}
	switch {
	case !migratable:
		return []string{"memory updated in template spec. Memory-hotplug is only available for migratable VMs"}
	case mem.MaxGuest == nil:
		return []string{"memory updated in template spec. Memory-hotplug is not available for this VM configuration"}
	case now.guest.Cmp(*mem.MaxGuest) > 0:
		return []string{"memory updated in template spec to a value higher than what's available"}
	case vmi.Status.Memory.GuestAtBoot != nil && now.guest.Cmp(*vmi.Status.Memory.GuestAtBoot) < 0:
		return []string{"memory updated in template spec to a value lower than what the VM started with"}
	}
	spec["domain"] = merge(spec["domain"], map[string]any{"memory": map[string]any{"guest": now.guest.String()}})
	addHotCondition(vmi, status, virtv1.VirtualMachineInstanceMemoryChange)
	return nil
}

// addHotCondition sets a hot-plug condition among the VMI's conditions in
// the status patch, as the VMI controller does once the spec differs from
// what the guest runs; the change reaches the guest on a migration's
// target (migrate.go).
func addHotCondition(vmi *virtv1.VirtualMachineInstance, status map[string]any, t virtv1.VirtualMachineInstanceConditionType) {
	conds, _ := status["conditions"].([]virtv1.VirtualMachineInstanceCondition)
	if conds == nil {
		conds = append(conds, vmi.Status.Conditions...)
	}
	for _, c := range conds {
		if c.Type == t {
			status["conditions"] = conds
			return
		}
	}
	status["conditions"] = append(conds, virtv1.VirtualMachineInstanceCondition{Type: t, Status: k8scorev1.ConditionTrue, LastTransitionTime: metav1.Now()})
}

// migrating reports whether the stand-in runs a migration of the VMI.
func (c *Controller) migrating(vmi *virtv1.VirtualMachineInstance) bool {
	c.mig.mu.Lock()
	defer c.mig.mu.Unlock()
	return c.mig.running[vmi.Namespace+"/"+vmi.Name] != nil
}

func (c *Controller) setRestartRequired(ctx context.Context, vm *virtv1.VirtualMachine, message string) error {
	return c.writeConditions(ctx, vm, append(otherConditions(vm), virtv1.VirtualMachineCondition{
		Type: virtv1.VirtualMachineRestartRequired, Status: k8scorev1.ConditionTrue,
		LastTransitionTime: metav1.Now(), Message: message,
	}))
}

func (c *Controller) clearRestartRequired(ctx context.Context, vm *virtv1.VirtualMachine) error {
	return c.writeConditions(ctx, vm, otherConditions(vm))
}

// otherConditions are vm's conditions but RestartRequired.
func otherConditions(vm *virtv1.VirtualMachine) []virtv1.VirtualMachineCondition {
	conds := []virtv1.VirtualMachineCondition{}
	for _, cond := range vm.Status.Conditions {
		if cond.Type != virtv1.VirtualMachineRestartRequired {
			conds = append(conds, cond)
		}
	}
	return conds
}

// syncGeneration writes status.desiredGeneration as virt-controller's
// syncGenerationInfo does on a sync of a VM with a VMI, when it changed.
func (c *Controller) syncGeneration(ctx context.Context, vm *virtv1.VirtualMachine) error {
	if vm.Status.DesiredGeneration == vm.Generation {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"desiredGeneration": vm.Generation}})
	if _, err := c.cfg.Virt.KubevirtV1().VirtualMachines(vm.Namespace).Patch(ctx, vm.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("standin: desiredGeneration of %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	return nil
}

// writeConditions writes the VM's conditions and, as virt-controller's
// status update does in the same write, its desiredGeneration.
func (c *Controller) writeConditions(ctx context.Context, vm *virtv1.VirtualMachine, conds []virtv1.VirtualMachineCondition) error {
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds, "desiredGeneration": vm.Generation}})
	if _, err := c.cfg.Virt.KubevirtV1().VirtualMachines(vm.Namespace).Patch(ctx, vm.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("standin: RestartRequired on %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	return nil
}

// patchVMI writes the VMI in one merge patch: KubeVirt's VMI CRD has no
// status subresource (virt-handler writes status with the object), so spec,
// status and annotations travel together.
func (c *Controller) patchVMI(ctx context.Context, vmi *virtv1.VirtualMachineInstance, main, status map[string]any) error {
	if len(status) > 0 {
		main["status"] = status
	}
	patch, _ := json.Marshal(main)
	if _, err := c.cfg.Virt.KubevirtV1().VirtualMachineInstances(vmi.Namespace).Patch(ctx, vmi.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("standin: VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return nil
}

func annotations(boot, handled string) map[string]any {
	return map[string]any{"annotations": map[string]string{AnnotationBootPins: boot, AnnotationHandledPins: handled}}
}

func hasRestartRequired(vm *virtv1.VirtualMachine) bool {
	for _, cond := range vm.Status.Conditions {
		if cond.Type == virtv1.VirtualMachineRestartRequired && cond.Status == k8scorev1.ConditionTrue {
			return true
		}
	}
	return false
}

// Small helpers over decoded JSON.

func lookup(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

func num(m map[string]any, path ...string) int64 {
	f, _ := lookup(m, path...).(float64)
	return int64(f)
}

func str(m map[string]any, path ...string) string {
	s, _ := lookup(m, path...).(string)
	return s
}

// without returns a copy of m minus the dotted paths (one level deep).
func without(m map[string]any, paths ...string) map[string]any {
	if m == nil {
		return nil
	}
	b, _ := json.Marshal(m)
	var cp map[string]any
	_ = json.Unmarshal(b, &cp)
	for _, p := range paths {
		top, sub, nested := strings.Cut(p, ".")
		if !nested {
			delete(cp, top)
		} else if inner, ok := cp[top].(map[string]any); ok {
			delete(inner, sub)
		}
	}
	return cp
}

func merge(into any, add map[string]any) map[string]any {
	m, _ := into.(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	for k, v := range add {
		m[k] = v
	}
	return m
}
