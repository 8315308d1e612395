package applier

import (
	"context"
	"time"

	virtv1 "kubevirt.io/api/core/v1"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"kvlive/events"
	"kvlive/instancetype"
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
		a.cfg.Metrics.Observed("not-watched")
		a.cfg.Log.Info("not watching a moved VM for KubeVirt's reaction: too many watched at once", "vm", plan.VM.String(), "limit", maxObservers)
		return
	}
	want := instancetype.ExpectLive(out.Changes)
	a.observing.Add(1)
	go func() {
		defer func() { <-a.observers; span.End(); a.observing.Done() }()
		// Bound by the applier's own life: on shutdown the span ends now,
		// so the tracer provider still exports it.
		ctx, cancel := context.WithTimeout(ctx, a.cfg.ObserveTimeout)
		defer cancel()
		ticker := time.NewTicker(observeEvery)
		defer ticker.Stop()
		var seen reactionSeen
		for {
			vm, vmi := a.cfg.Fleet.VM(plan.VM.Namespace, plan.VM.Name), a.cfg.Fleet.VMI(plan.VM.Namespace, plan.VM.Name)
			if observed := seen.look(span, out.Result, want, vm, vmi); observed != "" {
				a.cfg.Metrics.Observed(string(observed))
				return
			}
			select {
			case <-ctx.Done():
				attrs := []attribute.KeyValue{attribute.String("kvlive.observe.timeout", a.cfg.ObserveTimeout.String())}
				if pending := instancetype.HotplugPending(vmi); len(pending) > 0 {
					attrs = append(attrs, attribute.StringSlice("kvlive.hotplug.pending", pending))
				}
				span.AddEvent("not observed", trace.WithAttributes(attrs...))
				a.cfg.Metrics.Observed("not-observed")
				a.cfg.Log.Info("KubeVirt's reaction to a moved VM not seen in time", "vm", plan.VM.String(),
					"expected", out.Result, "timeout", a.cfg.ObserveTimeout, "pending", instancetype.HotplugPending(vmi))
				return
			case <-ticker.C:
			}
		}
	}()
}

// reactionSeen is what an observer has recorded so far, so each step of
// KubeVirt's reaction is one span event.
type reactionSeen struct {
	requested, refused bool
}

// look records what KubeVirt shows now on the VM and its VMI, as its
// virt-controller reports it: RestartRequired on the VM; a hotplug it asked
// for (HotVCPUChange/HotMemoryChange on the VMI, the new values in the VMI
// spec); a hotplug it refused for now (a Failure condition with
// HotPlugCPUError/HotPlugMemoryError, which it retries); the hotplug done
// (the conditions gone, the VMI's status at the new values). It reports
// what it observed once the reaction is complete, "" until then.
func (s *reactionSeen) look(span trace.Span, expected events.Result, want instancetype.LiveWant, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) events.Result {
	if vm != nil {
		if c, ok := instancetype.RestartRequired(vm); ok {
			span.AddEvent("RestartRequired seen", trace.WithAttributes(
				attribute.String("kvlive.expected", string(expected)), attribute.String("kvlive.kubevirt.message", c.Message)))
			span.SetAttributes(attribute.String("kvlive.observed", string(events.ResultRestart)))
			return events.ResultRestart
		}
		if c, ok := instancetype.HotplugRefused(vm); ok && !s.refused {
			s.refused = true
			span.AddEvent("hotplug refused for now (KubeVirt retries)", trace.WithAttributes(
				attribute.String("kvlive.kubevirt.reason", c.Reason), attribute.String("kvlive.kubevirt.message", c.Message)))
		}
	}
	if expected != events.ResultLive || vmi == nil || !want.SeenOn(vmi) {
		return ""
	}
	if pending := instancetype.HotplugPending(vmi); len(pending) > 0 {
		if !s.requested {
			s.requested = true
			span.AddEvent("hotplug requested", trace.WithAttributes(append(vmiAttributes(vmi), attribute.StringSlice("kvlive.hotplug.conditions", pending))...))
		}
		return ""
	}
	if !want.Reached(vmi) {
		return ""
	}
	span.AddEvent("live change seen on the VMI", trace.WithAttributes(vmiAttributes(vmi)...))
	span.SetAttributes(attribute.String("kvlive.observed", string(events.ResultLive)))
	return events.ResultLive
}

// vmiAttributes are the VMI's sockets and guest memory, as span attributes.
func vmiAttributes(vmi *virtv1.VirtualMachineInstance) []attribute.KeyValue {
	var kv []attribute.KeyValue
	if c := vmi.Spec.Domain.CPU; c != nil {
		kv = append(kv, attribute.Int("kvlive.vmi.sockets", int(c.Sockets)))
	}
	if m := vmi.Spec.Domain.Memory; m != nil && m.Guest != nil {
		kv = append(kv, attribute.String("kvlive.vmi.memory", instancetype.QuantityString(m.Guest)))
	}
	return kv
}
