// Package instancetype is kvlive's model of KubeVirt's instance types and
// preferences, as KubeVirt v1.9.0 implements them (kubevirt's own
// pkg/instancetype: find, revision, apply, expand): which object a VM
// references, where and to which generation it is pinned, how KubeVirt names
// and fills the ControllerRevision snapshots, how an instance type and a
// preference expand into a VM, and what KubeVirt's VM controller does when a
// pin moves from one generation to another (the live-update rules: which
// changes it hot-plugs into the running VMI, which set RestartRequired, which
// wait for the next boot).
//
// It is pure: plain objects in, plain values out, no informers, no clients,
// no NATS. What it needs to read from a cluster it asks of small interfaces
// (Lookup, Objects) that the process's informer cache implements and tests
// fill from plain maps, so the planner stage, the applier's re-plan,
// `kvlive plan` against a cluster and `kvlive plan --offline` share one
// decision. Each rule names the KubeVirt v1.9.0 code it follows.
package instancetype
