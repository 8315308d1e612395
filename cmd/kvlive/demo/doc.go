// Package demo runs kvlive's whole pipeline in one process with nothing
// installed: an in-memory cluster (client-go and KubeVirt fake clientsets)
// seeded with a fleet of VMs, the virt-controller stand-in, an embedded NATS
// server, and the real watcher, planner and applier. It edits an instance
// type, then switches part of the fleet to another one, shows progress, and
// checks every VM's outcome and end state against what the fleet's shape
// says it must be.
package demo
