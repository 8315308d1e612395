// Package standin is a stand-in for KubeVirt's virt-controller, for the
// demo and the integration tests only; `kvlive run` never uses it.
//
// It plays the two parts of virt-controller that kvlive's rollouts depend on:
//
//   - revisions: when a VM references an instance type or preference it has
//     no snapshot of (a new VM, or a switch), it stores the object in a
//     ControllerRevision and pins the VM's status to it;
//   - live update: when a running VM's pin moves, it compares the generation
//     the VMI booted with against the new one and, under LiveUpdate,
//     hot-plugs CPU sockets and memory into the VMI within the VMI's limits,
//     or sets the VM's RestartRequired condition.
//
// It deliberately shares no code with kvlive's predictions (package
// instancetype): tests cross-check them against this independent
// implementation of the same KubeVirt rules, written from
// pkg/virt-controller/watch/vm/vm.go at v1.9.0. It covers the common rules
// (sockets, cores/threads, memory with maxGuest, guestAtBoot and
// migratability, nodeSelector, memory overcommit, RestartRequired decided
// afresh on each sync, preferred values the VM overrides, any other field
// forcing a restart), not every KubeVirt corner. The conformance table in
// integration/conformance_test.go runs it and KubeVirt's real
// virt-controller through the same rows, so it cannot drift unnoticed.
package standin
