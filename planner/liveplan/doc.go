// Package liveplan predicts, per VM and per field, what KubeVirt's VM
// controller does when a VM's instance type or preference pin moves from one
// generation to another: which changes it hot-plugs into the running VMI,
// which set RestartRequired, and which wait for the next boot.
//
// It is a pure function over data (the VM, its VMI, both generations' specs
// and the KubeVirt CR), with no clients, so the planner stage, `kvlive plan`
// against a cluster and `kvlive plan --offline` share one decision. Each rule
// names the KubeVirt v1.9.0 code it follows.
package liveplan
