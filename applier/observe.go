package applier

import (
	"context"
	"strconv"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	virtv1 "kubevirt.io/api/core/v1"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"kvlive/events"
)

// maxObservers bounds how many moved VMs are watched at once.
const maxObservers = 4096

// observeEvery is how often a watched VM is looked at in the fleet's caches.
const observeEvery = 200 * time.Millisecond

// observe watches a VM the applier just moved for KubeVirt's reaction and
// records what it sees on the VM's span, then ends the span. It returns at
// once: the watching happens in the background and reads only the fleet's
// caches, so the outcome (already published) never waits for it.
func (a *Applier) observe(ctx context.Context, span trace.Span, plan events.Plan, out events.Outcome) {
	watch := out.Wrote && (out.Result == events.ResultLive || out.Result == events.ResultRestart) && a.cfg.ObserveTimeout > 0
	if !watch {
		span.End()
		return
	}
	select {
	case a.observers <- struct{}{}:
	default:
		span.AddEvent("not observed: too many VMs watched at once")
		span.End()
		return
	}
	want := expectation(out.Changes)
	a.observing.Add(1)
	go func() {
		defer func() { <-a.observers; span.End(); a.observing.Done() }()
		// Bound by the applier's own life: on shutdown the span ends now,
		// so the tracer provider still exports it.
		ctx, cancel := context.WithTimeout(ctx, a.cfg.ObserveTimeout)
		defer cancel()
		ticker := time.NewTicker(observeEvery)
		defer ticker.Stop()
		for {
			vm, vmi := a.cfg.Fleet.VM(plan.VM.Namespace, plan.VM.Name), a.cfg.Fleet.VMI(plan.VM.Namespace, plan.VM.Name)
			if vm != nil && restartRequired(vm) {
				span.AddEvent("RestartRequired seen", trace.WithAttributes(attribute.String("kvlive.expected", string(out.Result))))
				span.SetAttributes(attribute.String("kvlive.observed", string(events.ResultRestart)))
				return
			}
			if out.Result == events.ResultLive && vmi != nil && want.seenOn(vmi) {
				span.AddEvent("live change seen on the VMI", trace.WithAttributes(want.attributes(vmi)...))
				span.SetAttributes(attribute.String("kvlive.observed", string(events.ResultLive)))
				return
			}
			select {
			case <-ctx.Done():
				span.AddEvent("not observed", trace.WithAttributes(attribute.String("kvlive.observe.timeout", a.cfg.ObserveTimeout.String())))
				return
			case <-ticker.C:
			}
		}
	}()
}

// liveWant is what a live plan expects the VMI to show.
type liveWant struct {
	sockets uint32
	memory  *resource.Quantity
}

func expectation(changes []events.Change) liveWant {
	var w liveWant
	for _, c := range changes {
		if c.Class != "live" {
			continue
		}
		switch c.Field {
		case "cpu.sockets":
			if n, err := strconv.ParseUint(c.To, 10, 32); err == nil {
				w.sockets = uint32(n)
			}
		case "memory.guest":
			if q, err := resource.ParseQuantity(c.To); err == nil {
				w.memory = &q
			}
		}
	}
	return w
}

// seenOn reports whether the VMI's spec shows every expected live value.
func (w liveWant) seenOn(vmi *virtv1.VirtualMachineInstance) bool {
	d := vmi.Spec.Domain
	if w.sockets != 0 && (d.CPU == nil || d.CPU.Sockets != w.sockets) {
		return false
	}
	if w.memory != nil && (d.Memory == nil || d.Memory.Guest == nil || !d.Memory.Guest.Equal(*w.memory)) {
		return false
	}
	return true
}

func (w liveWant) attributes(vmi *virtv1.VirtualMachineInstance) []attribute.KeyValue {
	var kv []attribute.KeyValue
	if c := vmi.Spec.Domain.CPU; c != nil {
		kv = append(kv, attribute.Int("kvlive.vmi.sockets", int(c.Sockets)))
	}
	if m := vmi.Spec.Domain.Memory; m != nil && m.Guest != nil {
		kv = append(kv, attribute.String("kvlive.vmi.memory", m.Guest.String()))
	}
	return kv
}

func restartRequired(vm *virtv1.VirtualMachine) bool {
	for _, c := range vm.Status.Conditions {
		if c.Type == virtv1.VirtualMachineRestartRequired && c.Status == k8scorev1.ConditionTrue {
			return true
		}
	}
	return false
}
