package demo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/schollz/progressbar/v3"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/internal/standin"
	"kvlive/rollout"
)

// stepResult is one rollout's outcomes, checked against the fleet.
type stepResult struct {
	title      string
	progress   rollout.Progress
	reached    int
	mismatches []string
	// account is kvlive's record of the rollout with KubeVirt's verdicts
	// counted, once every moved VM has one.
	account rollout.Account
}

// waitPinned waits for the stand-in to pin every VM and record every
// running VMI's boot pins, and for the watcher to record every instance
// type, so the demo's edit is a change the watcher can see.
func (e *env) waitPinned(ctx context.Context) error {
	vms := e.clients.Virt.KubevirtV1().VirtualMachines("")
	vmis := e.clients.Virt.KubevirtV1().VirtualMachineInstances("")
	err := poll(ctx, 2*time.Minute, "waiting for the stand-in to pin the fleet", func() (bool, error) {
		list, err := vms.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, vm := range list.Items {
			if r := vm.Status.InstancetypeRef; r == nil || r.ControllerRevisionRef == nil {
				return false, nil
			}
		}
		running, err := vmis.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, vmi := range running.Items {
			if vmi.Annotations[standin.AnnotationBootPins] == "" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	kv, err := e.js.KeyValue(ctx, events.BucketGenerations)
	if err != nil {
		return err
	}
	return poll(ctx, time.Minute, "waiting for the watcher", func() (bool, error) {
		keys, err := kv.Keys(ctx)
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return false, nil
		}
		return len(keys) >= 3+e.cfg.Fleet.Namespaces, err
	})
}

// editInstancetype grows u1.medium from 2 to 3 vCPUs and 4Gi to 6Gi, the
// way `kubectl edit` would; the API server's generation bump is done by
// hand, since the fake clientset does not do it.
func (e *env) editInstancetype(ctx context.Context) (*stepResult, error) {
	its := e.clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes()
	it, err := its.Get(ctx, EditName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("demo: get %s: %w", EditName, err)
	}
	it = it.DeepCopy()
	it.Spec.CPU.Guest = 3
	it.Spec.Memory.Guest = resource.MustParse("6Gi")
	it.Generation++
	if _, err := its.Update(ctx, it, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("demo: edit %s: %w", EditName, err)
	}
	title := fmt.Sprintf("edit clusterinstancetype/%s: 2→3 vCPUs, 4Gi→6Gi", EditName)
	fmt.Fprintf(e.cfg.Out, "\n» %s\n", title)
	id := events.EventID(events.KindClusterInstancetype, string(it.UID), it.Generation)
	return e.follow(ctx, title, id, editSelects, target{
		sockets: 3, memory: it.Spec.Memory.Guest, instancetype: EditName,
		revisionSuffix: fmt.Sprintf("-%s-%d", it.UID, it.Generation),
	})
}

// requestSwitch moves the web tier from u1.small to u1.large, as
// `kvlive switch --from clusterinstancetype/u1.small --to clusterinstancetype/u1.large -l tier=web` does.
func (e *env) requestSwitch(ctx context.Context) (*stepResult, error) {
	title := fmt.Sprintf("switch clusterinstancetype/%s → clusterinstancetype/%s for -l %s", SwitchFrom, SwitchTo, SwitchSel)
	fmt.Fprintf(e.cfg.Out, "\n» %s\n", title)
	id, err := rollout.RequestSwitch(ctx, e.js, events.SwitchRequest{
		From:     events.Ref{Kind: events.KindClusterInstancetype, Name: SwitchFrom},
		To:       events.Ref{Kind: events.KindClusterInstancetype, Name: SwitchTo},
		Selector: SwitchSel,
	})
	if err != nil {
		return nil, err
	}
	to, err := e.clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes().Get(ctx, SwitchTo, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("demo: get %s: %w", SwitchTo, err)
	}
	return e.follow(ctx, title, id, switchSelects, target{
		sockets: to.Spec.CPU.Guest, memory: to.Spec.Memory.Guest, instancetype: SwitchTo,
		revisionSuffix: fmt.Sprintf("-%s-%d", to.UID, to.Generation),
	})
}

// follow shows the rollout's progress until every VM has an outcome, then
// checks each against the fleet and waits for the end state on the cluster.
func (e *env) follow(ctx context.Context, title, eventID string, selects func(vmShape) bool, want target) (*stepResult, error) {
	var bar *progressbar.ProgressBar
	if e.cfg.Progress {
		bar = progressbar.NewOptions(-1, progressbar.OptionSetWriter(e.cfg.Out), progressbar.OptionSetDescription("  VMs"),
			progressbar.OptionShowCount(), progressbar.OptionSetWidth(30), progressbar.OptionClearOnFinish())
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	p, err := rollout.Follow(ctx, e.js, eventID, func(p rollout.Progress) {
		if bar != nil {
			if bar.GetMax() != p.Planned {
				bar.ChangeMax(p.Planned)
			}
			_ = bar.Set(len(p.Outcomes))
		}
	})
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil {
		return nil, fmt.Errorf("demo: %s: %w", title, err)
	}
	if bar == nil {
		fmt.Fprintf(e.cfg.Out, "  %d of %d VMs have an outcome\n", len(p.Outcomes), p.Planned)
	}
	r := e.check(title, p, selects)
	if len(r.mismatches) == 0 {
		r.mismatches = e.checkCluster(ctx, selects, want)
	}
	if r.account, err = e.awaitVerdicts(ctx, eventID); err != nil {
		return nil, fmt.Errorf("demo: %s: %w", title, err)
	}
	return r, nil
}

// verdictDeadline is the demo's verdict deadline: what stands a minute
// after a VM moved is its verdict.
const verdictDeadline = time.Minute

// awaitVerdicts waits until kvlive's record holds KubeVirt's verdict on
// every VM the rollout moved, and returns that record.
func (e *env) awaitVerdicts(ctx context.Context, eventID string) (rollout.Account, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, verdictDeadline+30*time.Second,
		fmt.Errorf("KubeVirt's verdicts on the VMs moved not all stored within %s of the deadline", 30*time.Second))
	defer cancel()
	for {
		a, err := rollout.AccountOf(ctx, e.js, eventID)
		if err == nil {
			err = rollout.CountVerdicts(ctx, e.js, &a)
		}
		if err == nil && a.Awaited == 0 {
			return a, nil
		}
		select {
		case <-ctx.Done():
			return a, errors.Join(context.Cause(ctx), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// check compares the step's outcomes with the fleet: every VM in reach has
// one, with the result its shape expects, and no other VM has.
func (e *env) check(title string, p rollout.Progress, selects func(vmShape) bool) *stepResult {
	r := &stepResult{title: title, progress: p}
	for _, s := range e.shapes {
		if !selects(s) {
			continue
		}
		r.reached++
		o, ok := p.Outcomes[s.uid]
		switch {
		case !ok:
			r.mismatches = append(r.mismatches, fmt.Sprintf("%s/%s: no outcome", s.namespace, s.name))
		case o.Result != expected(s):
			r.mismatches = append(r.mismatches, fmt.Sprintf("%s/%s: %s, expected %s (%s)", s.namespace, s.name, o.Result, expected(s), o.Reason+o.Error))
		}
	}
	if len(p.Outcomes) != r.reached {
		r.mismatches = append(r.mismatches, fmt.Sprintf("%d outcomes for %d VMs in reach", len(p.Outcomes), r.reached))
	}
	return r
}

// target is the end state a step's VMs must reach on the cluster.
type target struct {
	sockets      uint32
	memory       resource.Quantity
	instancetype string
	// revisionSuffix ends the name of the revision the VM must be pinned to:
	// `-<object uid>-<generation>`.
	revisionSuffix string
}

// checkCluster waits for the stand-in to act on every moved VM, then lists
// the VMs the cluster does not show at their expected state.
func (e *env) checkCluster(ctx context.Context, selects func(vmShape) bool, want target) []string {
	var bad []string
	_ = poll(ctx, time.Minute, "waiting for the cluster to settle", func() (bool, error) {
		bad = bad[:0]
		for _, s := range e.shapes {
			if selects(s) {
				if why := e.checkVM(ctx, s, want); why != "" {
					bad = append(bad, s.namespace+"/"+s.name+": "+why)
				}
			}
		}
		return len(bad) == 0, nil
	})
	return bad
}

func (e *env) checkVM(ctx context.Context, s vmShape, want target) string {
	vm, err := e.clients.Virt.KubevirtV1().VirtualMachines(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	ref := vm.Status.InstancetypeRef
	if vm.Spec.Instancetype.Name != want.instancetype || ref == nil || ref.Name != want.instancetype ||
		ref.ControllerRevisionRef == nil || !strings.HasSuffix(ref.ControllerRevisionRef.Name, want.revisionSuffix) {
		return "not pinned to the new generation of " + want.instancetype
	}
	switch expected(s) {
	case events.ResultRestart:
		for _, c := range vm.Status.Conditions {
			if c.Type == virtv1.VirtualMachineRestartRequired {
				return ""
			}
		}
		return "no RestartRequired condition"
	case events.ResultLive:
		vmi, err := e.clients.Virt.KubevirtV1().VirtualMachineInstances(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if vmi.Spec.Domain.CPU.Sockets != want.sockets || !vmi.Spec.Domain.Memory.Guest.Equal(want.memory) {
			return fmt.Sprintf("VMI at %d sockets/%s, expected %d/%s", vmi.Spec.Domain.CPU.Sockets, vmi.Spec.Domain.Memory.Guest, want.sockets, &want.memory)
		}
	}
	return ""
}
